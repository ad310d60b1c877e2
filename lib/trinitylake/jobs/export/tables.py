"""The export job's table phase: exports that carry the tables (`tlake export --with-tables`,
the export job's ``with_tables``).

A full export copies what TrinityLake reaches from the root (roots, nodes, definitions) and
stops at each table's ``metadata_location``. With tables, for every Iceberg table of the exported
version whose metadata lives under the lakehouse's root, the export copies the table too, as
Iceberg's ``rewrite_table_path`` stages it, and copies the files as well:

* the current metadata file, rewritten: every string that is an absolute path under the source
  root becomes the same path under the target root (``location``, ``metadata-log``, snapshots'
  ``manifest-list``, statistics files, ``write.*.path`` properties);
* the previous metadata files of its ``metadata-log`` that still exist, rewritten the same way
  (the TableDefs' ``previous_metadata_location`` and superseded definitions point at them);
* per retained snapshot (``table_snapshots: all``, the default) or the current one only
  (``current``: the exported metadata then lists that snapshot alone): its manifest list and
  manifests, rewritten (`trinitylake.iceberg.avro_rewrite`: paths, and each manifest's new length
  in the list; the path rules are `trinitylake.iceberg.metadata_paths`),
  and the data and delete files they list as live, plus statistics files, copied as bytes.

The table phase runs after the export's own copy and before its root, in three steps:

1. **plan** (driver, `export.table_plan`): every table's metadata file, manifest lists and
   manifests are read (the small files); manifests are rewritten and written at once, the data,
   delete and statistics files they list become plan rows (kind ``table_file``, size from the
   manifest) written as plan parts ``plan/tables-NNNNN.parquet`` beside the export's own, with
   their index ``plan/_tables.json``;
2. **copy** (`export.table_copy`): those parts go through the export's own copy phase
   (`trinitylake.jobs.export.job`): the same placement (``--execution``; ``auto`` puts it on
   the executors when it is big, by the rules of every phase), the same `copy_part` on the
   driver's threads, its worker processes or executor tasks, each file read once, hashed,
   created exclusively and verified (size, and the ETag on S3), a result manifest
   ``copied/tables-NNNNN.json`` per finished part; a re-run after a crash verifies the files of
   finished parts at the target without reading the source and copies the rest;
3. **metadata** (driver, `export.table_metadata`): the manifest lists (with the rewritten
   manifests' lengths) and the metadata files, last, so that no exported metadata names a
   file that is not yet there.

Every file keeps its path relative to the root. The export's TableDefs are rewritten by the copy
itself (`trinitylake.jobs.export.rules.exported_table_def_bytes`, the same prefix rule), so
the exported lakehouse points at the copied metadata.

Views go with the tables: each Iceberg view's metadata file (and the one before it, when it still
exists) is rewritten by the same path rule and written with the tables' metadata files, and its
ViewDef is rewritten by the copy (`trinitylake.jobs.export.rules.exported_view_def_bytes`). Everything is written with exclusive
creates before the exported root, so a crashed export stays invisible; a re-run keeps a rewritten
file that is already there with exactly the computed bytes (rewriting is deterministic) and
refuses one with other bytes. Tables whose metadata lives outside the lakehouse's storage are
listed and left as pointers to where they are; so are data files outside it.

After the export completes, `seal_export_records` removes the source's location from the
export's own bookkeeping under ``_export/<name>/`` (the plan's source column keeps paths relative
to the source root): nothing at the target names the source.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from trinitylake.errors import AlreadyExistsError, StorageError, ValidationError
from trinitylake.format import definitions as format_definitions
from trinitylake.iceberg.avro_rewrite import map_strings, read_records, rewrite_avro
from trinitylake.iceberg.metadata_paths import (
    PathMap,
    is_gzip,
    live_files,
    manifest_list_fn,
    rewrite_metadata_json,
    stat_files,
)
from trinitylake.jobs.export import plan as export_plan
from trinitylake.jobs.export import rules as export_rules
from trinitylake.jobs.export.copying import OK, CopyStats, etag_matches, verify_written
from trinitylake.jobs.export.planner import pool_map
from trinitylake.lakehouse import LakehouseView
from trinitylake.spark.execution import DISTRIBUTED, LOCAL
from trinitylake.storage import Storage, is_absolute

if TYPE_CHECKING:
    from trinitylake.config import ExportConfig
    from trinitylake.lakehouse import Lakehouse, RootRef
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution

log = logging.getLogger(__name__)

SNAPSHOT_MODES = ("all", "current")
#: Plan rows of the tables' data, delete and statistics files (copied verbatim).
KIND_TABLE_FILE = "table_file"
#: The table files' plan parts (``plan/tables-NNNNN.parquet``) and their index.
TABLE_PART_PREFIX = "tables-"
TABLES_INDEX = "_tables.json"
#: Table files are cut into at least this many parts (a part is one copy task and one result
#: manifest), of `TABLE_PART_MIN_ROWS` files at least, and at most `TABLE_PART_MAX_ROWS` files
#: or `TABLE_PART_MAX_BYTES` bytes (data files are the big bytes: a part is what one task holds
#: up and what a crash makes the re-run verify again).
TABLE_MIN_PARTS = 32
TABLE_PART_MIN_ROWS = 4
TABLE_PART_MAX_ROWS = 1024
TABLE_PART_MAX_BYTES = 256 << 20

#: ``pmap(fn, items)``: a map over the driver's threads.
PoolMap = Callable[[Callable[[Any], Any], list], list]


class CopyParts(Protocol):
    """The export job's copy phase (`trinitylake.jobs.export.copy_phase.Copier.copy_parts`):
    copies the named plan parts where its placement puts `n_files` files, raises a typed error
    for any failure, and returns what was copied and where it ran (``local`` or ``distributed``)."""

    def __call__(self, phase: str, names: list[str], n_files: int, resumed: bool, what: str
                 ) -> tuple[CopyStats, str]: ...


@dataclass
class TablesResult:
    """What the table phase did: counts, and one line per table left as a pointer. `files`,
    `copied`, `skipped`, `bytes_*` count every table file (metadata and data); `data_*` the
    data, delete and statistics files the copy phase copied, `where` where it ran."""

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
    data_files: int = 0
    data_bytes: int = 0
    data_parts: int = 0
    verified: int = 0
    where: str = "driver"
    resumed: bool = False
    views: int = 0
    copied_views: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"tables": self.tables, "copied_tables": self.copied_tables, "snapshots": self.snapshots,
                "files": self.files, "copied": self.copied, "skipped": self.skipped, "rewritten": self.rewritten,
                "bytes_copied": self.bytes_copied, "bytes_skipped": self.bytes_skipped,
                "left_as_pointers": list(self.pointers), "external_files": self.external_files,
                "data_files": self.data_files, "data_bytes": self.data_bytes, "data_parts": self.data_parts,
                "verified": self.verified, "where": self.where, "resumed": self.resumed,
                "views": self.views, "copied_views": self.copied_views}

    def add_copy(self, st: CopyStats) -> None:
        """Count what the copy phase did with the data files."""
        self.files += st.rows
        self.copied += st.copied
        self.skipped += st.skipped
        self.bytes_copied += st.copied_bytes
        self.bytes_skipped += st.skipped_bytes
        self.verified += st.verified


# ---- writing the rewritten files ----------------------------------------------------------------
class _Writer:
    """Exclusive creates at the target, each verified as the export's copy verifies (the PUT's
    ETag or a HEAD on S3, read back locally); an existing file is kept when it holds exactly
    these bytes (a re-run: rewriting is deterministic), refused otherwise."""

    def __init__(self, target: Storage, result: TablesResult):
        self.target, self.result = target, result
        self._lock = threading.Lock()

    def put(self, rel: str, data: bytes, rewritten: bool) -> None:
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        try:
            etag = self.target.create_exclusive(rel, data)
        except FileExistsError:
            have = self.target.read(rel)
            if hashlib.md5(have, usedforsecurity=False).hexdigest() != md5:
                raise AlreadyExistsError(f"{self.target.uri(rel)} exists with other content than the exported table "
                                         f"file; export to another location") from None
            with self._lock:
                self.result.files += 1
                self.result.skipped += 1
                self.result.verified += 1
                self.result.bytes_skipped += len(data)
            return
        if not (etag is not None and etag_matches(etag, md5)) and \
                verify_written(self.target, rel, len(data), md5) != OK:
            raise StorageError(f"{self.target.uri(rel)} failed verification after the copy")
        with self._lock:
            self.result.files += 1
            self.result.copied += 1
            self.result.verified += 1
            self.result.bytes_copied += len(data)
            self.result.rewritten += rewritten


def _read(storage: Storage, rel: str, what: str) -> bytes:
    try:
        return storage.read(rel)
    except FileNotFoundError:
        raise StorageError(f"{what} {storage.uri(rel)} is missing; the table cannot be exported") from None


# ---- one table -------------------------------------------------------------------------------------
@dataclass
class TablePlan:
    """What the table phase copies: the data, delete and statistics files (relative path ->
    size, -1 unknown), and the rewritten manifest lists and metadata files written after them."""

    files: dict[str, int] = field(default_factory=dict)
    last: list[tuple[str, bytes]] = field(default_factory=list)


def plan_table(name: str, metadata_location: str, source: Storage, target: Storage, snapshots: str,
               result: TablesResult, writer: _Writer, pmap: PoolMap, plan: TablePlan) -> None:
    """Plan one table whose metadata file is under the source root (see the module doc): its
    manifests rewritten and written now, its files added to `plan`, its manifest lists and
    metadata files (rewritten) to `plan.last`."""
    paths = PathMap(source, target)
    meta_rel = paths.relative(metadata_location)
    assert meta_rel is not None
    raw = _read(source, meta_rel, f"table {name}: metadata file")
    meta = json.loads(gzip.decompress(raw) if is_gzip(raw) else raw)
    current = meta.get("current-snapshot-id")
    if snapshots == "current":
        keep: set[int] | None = {current} if current is not None and current >= 0 else set()
    else:
        keep = None
    snaps = [s for s in meta.get("snapshots", []) if keep is None or s.get("snapshot-id") in keep]
    result.snapshots += len(snaps)

    list_rels: list[str] = []
    for s in snaps:
        ml = s.get("manifest-list")
        if not ml:
            continue
        rel = paths.relative(ml)
        if rel is None:
            result.external_files += 1
        else:
            list_rels.append(rel)
    list_rels = list(dict.fromkeys(list_rels))
    lists = dict(zip(list_rels, pmap(lambda r: _read(source, r, f"table {name}: manifest list"), list_rels),
                     strict=True))
    manifest_rels: dict[str, None] = {}
    for data in lists.values():
        for r in read_records(data)[1]:
            rel = paths.relative(r["manifest_path"])
            if rel is None:
                result.external_files += 1
            else:
                manifest_rels[rel] = None

    def do_manifest(rel: str) -> tuple[str, int, list[tuple[str, int]]]:
        data = _read(source, rel, f"table {name}: manifest")
        out = rewrite_avro(data, lambda r: map_strings(r, paths), paths)
        writer.put(rel, out, True)
        return rel, len(out), live_files(data)

    manifests: dict[str, int] = {}  # source rel -> rewritten length
    for rel, length, files in pmap(do_manifest, list(manifest_rels)):
        manifests[rel] = length
        for f, size in [*files]:
            frel = paths.relative(f)
            if frel is None:
                result.external_files += 1
            else:
                plan.files[frel] = size
    for f, size in stat_files(meta, keep):
        frel = paths.relative(f)
        if frel is None:
            result.external_files += 1
        else:
            plan.files[frel] = size

    lengths = {paths(source.uri(rel)): n for rel, n in manifests.items()}
    for rel, data in lists.items():
        plan.last.append((rel, rewrite_avro(data, manifest_list_fn(paths, lengths), paths)))
    # Previous metadata files that still exist (best effort), then the current one, last.
    for entry in meta.get("metadata-log") or []:
        prel = paths.relative(str(entry.get("metadata-file", "")))
        if prel is None or prel == meta_rel:
            continue
        try:
            prev = source.read(prel)
        except FileNotFoundError:
            continue
        plan.last.append((prel, rewrite_metadata_json(prev, paths)))
    plan.last.append((meta_rel, rewrite_metadata_json(raw, paths, keep)))


def plan_view(name: str, d: Any, source: Storage, target: Storage, result: TablesResult, plan: TablePlan) -> None:
    """Plan one Iceberg view (a ViewDef naming its metadata file): its current metadata file
    and, when it still exists, the one before it (``previous_metadata_location``), rewritten
    by the tables' path rule and written with the tables' metadata, last. A view's metadata
    names no other file."""
    paths = PathMap(source, target)
    for key, required in (("previous_metadata_location", False), ("metadata_location", True)):
        loc = d.properties.get(key)
        if not loc:
            continue
        rel = paths.relative(loc if is_absolute(loc) else source.uri(loc))
        if rel is None:
            if required:
                result.pointers.append(f"view {name}: metadata outside the lakehouse's storage ({loc}); left as a pointer")
            continue
        if required:
            raw = _read(source, rel, f"view {name}: metadata file")
        else:
            try:
                raw = source.read(rel)
            except FileNotFoundError:
                continue
        plan.last.append((rel, rewrite_metadata_json(raw, paths)))
    result.copied_views += 1


def plan_tables(lakehouse: Lakehouse, ref: RootRef, source: Storage, target: Storage, snapshots: str,
                result: TablesResult, writer: _Writer, pmap: PoolMap) -> TablePlan:
    """Plan every Iceberg table of version `ref` whose metadata is under the source root.

    Raises:
        ValidationError: `snapshots` is not one of `SNAPSHOT_MODES`.
        StorageError: a metadata file, manifest list or manifest a table references is missing.
        AlreadyExistsError: the target holds another file under a rewritten manifest's name.
    """
    if snapshots not in SNAPSHOT_MODES:
        raise ValidationError(f"table_snapshots must be one of {', '.join(SNAPSHOT_MODES)}, got {snapshots!r}")
    view = LakehouseView(lakehouse, ref)
    plan = TablePlan()
    for ns in view.list_namespaces():
        for t in view.list_tables(ns):
            name = f"{ns}.{t}"
            result.tables += 1
            d = view.load_table(ns, t)
            fmt = format_definitions.table_format_name(d)
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
                result.pointers.append(f"{name}: metadata outside the lakehouse's storage ({loc}); left as a pointer")
                continue
            plan_table(name, loc, source, target, snapshots, result, writer, pmap, plan)
            result.copied_tables += 1
        for v in view.list_views(ns):
            result.views += 1
            plan_view(f"{ns}.{v}", view.load_view(ns, v), source, target, result, plan)
    return plan


# ---- the table files' plan parts ---------------------------------------------------------------------
def cut_parts(rows: list[Any]) -> list[list[Any]]:
    """Rows (sorted) cut into parts: see `TABLE_MIN_PARTS`."""
    per = min(TABLE_PART_MAX_ROWS, max(TABLE_PART_MIN_ROWS, math.ceil(len(rows) / TABLE_MIN_PARTS)))
    parts: list[list[Any]] = []
    cur: list[Any] = []
    held = 0
    for r in rows:
        size = max(0, r.size)
        if cur and (len(cur) >= per or held + size > TABLE_PART_MAX_BYTES):
            parts.append(cur)
            cur, held = [], 0
        cur.append(r)
        held += size
    if cur:
        parts.append(cur)
    return parts


def write_table_parts(source: Storage, target: Storage, plan_dir: str, files: dict[str, int], pmap: PoolMap
                      ) -> tuple[list[str], bool]:
    """The table files' plan parts (`KIND_TABLE_FILE` rows) under `plan_dir`, and whether they
    are an earlier run's (their index names the same files: the copy then verifies what that
    run's result manifests hold without reading the source)."""
    rows = [export_rules.PlanRow(rel, source.uri(rel), KIND_TABLE_FILE, 0, export_rules.ACTION_COPY, size) for rel, size in sorted(files.items())]
    total = sum(max(0, r.size) for r in rows)
    index = export_plan.read_json(target, f"{plan_dir}/{TABLES_INDEX}")
    if (index is not None and index.get("format") == export_rules.FORMAT_TAG and index.get("files") == len(rows)
            and index.get("bytes") == total):
        return [p["name"] for p in index["parts"]], True
    parts = [(f"{TABLE_PART_PREFIX}{i:05d}.parquet", chunk) for i, chunk in enumerate(cut_parts(rows))]

    def write(part: tuple[str, list[export_rules.PlanRow]]) -> dict[str, Any]:
        target.write(f"{plan_dir}/{part[0]}", export_plan.plan_part_bytes(part[1]))
        return export_rules.part_summary(*part)

    summaries = pmap(write, parts)
    target.write(f"{plan_dir}/{TABLES_INDEX}", export_plan.json_bytes({"format": export_rules.FORMAT_TAG, "parts": summaries,
                                                              "files": len(rows), "bytes": total}))
    return [p[0] for p in parts], False


