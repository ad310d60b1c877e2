"""The plan phase of the export job: the exported part of the tree walked level by level
(each level on the driver or on the executors, see `Execution`), its rows deduplicated, cut
into parts and written as ``plan/part-NNNNN.parquet`` with the index ``plan/_plan.json``.
The module doc of `trinitylake.jobs.export.job` tells the whole job."""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trinitylake import rowsets
from trinitylake.errors import (
    AlreadyExistsError,
    CorruptDefinitionError,
    CorruptNodeError,
    StorageError,
    TrinityLakeError,
    VersionNotFoundError,
)
from trinitylake.jobs.export import plan as export_plan
from trinitylake.jobs.export import rules as export_rules
from trinitylake.rowsets import Equals, OneOf, Place, RowSet, task_number
from trinitylake.spark.execution import ROW_BYTES, Execution, batch_of, chunks, rows_of
from trinitylake.storage import Storage, requests
from trinitylake.storage.local_files import LocalFiles
from trinitylake.treewalk.frontier import walk_levels

if TYPE_CHECKING:

    from trinitylake.lakehouse import RootRef

log = logging.getLogger(__name__)

#: Plan part size on the driver: parts are the unit of resume there, not of parallelism (the
#: driver's threads copy files of several parts at once), and every part costs two small files.
LOCAL_PART_ROWS = 1024
#: Parts a plan over an object store is cut into at least, and the fewest rows of one (each
#: part costs a GET of its rows and a PUT of its manifest).
REMOTE_MIN_PARTS = 64
REMOTE_PART_MIN_ROWS = 32
#: A planned row held on the driver weighs this many of the walk's rows (`ROW_BYTES`): a plan
#: row, its level tuple and the dict entries (measured: a 1.1M-file plan held on the driver
#: peaked at 1.79 GB, against 691 MB for a walk of the same files).
PLAN_ROW_WEIGHT = 2
#: Node files read per chunk inside one executor task (bounds a task's memory).
_CHUNK = 256
#: A tree deeper than this is corrupt (a cycle of node pointers); the walk stops.
MAX_DEPTH = 256

LEVEL_SCHEMA = pa.schema([("role", pa.string()), ("target", pa.string()), ("kind", pa.string()),
                          ("depth", pa.int32()), ("action", pa.string()), ("size", pa.int64()), ("md5", pa.string()),
                          ("external", pa.int32()), ("data", pa.binary()), ("error", pa.string())])
FRONTIER_SCHEMA = pa.schema([("target", pa.string()), ("depth", pa.int32())])
PARTS_SCHEMA = pa.schema([("idx", pa.int64()), ("name", pa.string())])
SUMMARY_SCHEMA = pa.schema([("name", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()),
                            ("unsized", pa.int64()), ("rewritten", pa.int64()), ("external", pa.int64()),
                            ("requests", pa.string())])
ROLE_NODE, ROLE_CHILD, ROLE_ODF, ROLE_MISSING, ROLE_ERROR = "node", "child", "odf", "missing", "error"
ROLE_REQUESTS = "requests"  # one row per task: its object-store requests (JSON in `error`)


#: ``pmap(fn, items)``: a map over the driver's thread pool (sequential for one thread).
PoolMap = Callable[[Callable, list], list]


def pool_map(threads: int) -> tuple[PoolMap, Callable[[], None]]:
    """A map over a thread pool (sequential for one thread) and its shutdown."""
    if threads <= 1:
        return (lambda fn, items: [fn(i) for i in items]), (lambda: None)
    pool = ThreadPoolExecutor(max_workers=threads)
    return (lambda fn, items: list(pool.map(fn, items)) if len(items) > 1 else [fn(i) for i in items]), pool.shutdown


_shared_pools: dict[int, ThreadPoolExecutor] = {}
_shared_lock = threading.Lock()


def shared_pool_map(threads: int) -> PoolMap:
    """A map over this process's thread pool of `threads` threads (sequential for one), shared
    by every task of the process: the copy's parts on the driver, or an executor's tasks."""
    if threads <= 1:
        return lambda fn, items: [fn(i) for i in items]
    with _shared_lock:
        pool = _shared_pools.get(threads)
        if pool is None:
            pool = _shared_pools[threads] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tlake-io")
    return lambda fn, items: list(pool.map(fn, items)) if len(items) > 1 else [fn(i) for i in items]


