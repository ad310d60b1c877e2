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
from functools import reduce
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
from trinitylake.rowsets import Place, RowSet, task_number
from trinitylake.spark.execution import DISTRIBUTED, LOCAL, ROW_BYTES, Execution, batch_of, chunks, ddl, rows_of
from trinitylake.storage import Storage, requests
from trinitylake.storage.local_files import LocalFiles
from trinitylake.treewalk.frontier import walk_levels

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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
    if source.engine is not None and items:
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


def _level_batches(source: Storage, spec: export_rules.ExportSpec, io_threads: int, batches: Iterator[pa.RecordBatch]
                   ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of one plan level: frontier (target, depth) in, `LEVEL_SCHEMA` out."""
    before = requests.snapshot()
    src = LocalFiles.of(source)
    pmap, close = pool_map(io_threads)
    try:
        for chunk in chunks(rows_of(batches, "target", "depth"), _CHUNK):
            out = _expand(src, spec, pmap, chunk)
            yield batch_of(LEVEL_SCHEMA, [list(c) for c in zip(*out, strict=True)] if out else [[] for _ in LEVEL_SCHEMA])
    finally:
        close()
    # The task's object-store requests, as one row the driver sums (`ROLE_REQUESTS`).
    yield batch_of(LEVEL_SCHEMA, [[ROLE_REQUESTS], [""], [""], [0], [""], [-1], [""], [0], [None],
                                  [json.dumps(requests.since(before))]])


def _failure(missing: list[str], errors: list[str], what: str, version: int) -> None:
    raise_failures(missing, errors, [], what, version)


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


def table_summary(name: str, table: pa.Table) -> dict[str, Any]:
    """`export_rules.part_summary` of a part held as an Arrow table."""
    size = table.column("size")
    return {"name": name, "rows": table.num_rows,
            "bytes": int(pc.sum(pc.max_element_wise(size, 0)).as_py() or 0),
            "unsized": int(pc.sum(pc.less(size, 0).cast(pa.int64())).as_py() or 0),
            "rewritten": int(pc.sum(pc.equal(table.column("action"), export_rules.ACTION_REWRITE).cast(pa.int64())).as_py() or 0),
            "external": int(pc.sum(table.column("external").cast(pa.int64())).as_py() or 0)}


def _part_batches(target: Storage, plan_dir: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Per-task function writing one plan part (on the driver's threads or in an executor
    task). The tasks are cut by target, so every planned copy of a file meets its duplicates
    here and is merged (`dedupe_targets`), not by a shuffle of its own."""
    tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    if not tables:
        return
    # The plan's own schema (the executors' rows come back with Spark's nullability).
    table = dedupe_targets(pa.concat_tables(tables).select(list(export_rules.PLAN_COLUMNS))).cast(export_rules.PLAN_SCHEMA)
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
    """Walks the exported part of the tree level by level (driver or executors per level) and
    writes the plan parts; returns the plan index (parts, counts)."""

    def __init__(self, ex: Execution, source: Storage, target: Storage, spec: export_rules.ExportSpec, plan_dir: str,
                 batch: int, io_threads: int, on_level: Callable[[int], None] | None = None):
        self.ex, self.source, self.target, self.spec = ex, source, target, spec
        # Told, after each driver level, about how many files the plan will hold (the rows so
        # far plus half a node's worth of entries per node still to read).
        self.on_level = on_level
        self.plan_dir, self.batch, self.io_threads = plan_dir, batch, io_threads
        self.levels: list[dict[str, Any]] = []
        # Driver-side state.
        self.nodes: dict[str, export_rules.PlanRow] = {}
        self.node_bytes = 0  # of the node files held in `nodes` (the copy writes them as read)
        self.odfs: dict[str, int] = {}
        self.upper = 0  # rows the distributed plan can hold

    def run(self, ref: RootRef, root_refs: export_rules.NodeRefs) -> dict[str, Any]:
        def_rel = export_rules.key_in_source(self.source, ref.def_path) or ref.def_path
        self.def_row = export_rules.plan_file(self.source, def_rel, export_rules.KIND_DEF, 0)
        for p in root_refs.odfs:
            self.odfs.setdefault(p, 0)
        return walk_levels(self.ex, self, dict.fromkeys(root_refs.children, 1), 1)

    # -- what the frontier walk asks (`treewalk.frontier.Levels`) --
    phase = "export.plan_nodes"

    @property
    def storage(self) -> Storage:
        return self.source

    def held_after(self, frontier: dict[str, int]) -> int:
        # What the driver would hold after reading this level: a node references at most
        # `order` entries (children or definition files), each a plan row.
        held = len(self.nodes) + len(self.odfs) + len(frontier) + self.node_bytes // ROW_BYTES
        return (held + len(frontier) * max(1, self.spec.order)) * PLAN_ROW_WEIGHT

    def on_executors_only(self) -> bool:
        return False

    def driver_result(self) -> dict[str, Any]:
        # Written from the driver whatever its size: the rows are here already (the bounds above
        # kept them small enough), and shipping them to the executors costs more than writing
        # them (a 1.1M-row plan made 5.6 MB tasks and doubled the driver's memory).
        rows = self._rows()
        self.nodes, self.odfs, self.node_bytes = {}, {}, 0
        return self._write(rowsets.driver(self.ex, export_plan.plan_table(rows)), len(rows))

    def executor_levels(self, frontier: dict[str, int], depth: int) -> dict[str, Any]:
        return self._run_distributed(frontier, depth)

    def _check_depth(self, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise CorruptNodeError(f"planning export {self.spec.name!r}: the tree of version {self.spec.version} is "
                                   f"deeper than {MAX_DEPTH} levels (a cycle of node pointers?)")

    def driver_level(self, frontier: dict[str, int], depth: int) -> dict[str, int]:
        self._check_depth(depth)
        t = time.perf_counter()
        items = list(frontier.items())
        with self.ex.phase("export.plan_nodes", LOCAL, len(items),
                           f"export {self.spec.name}: read {len(items)} nodes at depth {depth}"):
            pmap, close = pool_map(min(self.io_threads, len(items)))
            try:
                out = _expand(LocalFiles.of(self.source), self.spec, pmap, items)
            finally:
                close()
        nxt: dict[str, int] = {}
        missing, errors = [], []
        for role, tgt, kind, d, action, size, md5, external, data, err in out:
            if role == ROLE_NODE:
                self.nodes[tgt] = export_rules.PlanRow(tgt, self.source.uri(tgt), kind, d, action, size, md5, external, data)
                self.node_bytes += len(data) if data else 0
            elif role == ROLE_CHILD:
                if tgt not in self.nodes and tgt not in frontier:
                    nxt.setdefault(tgt, d)
            elif role == ROLE_ODF:
                if d < self.odfs.get(tgt, d + 1):
                    self.odfs[tgt] = d
            elif role == ROLE_MISSING:
                missing.append(err)
            else:
                errors.append(err)
        if missing or errors:
            _failure(missing, errors, f"planning export {self.spec.name!r}", self.spec.version)
        self.levels.append({"depth": depth, "nodes": len(items), "where": LOCAL,
                            "seconds": round(time.perf_counter() - t, 3)})
        if self.on_level is not None:
            self.on_level(len(self.nodes) + len(self.odfs) + len(nxt) * max(1, self.spec.order // 2))
        return nxt

    def _rows(self) -> list[export_rules.PlanRow]:
        rows = {self.def_row.target: self.def_row}
        for p, d in self.odfs.items():
            rows.setdefault(p, export_rules.plan_file(self.source, p, export_rules.KIND_ODF, d))
        for p, r in self.nodes.items():
            rows[p] = r
        return list(rows.values())

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
        remote = self.target if not self.target.on_local_disk else self.source
        if not remote.on_local_disk and (distributed or self.target.engine is None or self.ex.distributed(
                rows, storage=remote, requests_per_item=1)):
            parts = max(parts, min(REMOTE_MIN_PARTS, math.ceil(rows / REMOTE_PART_MIN_ROWS)))
        return parts

    def _write(self, rows: RowSet, upper: int) -> dict[str, Any]:
        """Write the plan's `rows` (at most `upper`, duplicates merged by the parts) as its
        parts, where the rows are; the plan index."""
        step = Place(self.ex, rows.where)
        n_parts = self._part_count(upper, step.distributed)
        with step.phase("export.write_plan", upper, f"export {self.spec.name}: write the plan ({n_parts} parts)") as entry:
            fn = functools.partial(_part_batches, self.target, self.plan_dir)
            # On an object store each part is one range of target keys: the copy verifies a
            # part's server-side copies by listing its range (`copying.copy_batch`), where a
            # hash partition's keys would span the whole lakehouse.
            written = rows.map_batches(fn, SUMMARY_SCHEMA, n_parts, in_flight=self.io_threads, by="target",
                                       by_range=self.target.engine is not None)
            summaries = [dict(zip(SUMMARY_SCHEMA.names, r, strict=True))
                         for r in rows_of(written.batches(), *SUMMARY_SCHEMA.names)]
            for r in summaries:
                step.add_task_requests(r.pop("requests", None))
            if entry is not None:
                entry["items"] = int(str(entry["items"])) + sum(int(r["rows"]) for r in summaries) - upper  # the rows written
        return self._index([{k: int(v) if k != "name" else v for k, v in s.items()} for s in summaries])

    # -- executors --
    def _run_distributed(self, frontier_d: dict[str, int], depth: int) -> dict[str, Any]:
        ex, spec = self.ex, self.spec
        spark = ex.spark
        F = ex.F  # noqa: N806 - the functions of this session's kind (classic or Connect)
        frontier = ex.to_df(pa.table({"target": pa.array(list(frontier_d), pa.string()),
                                      "depth": pa.array(list(frontier_d.values()), pa.int32())}))
        # Hand over the driver's rows (bounded by the thresholds that kept them there).
        held = self._rows()
        # Rows the plan can hold at most (its duplicates are merged when the parts are written).
        self.upper = len(held)
        plan_parts = [spark.createDataFrame(export_plan.plan_table(held), schema=ddl(export_rules.PLAN_SCHEMA))]
        del held
        self.nodes, self.odfs, self.node_bytes = {}, {}, 0
        odf_parts = []
        node_parts = []
        checkpoints = []

        def keep(df: DataFrame) -> DataFrame:
            # Kept by the first job that reads it (the level's counts below): the level's
            # nodes are read once, in one job instead of two.
            df = df.localCheckpoint(eager=False)
            checkpoints.append(df)
            return df

        n = len(frontier_d)
        try:
            while n > 0:
                self._check_depth(depth)
                t = time.perf_counter()
                parts = ex.partitions(n, self.batch)
                with ex.phase("export.plan_nodes", DISTRIBUTED, n,
                              f"export {spec.name}: read {n} nodes at depth {depth} ({parts} tasks)"):
                    fn = functools.partial(_level_batches, self.source, spec, self.io_threads)
                    df = frontier.repartition(parts) if parts > 1 else frontier.coalesce(1)
                    out = keep(df.mapInArrow(fn, ddl(LEVEL_SCHEMA)))
                    # The level's role counts and the size of the next frontier in one small job
                    # (each Spark job costs a second or more on a cluster; this was three).
                    role = F.col("role")
                    aggs = [F.sum((role == r).cast("long")).alias(r) for r in (ROLE_MISSING, ROLE_ERROR, ROLE_NODE,
                                                                               ROLE_ODF)]
                    aggs.append(F.countDistinct(F.when(role == ROLE_CHILD, F.col("target"))).alias("next"))
                    aggs.append(F.collect_list(F.when(role == ROLE_REQUESTS, F.col("error"))).alias("requests"))
                    got = out.agg(*aggs).collect()[0].asDict()
                    for counted in got.pop("requests") or []:
                        ex.add_executor_requests(counted)
                    roles = {k: int(v or 0) for k, v in got.items()}
                    bad = roles.get(ROLE_MISSING, 0) + roles.get(ROLE_ERROR, 0)
                    if bad:
                        sample = (out.filter(F.col("role").isin(ROLE_MISSING, ROLE_ERROR)).select("role", "error")
                                  .limit(5).collect())
                        _failure([r["error"] for r in sample if r["role"] == ROLE_MISSING],
                                 [r["error"] for r in sample if r["role"] == ROLE_ERROR],
                                 f"planning export {spec.name!r}", spec.version)
                    self.upper += roles.get(ROLE_NODE, 0) + roles.get(ROLE_ODF, 0)
                    node_parts.append(out.filter(F.col("role") == ROLE_NODE))
                    odf_parts.append(out.filter(F.col("role") == ROLE_ODF))
                    # A tree: children of this level were never visited before (a cycle ends
                    # at MAX_DEPTH); only duplicates within the level are merged.
                    # Computed from the checkpointed level when the next level reads it.
                    frontier = out.filter(F.col("role") == ROLE_CHILD).groupBy("target").agg(F.min("depth").alias("depth"))
                    n_next = roles["next"]
                self.levels.append({"depth": depth, "nodes": n, "where": DISTRIBUTED, "tasks": parts,
                                    "seconds": round(time.perf_counter() - t, 3)})
                log.info("export %r: depth %d read %d nodes in %d tasks, %d children", spec.name, depth, n, parts,
                         n_next)
                n = n_next
                depth += 1
            return self._write(rowsets.executors(ex, self._executor_rows(plan_parts, node_parts, odf_parts)), self.upper)
        finally:
            for c in checkpoints:
                try:
                    c.unpersist()
                except Exception:  # noqa: BLE001 - checkpoints go with the session
                    pass

    def _executor_rows(self, plan_parts: list, node_parts: list, odf_parts: list) -> DataFrame:
        """Every plan row the executors' levels found, with the rows the driver handed over."""
        ex, source = self.ex, self.source
        F = ex.F  # noqa: N806
        cols = list(export_rules.PLAN_COLUMNS)
        root = source.root if source.root.endswith("/") else source.root + "/"
        uri = F.concat(F.lit(root), F.col("target"))
        nodes = [df.select("target", uri.alias("source"), "kind", "depth", "action", "size", "md5", "external", "data")
                 for df in node_parts]
        nodes += [df.select("target", uri.alias("source"), F.lit(export_rules.KIND_ODF).alias("kind"),
                            F.col("depth").cast("int").alias("depth"), F.lit(export_rules.ACTION_COPY).alias("action"),
                            F.lit(-1).cast("bigint").alias("size"), F.lit("").alias("md5"),
                            F.lit(0).cast("int").alias("external"), F.lit(None).cast("binary").alias("data"))
                  for df in odf_parts]
        # Merged by the plan write's one shuffle, cut by target (`_write`): a groupBy before it,
        # with its checkpoint and count, cost 61 s of a 1.1M-file plan.
        return reduce(lambda a, b: a.unionByName(b), [p.select(*cols) for p in plan_parts + nodes])