# ---- the export's own records ------------------------------------------------------------------------
def seal_export_records(target: Storage, export_dir: str, source: Storage) -> int:
    """Remove the source's location from a completed export's bookkeeping: ``export.json``
    loses ``source`` (``source_id`` still names the lakehouse) and the plan parts' ``source``
    column keeps paths relative to the source root. Returns the files rewritten."""
    n = 0
    meta = export_plan.read_json(target, f"{export_dir}/export.json")
    if meta is not None and "source" in meta:
        meta.pop("source")
        meta["source_location"] = "sealed: an export with tables names nothing of its source"
        target.write(f"{export_dir}/export.json", export_plan.json_bytes(meta))
        n += 1
    plan_dir = f"{export_dir}/plan"
    for f in list(target.list(plan_dir)):
        if not f.path.endswith(".parquet"):
            continue
        rows = export_plan.read_plan_part(target.read(f.path))
        if not any(is_absolute(r.source) for r in rows):
            continue
        fixed = [r._replace(source=source.relative(r.source) or r.source) for r in rows]
        target.write(f.path, export_plan.table_bytes(export_plan.plan_table(fixed)))
        n += 1
    return n


def export_tables_phase(lakehouse: Lakehouse, ref: RootRef, source: Storage, target: Storage, cfg: ExportConfig,
                        result: JobResult, ex: Execution, export_dir: str, io_threads: int, copy: CopyParts
                        ) -> TablesResult:
    """The export job's table phase (`trinitylake.jobs.export.job`, before the root): plan the
    tables of `ref` on the driver, copy their files with the job's copy phase (`copy`), write
    their manifest lists and metadata files, and record it all in the job's result (counts
    ``tables``, ``table_files``, ``table_files_copied``, ``table_data_files``...; bytes
    ``tables``, ``table_data``; seconds ``tables_plan``, ``tables_copy``, ``tables_metadata``;
    ``details["tables"]`` with ``where`` the copy ran)."""
    snapshots = cfg.table_snapshots
    r = TablesResult()
    writer = _Writer(target, r)
    pmap, close = pool_map(max(4, io_threads))
    name = result.details.get("name", "")
    try:
        t = time.perf_counter()
        with ex.phase("export.table_plan", LOCAL, 0, f"export {name}: read and rewrite the tables' metadata") as entry:
            plan = plan_tables(lakehouse, ref, source, target, snapshots, r, writer, pmap)
            names, r.resumed = write_table_parts(source, target, f"{export_dir}/plan", plan.files, pmap)
            entry["items"] += r.files
        result.seconds["tables_plan"] = round(time.perf_counter() - t, 3)
        r.data_files, r.data_parts = len(plan.files), len(names)
        r.data_bytes = sum(max(0, s) for s in plan.files.values())

        t = time.perf_counter()
        if names:
            st, where = copy("export.table_copy", names, len(plan.files), r.resumed,
                             f"export {name}: copy {len(plan.files)} table files ({len(names)} parts)")
            r.add_copy(st)
            r.where = "executors" if where == DISTRIBUTED else "driver"
        result.seconds["tables_copy"] = round(time.perf_counter() - t, 3)

        t = time.perf_counter()
        with ex.phase("export.table_metadata", LOCAL, len(plan.last),
                      f"export {name}: write {len(plan.last)} table metadata files"):
            pmap(lambda f: writer.put(f[0], f[1], True), plan.last)
        result.seconds["tables_metadata"] = round(time.perf_counter() - t, 3)
    finally:
        close()
    for line in r.pointers:
        log.info("export with tables: %s", line)
    result.details["tables"] = {**r.to_dict(), "snapshots_mode": snapshots}
    result.counts.update({"views": r.views, "views_copied": r.copied_views})
    result.counts.update({"tables": r.tables, "tables_copied": r.copied_tables, "table_files": r.files,
                          "table_files_copied": r.copied, "table_files_skipped": r.skipped,
                          "table_data_files": r.data_files})
    result.bytes["tables"] = r.bytes_copied + r.bytes_skipped
    result.bytes["table_data"] = r.data_bytes
    return r
