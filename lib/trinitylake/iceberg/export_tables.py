"""Exports that carry the tables (`tlake export --with-tables`, the export job's ``with_tables``).

A full export copies what TrinityLake reaches from the root (roots, nodes, definitions) and
stops at each table's ``metadata_location``. With tables, for every Iceberg table of the exported
version whose metadata lives under the lakehouse's root, this module copies the table too, as
Iceberg's ``rewrite_table_path`` stages it, and copies the files as well:

* the current metadata file, rewritten: every string that is an absolute path under the source
  root becomes the same path under the target root (``location``, ``metadata-log``, snapshots'
  ``manifest-list``, statistics files, ``write.*.path`` properties);
* the previous metadata files of its ``metadata-log`` that still exist, rewritten the same way
  (the TableDefs' ``previous_metadata_location`` and superseded definitions point at them);
* per retained snapshot (``table_snapshots: all``, the default) or the current one only
  (``current``: the exported metadata then lists that snapshot alone): its manifest list and
  manifests, rewritten (`avro_rewrite`: paths, and each manifest's new length in the list),
  and the data and delete files they list as live, plus statistics files, copied as bytes.

Every file keeps its path relative to the root. The export's TableDefs are rewritten by the copy
itself (`trinitylake.jobs.export.plan.exported_table_def_bytes`, the same prefix rule), so
the exported lakehouse points at the copied metadata. Files are written with exclusive creates
before the exported root, so a crashed export stays invisible, and a re-run keeps a file that is
already there with exactly the computed bytes (rewriting is deterministic) and refuses one with
other bytes. Tables whose metadata lives outside the lakehouse's storage are listed and left as
pointers to where they are; so are data files outside it. The copy runs on the driver's threads.

After the export completes, `seal_export_records` removes the source's location from the
export's own bookkeeping under ``_export/<name>/`` (the plan's source column keeps paths relative
to the source root): nothing at the target names the source.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trinitylake.errors import AlreadyExistsError, StorageError
from trinitylake.format import definitions as D
from trinitylake.iceberg.avro_rewrite import map_strings, read_records, rewrite_avro
from trinitylake.lakehouse import LakehouseView
from trinitylake.storage import Storage, is_absolute, join_uri, parse_uri

if TYPE_CHECKING:
    from trinitylake.config import ExportConfig
    from trinitylake.lakehouse import Lakehouse, RootRef
    from trinitylake.maintenance.results import JobResult

log = logging.getLogger(__name__)

SNAPSHOT_MODES = ("all", "current")


@dataclass
class TablesResult:
    """What the table copy did: counts, and one line per table left as a pointer."""

    tables: int = 0
    copied_tables: int = 0
    snapshots: int = 0
    files: int = 0
    copied: int = 0
    skipped: int = 0
    rewritten: int = 0
    bytes_copied: int = 0
    bytes_skipped: int = 0
    pointers: list[str] = field(default_factory=list)
    external_files: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"tables": self.tables, "copied_tables": self.copied_tables, "snapshots": self.snapshots,
                "files": self.files, "copied": self.copied, "skipped": self.skipped, "rewritten": self.rewritten,
                "bytes_copied": self.bytes_copied, "bytes_skipped": self.bytes_skipped,
                "left_as_pointers": list(self.pointers), "external_files": self.external_files}


class PathMap:
    """Absolute paths under the source root -> the same paths under the target root."""

    def __init__(self, source: Storage, target: Storage):
        self.source, self.target = source, target

    def relative(self, location: str) -> str | None:
        """Path of `location` relative to the source root; None outside it (or not a path)."""
        if not is_absolute(location):
            return None
        try:
            rel = self.source.relative(location)
        except Exception:  # noqa: BLE001 - an unparsable string is not one of our paths
            return None
        return rel or None

    def __call__(self, value: str) -> str:
        rel = self.relative(value)
        return value if rel is None else join_uri(parse_uri(self.target.root).uri, rel)


# ---- rewriting ------------------------------------------------------------------------------------
def _is_gzip(data: bytes) -> bool:
    return data[:2] == b"\x1f\x8b"


def rewrite_metadata_json(data: bytes, paths: Callable[[str], str], keep_snapshots: set[int] | None = None) -> bytes:
    """Table metadata JSON with every path string mapped; with `keep_snapshots`, only those
    snapshots (and the log entries, refs and statistics of them) are kept. Gzip stays gzip."""
    zipped = _is_gzip(data)
    obj = json.loads(gzip.decompress(data) if zipped else data)
    if keep_snapshots is not None:
        obj["snapshots"] = [s for s in obj.get("snapshots", []) if s.get("snapshot-id") in keep_snapshots]
        if "snapshot-log" in obj:
            obj["snapshot-log"] = [e for e in obj["snapshot-log"] if e.get("snapshot-id") in keep_snapshots]
        if "refs" in obj:
            obj["refs"] = {k: v for k, v in obj["refs"].items() if v.get("snapshot-id") in keep_snapshots}
        for k in ("statistics", "partition-statistics"):
            if k in obj:
                obj[k] = [s for s in obj[k] if s.get("snapshot-id") in keep_snapshots]
    out = json.dumps(map_strings(obj, paths), separators=(",", ":")).encode()
    return gzip.compress(out, mtime=0) if zipped else out


def _manifest_list_fn(paths: Callable[[str], str], lengths: dict[str, int]) -> Callable[[dict], dict]:
    def fn(rec: dict[str, Any]) -> dict[str, Any]:
        rec = map_strings(rec, paths)
        n = lengths.get(rec.get("manifest_path", ""))
        if n is not None:
            rec["manifest_length"] = n
        return rec

    return fn


# ---- copying -----------------------------------------------------------------------------------------
class _Writer:
    """Exclusive creates at the target; an existing file is kept when it holds exactly these bytes."""

    def __init__(self, target: Storage, result: TablesResult):
        self.target, self.result = target, result

    def put(self, rel: str, data: bytes, rewritten: bool) -> None:
        self.result.files += 1
        try:
            self.target.create_exclusive(rel, data)
        except FileExistsError:
            have = self.target.read(rel)
            if hashlib.md5(have, usedforsecurity=False).digest() != hashlib.md5(data, usedforsecurity=False).digest():
                raise AlreadyExistsError(f"{self.target.uri(rel)} exists with other content than the exported table "
                                         f"file; export to another location") from None
            self.result.skipped += 1
            self.result.bytes_skipped += len(data)
            return
        self.result.copied += 1
        self.result.bytes_copied += len(data)
        self.result.rewritten += rewritten


def _read(storage: Storage, rel: str, what: str) -> bytes:
    try:
        return storage.read(rel)
    except FileNotFoundError:
        raise StorageError(f"{what} {storage.uri(rel)} is missing; the table cannot be exported") from None


def _live_files(manifest: bytes) -> list[str]:
    """Data and delete files a manifest lists as live (added or existing, not deleted)."""
    _, recs = read_records(manifest)
    return [r["data_file"]["file_path"] for r in recs if r.get("status") != 2]


def _stat_paths(meta: dict[str, Any], keep: set[int] | None) -> list[str]:
    out = []
    for k in ("statistics", "partition-statistics"):
        for s in meta.get(k) or []:
            if (keep is None or s.get("snapshot-id") in keep) and s.get("statistics-path"):
                out.append(s["statistics-path"])
    return out


def copy_table(name: str, metadata_location: str, source: Storage, target: Storage, snapshots: str,
               result: TablesResult, pmap: Callable[[Callable[[Any], Any], list], list]) -> None:
    """Copy one table whose metadata file is under the source root (see the module doc)."""
    paths = PathMap(source, target)
    writer = _Writer(target, result)
    meta_rel = paths.relative(metadata_location)
    assert meta_rel is not None
    raw = _read(source, meta_rel, f"table {name}: metadata file")
    meta = json.loads(gzip.decompress(raw) if _is_gzip(raw) else raw)
    current = meta.get("current-snapshot-id")
    if snapshots == "current":
        keep: set[int] | None = {current} if current is not None and current >= 0 else set()
    else:
        keep = None
    snaps = [s for s in meta.get("snapshots", []) if keep is None or s.get("snapshot-id") in keep]
    result.snapshots += len(snaps)

    # Manifests (deduplicated across snapshots), then what they list, then the lists.
    lists: dict[str, bytes] = {}
    manifests: dict[str, int] = {}  # source rel -> rewritten length
    for s in snaps:
        ml = s.get("manifest-list")
        if not ml:
            continue
        rel = paths.relative(ml)
        if rel is None:
            result.external_files += 1
            continue
        lists[rel] = _read(source, rel, f"table {name}: manifest list")
    manifest_rels: dict[str, None] = {}
    for data in lists.values():
        for r in read_records(data)[1]:
            rel = paths.relative(r["manifest_path"])
            if rel is None:
                result.external_files += 1
            else:
                manifest_rels[rel] = None
    data_rels: dict[str, None] = {}

    def do_manifest(rel: str) -> tuple[str, int, list[str]]:
        data = _read(source, rel, f"table {name}: manifest")
        out = rewrite_avro(data, lambda r: map_strings(r, paths), paths)
        writer.put(rel, out, True)
        return rel, len(out), _live_files(data)

    for rel, length, files in pmap(do_manifest, list(manifest_rels)):
        manifests[rel] = length
        for f in files:
            frel = paths.relative(f)
            if frel is None:
                result.external_files += 1
            else:
                data_rels[frel] = None
    for p in _stat_paths(meta, keep):
        srel = paths.relative(p)
        if srel is None:
            result.external_files += 1
        else:
            data_rels[srel] = None

    def do_file(rel: str) -> None:
        writer.put(rel, _read(source, rel, f"table {name}: data file"), False)

    pmap(do_file, list(data_rels))
    lengths = {paths(source.uri(rel)): n for rel, n in manifests.items()}
    for rel, data in lists.items():
        writer.put(rel, rewrite_avro(data, _manifest_list_fn(paths, lengths), paths), True)

    # Previous metadata files that still exist (best effort), then the current one, last.
    for entry in meta.get("metadata-log") or []:
        prel = paths.relative(str(entry.get("metadata-file", "")))
        if prel is None or prel == meta_rel:
            continue
        try:
            prev = source.read(prel)
        except FileNotFoundError:
            continue
        writer.put(prel, rewrite_metadata_json(prev, paths), True)
    writer.put(meta_rel, rewrite_metadata_json(raw, paths, keep), True)


def export_tables(lakehouse: Lakehouse, ref: RootRef, source: Storage, target: Storage, *, snapshots: str = "all",
                  threads: int = 8) -> TablesResult:
    """Copy every Iceberg table of version `ref` whose metadata is under the source root.

    Raises:
        StorageError: a file a table references is missing at the source.
        AlreadyExistsError: the target holds another file under a table file's name.
    """
    if snapshots not in SNAPSHOT_MODES:
        from trinitylake.errors import ValidationError

        raise ValidationError(f"table_snapshots must be one of {', '.join(SNAPSHOT_MODES)}, got {snapshots!r}")
    result = TablesResult()
    view = LakehouseView(lakehouse, ref)
    pool = ThreadPoolExecutor(max_workers=max(1, threads))

    def pmap(fn: Callable[[Any], Any], items: list) -> list:
        return list(pool.map(fn, items))

    try:
        for ns in view.list_namespaces():
            for t in view.list_tables(ns):
                name = f"{ns}.{t}"
                result.tables += 1
                d = view.load_table(ns, t)
                fmt = D.table_format_name(d)
                loc = d.format_properties.get("metadata_location")
                if fmt != "ICEBERG":
                    result.pointers.append(f"{name}: a {fmt} table; left as a pointer")
                    continue
                if not loc:
                    result.pointers.append(f"{name}: no metadata_location; nothing to copy")
                    continue
                if not is_absolute(loc):
                    loc = source.uri(loc)
                if PathMap(source, target).relative(loc) is None:
                    result.pointers.append(f"{name}: metadata outside the lakehouse's storage ({loc}); "
                                           f"left as a pointer")
                    continue
                copy_table(name, loc, source, target, snapshots, result, pmap)
                result.copied_tables += 1
    finally:
        pool.shutdown(wait=True)
    for line in result.pointers:
        log.info("export with tables: %s", line)
    return result


# ---- the export's own records ------------------------------------------------------------------------
def seal_export_records(target: Storage, export_dir: str, source: Storage) -> int:
    """Remove the source's location from a completed export's bookkeeping: ``export.json``
    loses ``source`` (``source_id`` still names the lakehouse) and the plan parts' ``source``
    column keeps paths relative to the source root. Returns the files rewritten."""
    from trinitylake.jobs.export import plan as X

    n = 0
    meta = X.read_json(target, f"{export_dir}/export.json")
    if meta is not None and "source" in meta:
        meta.pop("source")
        meta["source_location"] = "sealed: an export with tables names nothing of its source"
        target.write(f"{export_dir}/export.json", X.json_bytes(meta))
        n += 1
    plan_dir = f"{export_dir}/plan"
    for f in list(target.list(plan_dir)):
        if not f.path.endswith(".parquet"):
            continue
        rows = X.read_plan_part(target.read(f.path))
        if not any(is_absolute(r.source) for r in rows):
            continue
        fixed = [r._replace(source=source.relative(r.source) or r.source) for r in rows]
        target.write(f.path, X.table_bytes(X.plan_table(fixed)))
        n += 1
    return n


def export_tables_phase(lakehouse: Lakehouse, ref: RootRef, source: Storage, target: Storage, cfg: ExportConfig,
                        result: JobResult,
                        io_threads: int) -> TablesResult:
    """The export job's table phase (`trinitylake.jobs.export.job`): copy the tables of `ref` on
    the driver and record what was done in the job's result."""
    snapshots = cfg.table_snapshots
    r = export_tables(lakehouse, ref, source, target, snapshots=snapshots, threads=max(4, io_threads))
    result.details["tables"] = {**r.to_dict(), "snapshots_mode": snapshots, "where": "driver"}
    result.counts.update({"tables": r.tables, "tables_copied": r.copied_tables, "table_files": r.files,
                          "table_files_copied": r.copied, "table_files_skipped": r.skipped})
    result.bytes["tables"] = r.bytes_copied + r.bytes_skipped
    return r