# ---- plan: one level of nodes ------------------------------------------------------------------
def _expand(source: Storage, spec: export_rules.ExportSpec, pmap: PoolMap, items: list[tuple[str, int]]) -> list[tuple]:
    """Read and plan node files ``(path, depth)``: `LEVEL_SCHEMA` tuples (the node's row, its
    children to copy, the definition files it references, or what went wrong)."""

    # An object store the I/O engine serves: the level's reads in flight together, then
    # planned from their bytes (a thread pool of 16 capped a level at 160 reads/s at 100 ms).
    read: dict[str, bytes | BaseException] = {}
    if source.batches_in_flight and items:
        read = dict(zip([p for p, _ in items], source.read_many([p for p, _ in items]), strict=True))
        pmap = lambda fn, xs: [fn(x) for x in xs]  # noqa: E731 - decoding only: no I/O left

    def one(item: tuple[str, int]) -> list[tuple]:
        path, depth = item
        try:
            got = read.get(path)
            if isinstance(got, BaseException):
                raise got
            row, refs = (export_plan.plan_node(source, path, depth, spec) if got is None
                         else export_plan.plan_node_bytes(source, path, depth, spec, got))
        except FileNotFoundError as e:
            return [(ROLE_MISSING, path, export_rules.KIND_NODE, depth, "", -1, "", 0, None, str(e))]
        except TrinityLakeError as e:
            return [(ROLE_ERROR, path, export_rules.KIND_NODE, depth, "", -1, "", 0, None, f"{type(e).__name__}: {e}")]
        out = [(ROLE_NODE, row.target, row.kind, row.depth, row.action, row.size, row.md5, row.external, row.data,
                None)]
        out += [(ROLE_CHILD, c, export_rules.KIND_NODE, depth + 1, "", -1, "", 0, None, None) for c in refs.children]
        out += [(ROLE_ODF, p, export_rules.KIND_ODF, depth, export_rules.ACTION_COPY, -1, "", 0, None, None) for p in refs.odfs]
        return out

    return [t for part in pmap(one, items) for t in part]


