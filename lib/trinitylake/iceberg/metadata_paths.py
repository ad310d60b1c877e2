"""The paths an Iceberg table's files hold: where they point, and the same files pointing
elsewhere.

* `PathMap`: absolute paths under a source root -> the same paths under a target root;
* `rewrite_metadata_json`: a table metadata file with every path mapped (gzip stays gzip),
  optionally keeping only some snapshots;
* `manifest_list_fn`: the record function that rewrites a manifest list (paths, and each
  rewritten manifest's new length) through `trinitylake.iceberg.avro_rewrite.rewrite_avro`;
* `live_files`, `stat_files`: the data, delete and statistics files a manifest or a metadata
  file lists (with their sizes).

Nothing here reads or writes storage, nor knows what uses it (the export's table phase,
`trinitylake.jobs.export.tables`).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable

from trinitylake.iceberg.avro_rewrite import map_strings, read_records
from trinitylake.json_data import JsonObject
from trinitylake.storage import Storage, is_absolute, join_uri, parse_uri


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
def is_gzip(data: bytes) -> bool:
    """Whether `data` is gzip (Iceberg writes ``.gz.metadata.json`` files)."""
    return data[:2] == b"\x1f\x8b"


def rewrite_metadata_json(data: bytes, paths: Callable[[str], str], keep_snapshots: set[int] | None = None) -> bytes:
    """Table metadata JSON with every path string mapped; with `keep_snapshots`, only those
    snapshots (and the log entries, refs and statistics of them) are kept. Gzip stays gzip."""
    zipped = is_gzip(data)
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


def manifest_list_fn(paths: Callable[[str], str], lengths: dict[str, int]) -> Callable[[dict], dict]:
    def fn(rec: JsonObject) -> JsonObject:
        rec = map_strings(rec, paths)
        n = lengths.get(rec.get("manifest_path", ""))
        if n is not None:
            rec["manifest_length"] = n
        return rec

    return fn


# ---- the files a table lists -----------------------------------------------------------------------
def live_files(manifest: bytes) -> list[tuple[str, int]]:
    """Data and delete files a manifest lists as live (added or existing, not deleted), with
    their sizes."""
    _, recs = read_records(manifest)
    return [(r["data_file"]["file_path"], int(r["data_file"].get("file_size_in_bytes") or -1))
            for r in recs if r.get("status") != 2]


def stat_files(meta: JsonObject, keep: set[int] | None) -> list[tuple[str, int]]:
    out = []
    for k in ("statistics", "partition-statistics"):
        for s in meta.get(k) or []:
            if (keep is None or s.get("snapshot-id") in keep) and s.get("statistics-path"):
                out.append((s["statistics-path"], int(s.get("file-size-in-bytes") or -1)))
    return out
