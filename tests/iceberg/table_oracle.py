"""The tests' own oracle of Iceberg table files: which files a table's metadata reaches, read
with nothing of the library or PyIceberg (plain JSON, and a small Avro reader written here from
the Avro specification), so a test can check the table jobs' deletions against it.

* `reach(meta, ids)`: the manifest lists, manifests and live data/delete files of snapshots
  `ids`, and their statistics files;
* `expected_live(...)`: what a table keeps after a job: every snapshot of its current
  metadata, the metadata file and its log, and for every root that keeps table metadata the
  metadata file it points at, that file's current snapshot and its log;
* `retained_metadata(lh_uri)`: which metadata files those roots point at: retained versions,
  pinned versions, pinned exports' roots and live distributed transactions' running and
  beginning roots, each table's pointer read by the lakehouse oracle's own reader
  (`tests.oracle.tables`), not by the library the jobs use;
* `current_metadata(lh_uri)`: each table's current metadata file, by the latest listed
  version's pointers (the same reader);
* `live_problems(...)`: what is missing or kept against all of it, as the table tests assert
  it after a job.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import struct
import zlib
from typing import Any


def local(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


# ---- Avro object container files (the spec's binary encoding) -------------------------------------
class _Reader:
    def __init__(self, data: bytes):
        self.b = io.BytesIO(data)

    def long(self) -> int:
        shift = n = 0
        while True:
            c = self.b.read(1)[0]
            n |= (c & 0x7F) << shift
            shift += 7
            if not c & 0x80:
                return (n >> 1) ^ -(n & 1)

    def raw(self, n: int) -> bytes:
        return self.b.read(n)

    def value(self, schema: Any, names: dict[str, Any]) -> Any:
        if isinstance(schema, list):
            return self.value(schema[self.long()], names)
        if isinstance(schema, str):
            if schema in names:
                return self.value(names[schema], names)
            return self.primitive(schema)
        t = schema["type"]
        if t == "record":
            names[schema["name"]] = schema
            return {f["name"]: self.value(f["type"], names) for f in schema["fields"]}
        if t == "array":
            out = []
            while (n := self.long()) != 0:
                if n < 0:
                    n = -n
                    self.long()
                out.extend(self.value(schema["items"], names) for _ in range(n))
            return out
        if t == "map":
            m = {}
            while (n := self.long()) != 0:
                if n < 0:
                    n = -n
                    self.long()
                for _ in range(n):
                    k = self.raw(self.long()).decode()
                    m[k] = self.value(schema["values"], names)
            return m
        if t == "fixed":
            names[schema["name"]] = schema
            return self.raw(schema["size"])
        if t == "enum":
            return schema["symbols"][self.long()]
        return self.primitive(t)

    def primitive(self, t: str) -> Any:
        if t == "null":
            return None
        if t == "boolean":
            return self.raw(1) != b"\x00"
        if t in ("int", "long"):
            return self.long()
        if t == "float":
            return struct.unpack("<f", self.raw(4))[0]
        if t == "double":
            return struct.unpack("<d", self.raw(8))[0]
        if t == "bytes":
            return self.raw(self.long())
        if t == "string":
            return self.raw(self.long()).decode()
        raise ValueError(f"unknown Avro type {t!r}")


def avro_records(path: str) -> list[dict[str, Any]]:
    data = open(local(path), "rb").read()
    assert data[:4] == b"Obj\x01", path
    r = _Reader(data)
    r.raw(4)
    meta = r.value({"type": "map", "values": "bytes"}, {})
    sync = r.raw(16)
    schema = json.loads(meta["avro.schema"])
    codec = meta.get("avro.codec", b"null").decode()
    out = []
    while r.b.tell() < len(data):
        count = r.long()
        block = r.raw(r.long())
        if codec == "deflate":
            block = zlib.decompress(block, -15)
        elif codec != "null":
            raise ValueError(f"codec {codec} not supported by the oracle")
        br = _Reader(block)
        out.extend(br.value(schema, {}) for _ in range(count))
        assert r.raw(16) == sync
    return out


# ---- table metadata ---------------------------------------------------------------------------------
def metadata(path: str) -> dict[str, Any]:
    data = open(local(path), "rb").read()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def reach(meta: dict[str, Any], ids: set[int] | None = None) -> set[str]:
    """Local paths of the files snapshots `ids` (None: all) of `meta` reach."""
    out: set[str] = set()
    for s in meta.get("snapshots") or []:
        if ids is not None and s["snapshot-id"] not in ids:
            continue
        ml = local(s["manifest-list"])
        out.add(ml)
        for m in avro_records(ml):
            out.add(local(m["manifest_path"]))
            for e in avro_records(m["manifest_path"]):
                if e["status"] != 2:
                    out.add(local(e["data_file"]["file_path"]))
    for k in ("statistics", "partition-statistics"):
        for st in meta.get(k) or []:
            if ids is None or st["snapshot-id"] in ids:
                out.add(local(st["statistics-path"]))
    return out


def log_of(meta: dict[str, Any]) -> set[str]:
    return {local(e["metadata-file"]) for e in meta.get("metadata-log") or []}


def expected_live(current: list[str], retained: list[str]) -> set[str]:
    """What must exist after a table job: for each table's current metadata file (`current`)
    every snapshot, the file and its log; for each metadata file a retained lakehouse version
    points at (`retained`) its current snapshot, the file and its log."""
    out: set[str] = set()
    for loc in current:
        m = metadata(loc)
        out |= reach(m) | log_of(m) | {local(loc)}
    for loc in retained:
        m = metadata(loc)
        cur = m.get("current-snapshot-id")
        out |= log_of(m) | {local(loc)} | (reach(m, {cur}) if cur not in (None, -1) else set())
    return out


def ever_reached(metadata_files: set[str]) -> set[str]:
    """Every file any of these metadata files reaches (their snapshots, themselves and their logs)."""
    out: set[str] = set()
    for loc in metadata_files:
        if os.path.exists(local(loc)):
            m = metadata(loc)
            out |= reach_existing(m) | log_of(m) | {local(loc)}
    return out


def reach_existing(meta: dict[str, Any]) -> set[str]:
    """`reach` of every snapshot, skipping manifest lists and manifests already deleted (their
    files were seen when they still existed)."""
    out: set[str] = set()
    for s in meta.get("snapshots") or []:
        ml = local(s["manifest-list"])
        out.add(ml)
        if not os.path.exists(ml):
            continue
        for m in avro_records(ml):
            mp = local(m["manifest_path"])
            out.add(mp)
            if os.path.exists(mp):
                out |= {local(e["data_file"]["file_path"]) for e in avro_records(mp) if e["status"] != 2}
    return out


# ---- the lakehouse side: which metadata files retained roots point at ---------------------------
def retained_metadata(lh_uri: str) -> dict[str, str]:
    """Local path of every metadata file a root that keeps table metadata points at -> the
    first root and table naming it (`tests.oracle.tables.table_roots`: retained and pinned
    versions, pinned exports, live distributed transactions), read by the lakehouse oracle."""
    from tests.oracle.tables import pointers_of

    return {local(u): label for u, label in pointers_of(lh_uri).items()}


def retained_versions(lh_uri: str) -> list[int]:
    """The versions that must stay readable (`tests.oracle.tables.retained_versions`)."""
    from tests.oracle.tables import versions_of

    return versions_of(lh_uri)


def live_problems(lh_uri: str, current: list[str], universe: set[str]) -> tuple[list[str], set[str]]:
    """What is wrong with the table files now, and the live set (`expected_live`): every live
    file missing, named with what keeps it (a table's current metadata, or the root and table
    whose pointer keeps it), and the files of `universe` (with everything the retained pointers
    ever reached) that nothing live reaches but that still exist."""
    pointed = retained_metadata(lh_uri)
    out: list[str] = []
    live: set[str] = set()
    keepers = [(loc, f"current metadata {local(loc)}", None) for loc in current]
    keepers += [(loc, f"{label} -> {loc}", "current") for loc, label in sorted(pointed.items())]
    for loc, who, only in keepers:
        try:
            m = metadata(loc)
            cur = m.get("current-snapshot-id")
            ids = None if only is None else ({cur} if cur not in (None, -1) else set())
            files = log_of(m) | {local(loc)} | reach(m, ids)
        except FileNotFoundError as e:  # the metadata file, a manifest list or a manifest is gone
            out.append(f"{who}: {e.filename} is missing")
            continue
        live |= files
        gone = sorted(p for p in files if not os.path.exists(p))
        out += [f"{who}: {p} is missing" for p in gone[:3]]
    left = sorted(p for p in (universe | ever_reached(set(pointed))) - live if os.path.exists(p))
    out += [f"kept though nothing live reaches it: {p}" for p in left[:5]]
    return out, live


def current_metadata(lh_uri: str) -> dict[str, str]:
    """``namespace.table`` -> local path of the metadata file each table of the latest listed
    version points at (its current metadata), read by the lakehouse oracle."""
    from tests.format.oracle import root_name
    from tests.oracle.expect import latest_version, oracle_for
    from tests.oracle.tables import table_pointers

    o = oracle_for(lh_uri)
    return {n: local(u) for n, u in table_pointers(o, f"{o.root}/{root_name(latest_version(o))}").items()}