def _level_batches(source: Storage, spec: export_rules.ExportSpec, io_threads: int, chunk: int,
                   batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Per-task function of one plan level (a driver thread or an executor task): frontier
    (target, depth) in, `LEVEL_SCHEMA` out, `chunk` node files at a time (an executor task's
    memory; the driver reads its whole level as one chunk, so an object store's reads are all
    in flight together). Ends with the task's object-store requests, one `ROLE_REQUESTS` row
    per kind of request (its name in ``kind``, its count in ``size``)."""
    before = requests.snapshot()
    src = LocalFiles.of(source)
    pmap, close = pool_map(io_threads)
    try:
        for part in chunks(rows_of(batches, "target", "depth"), chunk):
            out = _expand(src, spec, pmap, part)
            yield batch_of(LEVEL_SCHEMA, [list(c) for c in zip(*out, strict=True)] if out else [[] for _ in LEVEL_SCHEMA])
    finally:
        close()
    counted = {k: v for k, v in requests.since(before).items() if v}
    if counted:
        n = len(counted)
        yield batch_of(LEVEL_SCHEMA, [[ROLE_REQUESTS] * n, [""] * n, list(counted), [0] * n, [""] * n,
                                      list(counted.values()), [""] * n, [0] * n, [None] * n, [None] * n])


# ---- plan: parts ------------------------------------------------------------------------------
def dedupe_targets(table: pa.Table) -> pa.Table:
    """One row per target, sorted by target: a node wins over the same path planned as a
    definition file (never the case in a valid tree), then the smallest depth; ties keep the
    first row (duplicates of one file at one depth are the same plan). Arrow's sort is stable."""
    if table.num_rows <= 1:
        return table
    odf = pc.equal(table.column("kind"), export_rules.KIND_ODF).cast(pa.int8())
    ordered = (table.append_column("_odf", odf)
               .sort_by([("target", "ascending"), ("_odf", "ascending"), ("depth", "ascending")])
               .drop_columns(["_odf"]))
    targets = ordered.column("target").combine_chunks()
    first = pc.not_equal(targets.slice(1), targets.slice(0, len(targets) - 1))
    return ordered.filter(pa.concat_arrays([pa.array([True]), first]))


def target_root_of(root: str) -> str:
    return root if root.endswith("/") else root + "/"


def plan_rows(source_root: str, level: pa.Table) -> pa.Table:
    """Plan rows (`PLAN_SCHEMA`) of a level's node and definition rows: a level's row holds
    what the plan needs but the source's URI, its root joined to the key (`Storage.uri` of
    the plain relative keys a tree holds)."""
    source = pc.binary_join_element_wise(pa.scalar(source_root), level.column("target"), "")
    cols = {name: level.column(name) for name in export_rules.PLAN_COLUMNS if name != "source"}
    cols["source"] = source
    return pa.table([cols[n] for n in export_rules.PLAN_COLUMNS], names=list(export_rules.PLAN_COLUMNS)).cast(
        export_rules.PLAN_SCHEMA)


def table_summary(name: str, table: pa.Table) -> dict[str, Any]:
    """`export_rules.part_summary` of a part held as an Arrow table."""
    size = table.column("size")
    return {"name": name, "rows": table.num_rows,
            "bytes": int(pc.sum(pc.max_element_wise(size, 0)).as_py() or 0),
            "unsized": int(pc.sum(pc.less(size, 0).cast(pa.int64())).as_py() or 0),
            "rewritten": int(pc.sum(pc.equal(table.column("action"), export_rules.ACTION_REWRITE).cast(pa.int64())).as_py() or 0),
            "external": int(pc.sum(table.column("external").cast(pa.int64())).as_py() or 0)}


def _part_batches(source_root: str, target: Storage, plan_dir: str, batches: Iterator[pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
    """Per-task function writing one plan part from the levels' rows (on the driver's threads
    or in an executor task). The tasks are cut by target, so every planned copy of a file
    meets its duplicates here and is merged (`dedupe_targets`), not by a shuffle of its own."""
    tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    if not tables:
        return
    table = dedupe_targets(plan_rows(target_root_of(source_root), pa.concat_tables(tables)))
    name = export_rules.plan_part_name(task_number())
    before = requests.snapshot()
    LocalFiles.of(target).write(f"{plan_dir}/{name}", export_plan.table_bytes(table))
    s = table_summary(name, table)
    s["requests"] = json.dumps(requests.since(before))
    yield batch_of(SUMMARY_SCHEMA, [[s[f.name]] for f in SUMMARY_SCHEMA])


def raise_failures(missing: list[str], errors: list[str], conflicts: list[str], what: str, version: int) -> None:
    if conflicts:
        raise AlreadyExistsError(
            f"{what}: {len(conflicts)} file(s) already exist at the target with other content, e.g. {conflicts[0]}; "
            f"another export wrote them. Export to an empty location"
        )
    if missing:
        raise VersionNotFoundError(
            f"{what}: {len(missing)} file(s) of version {version} are missing in the source (expired or deleted "
            f"meanwhile?), e.g. {missing[0]}"
        )
    if errors:
        first = errors[0]
        cls = CorruptNodeError if first.startswith("CorruptNodeError") else (
            CorruptDefinitionError if first.startswith("CorruptDefinitionError") else StorageError)
        raise cls(f"{what}: {len(errors)} file(s) failed, e.g. {first}")



class Planner:
    """Walks the exported part of the tree level by level (`treewalk.frontier`: driver or
    executors per level) and writes the plan parts; returns the plan index (parts, counts)."""

    phase = "export.plan_nodes"

    def __init__(self, ex: Execution, source: Storage, target: Storage, spec: export_rules.ExportSpec, plan_dir: str,
                 batch: int, io_threads: int, on_level: Callable[[int], None] | None = None):
        self.ex, self.source, self.target, self.spec = ex, source, target, spec
        # Told, after each level, about how many files the plan will hold (the rows so far
        # plus half a node's worth of entries per node still to read).
        self.on_level = on_level
        self.plan_dir, self.batch, self.io_threads = plan_dir, batch, io_threads
        self.levels: list[dict[str, Any]] = []
        #: The plan's rows so far (`LEVEL_SCHEMA`: nodes and definition files), per level.
        self.found: list[RowSet] = []
        self.upper = 0  # rows the plan holds at most (duplicates merged when its parts are written)
        self.node_bytes = 0  # of the node files found (their exported bytes ride in the rows)
        self.kept: list[RowSet] = []

    def run(self, ref: RootRef, root_refs: export_rules.NodeRefs) -> dict[str, Any]:
        def_rel = export_rules.key_in_source(self.source, ref.def_path) or ref.def_path
        first = [(ROLE_NODE, def_rel, export_rules.KIND_DEF, 0, export_rules.ACTION_REWRITE, -1, "", 0, None, None)]
        first += [(ROLE_ODF, p, export_rules.KIND_ODF, 0, export_rules.ACTION_COPY, -1, "", 0, None, None)
                  for p in dict.fromkeys(root_refs.odfs)]
        self.found.append(rowsets.driver(self.ex, _level_table(first)))
        self.upper = len(first)
        children = list(dict.fromkeys(root_refs.children))
        frontier = pa.table({"target": pa.array(children, pa.string()), "depth": pa.array([1] * len(children), pa.int32())})
        return walk_levels(self.ex, self, rowsets.driver(self.ex, frontier), len(children), 1)

    # -- what the frontier walk asks (`treewalk.frontier.Levels`) --
    @property
    def storage(self) -> Storage:
        return self.source

    def held_after(self, frontier: int) -> int:
        # What the driver would hold after reading this level: a node references at most
        # `order` entries (children or definition files), each a plan row.
        held = self.upper + frontier + self.node_bytes // ROW_BYTES
        return (held + frontier * max(1, self.spec.order)) * PLAN_ROW_WEIGHT

    def on_executors_only(self) -> bool:
        return False

    def read_level(self, step: Place, frontier: RowSet, size: int, depth: int) -> tuple[RowSet, int]:
        if depth > MAX_DEPTH:
            raise CorruptNodeError(f"planning export {self.spec.name!r}: the tree of version {self.spec.version} is "
                                   f"deeper than {MAX_DEPTH} levels (a cycle of node pointers?)")
        t = time.perf_counter()
        # The driver reads a level as one task on its thread pool; the executors in tasks of
        # `batch` node files, `_CHUNK` at a time.
        tasks = step.partitions(size, self.batch) if step.distributed else 1
        what = f"export {self.spec.name}: read {size} nodes at depth {depth}"
        with step.phase(self.phase, size, what + (f" ({tasks} tasks)" if step.distributed else "")):
            fn = functools.partial(_level_batches, self.source, self.spec, self.io_threads,
                                   _CHUNK if step.distributed else max(1, size))
            level = frontier.map_batches(fn, LEVEL_SCHEMA, tasks).keep()
            self.kept.append(level)
            # Rows per role and the tasks' requests, in one aggregate (each Spark job costs a
            # second or more on a cluster).
            counts = level.count_by(["role", "kind"], "size")
        roles: dict[str, int] = {}
        for (role, kind), (rows, total) in counts.items():
            roles[str(role)] = roles.get(str(role), 0) + rows
            if role == ROLE_REQUESTS:
                step.add_task_requests({str(kind): total})
            elif role == ROLE_NODE:
                self.node_bytes += total
        if roles.get(ROLE_MISSING, 0) + roles.get(ROLE_ERROR, 0):
            sample = level.filter(OneOf("role", ROLE_MISSING, ROLE_ERROR)).head(5, "role", "error")
            raise_failures([str(e) for r, e in sample if r == ROLE_MISSING], [str(e) for r, e in sample if r == ROLE_ERROR],
                           [], f"planning export {self.spec.name!r}", self.spec.version)
        self.found.append(level.filter(OneOf("role", ROLE_NODE, ROLE_ODF)))
        self.upper += roles.get(ROLE_NODE, 0) + roles.get(ROLE_ODF, 0)
        # A tree: children of this level were never read before (a cycle ends at MAX_DEPTH).
        # Merged within the level (the smallest depth); their count before the merge bounds it.
        nxt = level.filter(Equals("role", ROLE_CHILD)).select("target", "depth").first_by("target", "depth")
        n_next = roles.get(ROLE_CHILD, 0)
        record: dict[str, Any] = {"depth": depth, "nodes": size, "where": step.where}
        if step.distributed:
            record["tasks"] = tasks
        record["seconds"] = round(time.perf_counter() - t, 3)
        self.levels.append(record)
        if step.distributed:
            log.info("export %r: depth %d read %d nodes in %d tasks, %d children", self.spec.name, depth, size, tasks,
                     n_next)
        if self.on_level is not None:
            self.on_level(self.upper + n_next * max(1, self.spec.order // 2))
        return nxt, n_next

    def result(self, step: Place) -> dict[str, Any]:
        # Where the levels left their rows: the driver's rows are written from the driver
        # whatever their size (the bounds above kept them small enough; shipping them to the
        # executors costs more than writing them: a 1.1M-row plan made 5.6 MB tasks and
        # doubled the driver's memory), else the executors write every row.
        rows = rowsets.chain(self.found)
        self.found = []
        return self._write(rows, self.upper)

    def release(self) -> None:
        for level in self.kept:
            level.release()
        self.kept = []

    def _index(self, summaries: list[dict[str, Any]]) -> dict[str, Any]:
        summaries.sort(key=lambda p: p["name"])
        return {"parts": summaries, "levels": self.levels, "files": sum(p["rows"] for p in summaries) + 1,
                "created_at": datetime.now(UTC).isoformat()}

    def _part_count(self, rows: int, distributed: bool) -> int:
        """Parts of a plan of about `rows` rows. On the driver parts are the unit of resume, not
        of parallelism (its threads copy files of several parts at once), and every part costs
        two small files: `LOCAL_PART_ROWS` at least. An object store cuts more: a part is a copy
        task, and its files wait on round trips, not on a core, so at least `REMOTE_MIN_PARTS`
        parts when the copy runs on the executors (2,205 files made 3 parts of 1,024: 3 tasks
        for 4 executors). A copy the I/O engine runs on the driver keeps its parts whole: the
        engine keeps a part's requests in flight together, and every part costs two LISTs of
        its key range, a GET of its rows and a PUT of its manifest."""
        parts = max(1, math.ceil(rows / (self.batch if distributed else max(self.batch, LOCAL_PART_ROWS))))
        remote = self.target if self.target.remote else self.source
        if remote.remote and (distributed or not self.target.batches_in_flight or rowsets.place(
                self.ex, rows, storage=remote, requests_per_item=1).distributed):
            parts = max(parts, min(REMOTE_MIN_PARTS, math.ceil(rows / REMOTE_PART_MIN_ROWS)))
        return parts

    def _write(self, rows: RowSet, upper: int) -> dict[str, Any]:
        """Write the plan's `rows` (`LEVEL_SCHEMA` node and definition rows, at most `upper`,
        duplicates merged by the parts) as its parts, where the rows are; the plan index."""
        step = Place(self.ex, rows.where)
        n_parts = self._part_count(upper, step.distributed)
        with step.phase("export.write_plan", upper, f"export {self.spec.name}: write the plan ({n_parts} parts)") as entry:
            fn = functools.partial(_part_batches, target_root_of(self.source.root), self.target, self.plan_dir)
            # On an object store each part is one range of target keys: the copy verifies a
            # part's server-side copies by listing its range (`copying.copy_batch`), where a
            # hash partition's keys would span the whole lakehouse.
            written = rows.map_batches(fn, SUMMARY_SCHEMA, n_parts, in_flight=self.io_threads, by="target",
                                       by_range=self.target.batches_in_flight)
            summaries = [dict(zip(SUMMARY_SCHEMA.names, r, strict=True))
                         for r in rows_of(written.batches(), *SUMMARY_SCHEMA.names)]
            for r in summaries:
                step.add_task_requests(r.pop("requests", None))
            if entry is not None:
                entry["items"] = int(str(entry["items"])) + sum(int(r["rows"]) for r in summaries) - upper  # the rows written
        return self._index([{k: int(v) if k != "name" else v for k, v in s.items()} for s in summaries])


def _level_table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_batches([batch_of(LEVEL_SCHEMA, [list(c) for c in zip(*rows, strict=True)])])
