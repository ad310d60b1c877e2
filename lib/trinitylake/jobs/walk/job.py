"""The reachable-file walk (on the driver or on the executors, level by level), and the `walk` job.

Every level of the walk decides where it runs (`trinitylake.spark.execution`):

* **on the driver** while the level's frontier is at most ``local_max_items`` node files and
  the walk holds at most ``driver_max_rows`` rows: the frontier is read and decoded in batches
  of many files (`trinitylake.treewalk.node_batch`: Arrow arrays, no Python object per
  pointer; a thread pool reads object stores), children and definitions are deduplicated per
  batch with numpy and only the distinct ones meet the driver's dicts (against a set of
  visited keys);
* **on the executors** otherwise: the frontier is a DataFrame, each task reads a batch of
  node files through ``mapInArrow`` (the same batch reader) and emits the node's own row, its
  children and its definitions as Arrow batches; children are deduplicated per level
  (``groupBy(path)``, smallest first_version) and against every node visited so far
  (``left_anti``). Every level's result is checkpointed (``localCheckpoint``), so the query
  plan stays flat however deep the tree; role counts come back as one small aggregate per level.

A walk starts on the driver and hands over to the executors (once, for its remaining levels)
when a level grows past the thresholds, so a small lakehouse never starts Spark and a large one
never holds the lakehouse in the driver. Every node is read exactly once either way
(``node_reads / unique_nodes = 1.0``).

Definitions are never read: their rows from all levels are deduplicated once at the end
(smallest depth, then smallest first_version), and optionally sized.

An optional `exclude` set of keys prunes the walk: an excluded node is neither read nor
emitted, and since everything below a node is reachable from it, nothing below it is either.
Expiration uses it to compute ``reach(expired) - reach(retained)`` while reading only the node
files that the expired versions do not share with the retained ones.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa

from trinitylake import rowsets
from trinitylake.errors import CorruptNodeError
from trinitylake.jobs.walk import rules as walk_rules
from trinitylake.jobs.walk.rows import (
    FRONTIER_SCHEMA,
    HASH_FOLDERS,
    KEYS_SCHEMA,
    LEAF_SCHEMA,
    LEVEL_SCHEMA,
    LISTED_SCHEMA,
    OUTPUT_COLUMNS,
    OUTPUT_SCHEMA,
    Reached,
    WalkStats,
    batch_table,
    expand_batches,
    folder_size_batches,
    list_size_batches,
    size_batches,
    summarize,
)
from trinitylake.rowsets import Place, RowSet, SparkRows
from trinitylake.runs.folder import run_dir, write_json
from trinitylake.runs.results import JobResult
from trinitylake.spark.execution import (
    DISTRIBUTED,
    LOCAL,
    Execution,
    as_execution,
)
from trinitylake.treewalk import node_batch, reach, table_pointers, walk_roots
from trinitylake.treewalk.background_sizes import BackgroundSizes, sized_in_order
from trinitylake.treewalk.frontier import walk_levels

if TYPE_CHECKING:
    from types import ModuleType

    from pyspark.sql import DataFrame

    from trinitylake.config import WalkConfig
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.storage import Storage
    from trinitylake.util import Session

log = logging.getLogger(__name__)

#: What a walk may exclude (see `walk_reachable_with_stats`): a walk's result, rows with a
#: ``path`` column, or keys.
Exclusion: TypeAlias = "Reached | pa.Table | DataFrame | set[str] | frozenset[str] | list[str] | tuple[str, ...] | None"

#: Keys of hashed files (below one of the `HASH_FOLDERS`).
_HASHED_KEY = r"^[01]{4}/"


# ---- the walk -----------------------------------------------------------------------------
def walk_reachable(spark_or_ex: Execution | Session, lakehouse: Lakehouse, roots: Sequence[tuple[int, str]], batch_size: int = 256,
                   parallelism: int = 0, **kwargs: Any) -> Reached:
    """Every file reachable from `roots` (see :func:`walk_reachable_with_stats`)."""
    reached, _ = walk_reachable_with_stats(spark_or_ex, lakehouse, roots, batch_size, parallelism, **kwargs)
    return reached


def walk_reachable_with_stats(
    spark_or_ex: Execution | Session,
    lakehouse: Lakehouse,
    roots: Sequence[tuple[int, str]],
    batch_size: int = 256,
    parallelism: int = 0,
    *,
    exclude: Exclusion = None,
    sizes: bool = True,
    tolerate_missing: bool = False,
    io_threads: int = 8,
    label: str = "walk",
    name: str = "walk",
) -> tuple[Reached, WalkStats]:
    """Every file reachable from `roots`: a :class:`Reached` of
    ``[path string, kind string, size long, depth int, first_version long]`` and its stats.

    Args:
        spark_or_ex: an `Execution` (placement per level), or a SparkSession (every level on
            its executors, as before placement existed).
        lakehouse: the source `Lakehouse` (its storage root and options; keys are relative to
            its root, see `trinitylake.treewalk.reach`).
        roots: ``(version, root pointer)`` pairs: ``root_name(v)`` for a source version, the
            full URI of an export's root file for an export.
        batch_size: node files per Spark task.
        parallelism: maximum partitions per level (0 = 4 x default parallelism).
        exclude: keys to prune (see module doc): a `Reached`, an Arrow table or DataFrame with
            a ``path`` column, or a set of keys.
        sizes: stat definition files for their sizes (node sizes come free with the read).
        tolerate_missing: skip missing node files (expiration re-walking versions whose files
            an interrupted run already deleted) instead of failing.
        io_threads: concurrent reads per executor task.
        label: prefix of log lines and Spark job descriptions.
        name: prefix of the phases recorded in the execution record (``walk.read_nodes``).

    `kind` is root, node, definition or lakehouse_def; `size` is -1 where unknown (a missing
    definition file, or ``sizes=False``). Release the result when done.

    Raises:
        CorruptNodeError: a node file is missing or unreadable (nothing was written or deleted).
    """
    ex = as_execution(spark_or_ex)
    walk = _Walk(ex, lakehouse, batch_size, parallelism, exclude, tolerate_missing, io_threads, label, name)
    reached = walk.run(roots, sizes)
    return reached, reached.stats


class _Walk:
    def __init__(self, ex: Execution, lakehouse: Lakehouse, batch_size: int, parallelism: int, exclude: Exclusion,
                 tolerate_missing: bool, io_threads: int, label: str, name: str):
        self.ex = ex
        self.name = name  # prefix of the phase names recorded in the result
        self.lakehouse = lakehouse
        self.batch_size = batch_size
        self.parallelism = parallelism
        self.tolerate_missing = tolerate_missing
        self.io_threads = io_threads
        self.label = label
        self.reader = reach.Reader(lakehouse.storage.root, lakehouse.storage.options)
        self.stats = WalkStats()
        # Exclusions: a driver-side set, or a DataFrame (then the walk runs on the executors).
        self.excl_keys: set[str] = set()
        self.excl_df: Any = None
        if isinstance(exclude, Reached):
            if isinstance(exclude.rows, SparkRows):  # the executors hold it
                self.excl_df = exclude.rows.df.select("path")
            else:
                self.excl_keys = exclude.keys()
        elif isinstance(exclude, pa.Table):
            self.excl_keys = set(exclude.column("path").to_pylist())
        elif isinstance(exclude, set | frozenset | list | tuple):
            self.excl_keys = set(exclude)
        elif exclude is not None:
            self.excl_df = exclude.select("path")
        # Driver-side state.
        self.visited: set[str] = set()
        self.selfs: list[list[Any]] = [[] for _ in OUTPUT_SCHEMA]
        self.leaves: dict[str, tuple[int, int, str]] = {}
        # Executor-side state (after the hand-over).
        self.checkpoints: list[Any] = []
        self._threads: ThreadPoolExecutor | None = None
        # Definition sizes taken by a second process while the levels read nodes (`run`).
        self.sizer: BackgroundSizes | None = None

    # -- driver levels --
    def _pool(self) -> ThreadPoolExecutor | None:
        """One thread pool for every driver level (starting threads is slow here), when the
        storage wants threads (`Limits.io_threads`: object stores, whose latency threads hide;
        on a local filesystem one thread walked a 21k-file lakehouse in 0.6 s, 16 in 1.5 s)."""
        threads = self.ex.limits.io_threads(self.lakehouse.storage)
        if self._threads is None and threads > 1:
            self._threads = ThreadPoolExecutor(max_workers=threads)
        return self._threads

    def run(self, roots: Sequence[tuple[int, str]], sizes: bool) -> Reached:
        t0 = time.perf_counter()
        loc = self.reader.locator
        frontier: dict[str, tuple[str, int]] = {}
        for version, ptr in roots:
            key, base = loc.root_entry(int(version), ptr)
            if key not in frontier or version < frontier[key][1]:
                frontier[key] = (base, int(version))
        self.stats.roots = len(frontier)
        frontier = {k: v for k, v in frontier.items() if k not in self.excl_keys}
        if sizes:
            self.sizer = BackgroundSizes(self.reader.storage)
        try:
            reached = self._levels(frontier, sizes)
        finally:
            if self._threads is not None:
                self._threads.shutdown()
            if self.sizer is not None:
                self.sizer.close()
        self.stats.seconds = round(time.perf_counter() - t0, 3)
        st = self.stats
        log.info("%s: %d files reachable from %d roots (%s); %d node reads for %d unique nodes in %.2fs (%s)",
                 self.label, st.total_files, st.roots, st.files, st.node_reads, st.unique_nodes, st.seconds, st.where)
        return reached

    def _levels(self, frontier: dict[str, tuple[str, int]], sizes: bool) -> Reached:
        """Driver levels while they fit, then (at most once) the executors for the rest
        (`trinitylake.treewalk.frontier`)."""
        self.sizes = sizes
        return walk_levels(self.ex, self, frontier, 0)

    # -- what the frontier walk asks (`treewalk.frontier.Levels`) --
    @property
    def phase(self) -> str:
        return f"{self.name}.read_nodes"

    @property
    def storage(self) -> Storage:
        return self.reader.storage

    def held_after(self, frontier: dict[str, tuple[str, int]]) -> int:
        return len(self.visited) + len(self.leaves) + len(frontier)

    def on_executors_only(self) -> bool:
        return self.excl_df is not None

    def driver_result(self) -> Reached:
        selfs, leaves, n = self._driver_leaves()
        return self._finish(selfs, leaves, n, self.sizes)

    def executor_levels(self, frontier: dict[str, tuple[str, int]], depth: int) -> Reached:
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None
        if self.sizer is not None:  # the executors size what the walk reaches
            self.sizer.close()
            self.sizer = None
        return self._run_distributed(frontier, depth, self.sizes)

    def driver_level(self, frontier: dict[str, tuple[str, int]], depth: int) -> dict[str, tuple[str, int]]:
        lt = time.perf_counter()
        rows = [(k, b, fv, depth, depth == 0) for k, (b, fv) in frontier.items()]
        with self.ex.phase(f"{self.name}.read_nodes", LOCAL, len(rows), f"read {len(rows)} node files at depth {depth}"):
            nxt: dict[str, tuple[str, int]] = {}
            failures: list[tuple[str, int, str]] = []
            read = reads = 0
            new_leaves: list[str] | None = [] if self.sizer is not None and self.sizer.active else None
            pool = self._pool() if len(rows) > 1 else None  # shared by every level; run() shuts it down
            level_leaves = node_batch.LevelLeaves(depth + 1, self.leaves, new_leaves)
            # Not `exact`: the merges below keep the smallest per key, which per-node deduplication would not change.
            for batch in node_batch.iter_expand(self.reader, rows, pool, exact=False):
                reads += batch.reads
                ok = batch.role == node_batch.SELF
                read += self._add_selfs(batch, ok, depth)
                if self.tolerate_missing:
                    self.stats.missing += int(np.count_nonzero(batch.role == node_batch.MISSING))
                failures += batch.failures(self.tolerate_missing)
                node_batch.merge_children(batch, nxt)
                level_leaves.add(batch)
            if failures:
                raise CorruptNodeError(f"cannot read node files at depth {depth} of {self.lakehouse.uri}: "
                                       + reach.describe_failures(failures[:5], len(failures)))
            if new_leaves and self.sizer is not None:
                self.sizer.add(new_leaves)  # in the order `leaves` holds them
            self.visited.update(frontier)
            excl = self.excl_keys
            nxt = {k: v for k, v in nxt.items() if k not in self.visited and k not in excl}
        self.stats.node_reads += reads
        self.stats.unique_nodes += read
        self.stats.levels.append({"depth": depth, "frontier": len(rows), "read": read, "where": LOCAL, "tasks": 0,
                                  "next": len(nxt), "seconds": round(time.perf_counter() - lt, 3)})
        return nxt

    def _add_selfs(self, batch: node_batch.NodeBatch, ok: np.ndarray, depth: int) -> int:
        """The rows of the nodes read in `batch` (``ok``), into the driver's columns."""
        idx = np.flatnonzero(ok)
        if not idx.size:
            return 0
        s_path, s_kind, s_size, s_depth, s_fv = self.selfs
        s_path.extend(batch.keys if idx.size == len(batch) else [batch.keys[i] for i in idx.tolist()])
        s_kind.extend(np.where(batch.is_root[idx], reach.KIND_ROOT, reach.KIND_NODE).tolist())
        s_size.extend(batch.size[idx].tolist())
        s_depth.extend([depth] * idx.size)
        s_fv.extend(batch.first_version[idx].tolist())
        return int(idx.size)

    def _driver_leaves(self) -> tuple[RowSet, RowSet, int]:
        """The driver's rows: its nodes' and its leaves not visited nor excluded (`LEAF_SCHEMA`,
        in the order met: `sized_in_order` sizes them in that order)."""
        keys = [k for k in self.leaves if k not in self.visited and k not in self.excl_keys]
        leaves = batch_table(LEAF_SCHEMA, [keys, [self.leaves[k][2] for k in keys], [self.leaves[k][0] for k in keys],
                                           [self.leaves[k][1] for k in keys]])
        selfs = batch_table(OUTPUT_SCHEMA, self.selfs)
        self.selfs = [[] for _ in OUTPUT_SCHEMA]
        return rowsets.driver(self.ex, selfs), rowsets.driver(self.ex, leaves), len(keys)

    # -- executor levels --
    def _keep(self, df: DataFrame, *, eager: bool = True) -> DataFrame:
        """Cut `df`'s lineage (flat plans, one computation) and materialize it: now when
        `eager`, else in the first job that reads it, which then both computes and keeps it.
        Each Spark job costs scheduling and planning (about 0.2 s of driver CPU each on
        `local[2]`, more on a cluster), so a level reads its nodes in the job that counts their
        roles, and keeps its next frontier in the job that counts it: two jobs, not four."""
        df = df.localCheckpoint(eager=eager)
        self.checkpoints.append(df)
        return df

    def _run_distributed(self, frontier_d: dict[str, tuple[str, int]], depth: int, sizes: bool) -> Reached:
        ex = self.ex
        F = ex.F  # noqa: N806
        # Hand over the driver's state: bounded by the thresholds that kept it on the driver.
        frontier = ex.to_df(batch_table(FRONTIER_SCHEMA, [list(frontier_d), [b for b, _ in frontier_d.values()],
                                                          [fv for _, fv in frontier_d.values()]]))
        visited = ex.to_df(batch_table(KEYS_SCHEMA, [sorted(self.visited)])) if self.visited else None
        self_parts = [ex.to_df(batch_table(OUTPUT_SCHEMA, self.selfs))] if self.selfs[0] else []
        leaf_keys = list(self.leaves)
        leaf_parts = [ex.to_df(batch_table(LEAF_SCHEMA, [leaf_keys, [self.leaves[k][2] for k in leaf_keys],
                                                         [self.leaves[k][0] for k in leaf_keys],
                                                         [self.leaves[k][1] for k in leaf_keys]]))] if leaf_keys else []
        if self.excl_keys:
            self.excl_df = (ex.to_df(batch_table(KEYS_SCHEMA, [sorted(self.excl_keys)])) if self.excl_df is None
                            else self.excl_df.unionByName(ex.to_df(batch_table(KEYS_SCHEMA, [sorted(self.excl_keys)]))))
        excl = self._keep(self.excl_df.distinct(), eager=False) if self.excl_df is not None else None
        self.selfs, self.leaves, self.visited = [[] for _ in OUTPUT_SCHEMA], {}, set()
        n = len(frontier_d)
        if excl is not None:
            frontier = self._keep(frontier.join(excl, "path", "left_anti"), eager=False)
            n = frontier.count()
        try:
            while n > 0:
                lt = time.perf_counter()
                parts = ex.partitions(n, self.batch_size, self.parallelism)
                with ex.phase(f"{self.name}.read_nodes", DISTRIBUTED, n,
                              f"read {n} node files at depth {depth} ({parts} tasks)"):
                    fn = functools.partial(expand_batches, self.reader, self.io_threads, depth)
                    # Kept by the roles' job below: the node files are read once, in it.
                    out = self._keep(ex.map_arrow(frontier, fn, LEVEL_SCHEMA, parts), eager=False)
                    roles = {r["role"]: (int(r["n"]), int(r["read"] or 0)) for r in
                             out.groupBy("role").agg(F.count("*").alias("n"),
                                                     F.sum(walk_rules.present_column(F.col("size")).cast("int")).alias("read")).collect()}
                    keys = frontier.select("path")
                    # A union of checkpointed frontiers: flat without a checkpoint of its own, and
                    # re-checkpointed every few levels so it stays a handful of scans.
                    visited = keys if visited is None else visited.unionByName(keys)
                    if depth % 4 == 3:
                        visited = self._keep(visited)
                    nxt = (out.filter(F.col("role") == reach.ROLE_CHILD)
                           .groupBy("path")
                           .agg(F.min(F.struct("first_version", "base")).alias("m"))
                           .select("path", F.col("m.base").alias("base"), F.col("m.first_version").alias("first_version"))
                           .join(visited, "path", "left_anti"))
                    if excl is not None:
                        nxt = nxt.join(excl, "path", "left_anti")
                    nxt = self._keep(nxt, eager=False)
                    n_next = nxt.count()
                read_here = roles.get(reach.ROLE_SELF, (0, 0))[0]
                self.stats.node_reads += read_here + roles.get(reach.ROLE_ERROR, (0, 0))[1]
                bad = roles.get(reach.ROLE_ERROR, (0, 0))[0] + (0 if self.tolerate_missing
                                                            else roles.get(reach.ROLE_MISSING, (0, 0))[0])
                if bad:
                    bad_roles = [reach.ROLE_ERROR] + ([] if self.tolerate_missing else [reach.ROLE_MISSING])
                    sample = (out.filter(F.col("role").isin(bad_roles)).select("path", "first_version", "error")
                              .limit(5).collect())
                    raise CorruptNodeError(f"cannot read node files at depth {depth} of {self.lakehouse.uri}: "
                                           + reach.describe_failures([tuple(r) for r in sample], bad))
                self.stats.missing += roles.get(reach.ROLE_MISSING, (0, 0))[0]
                self_parts.append(out.filter(F.col("role") == reach.ROLE_SELF).select(*OUTPUT_COLUMNS))
                leaf_parts.append(out.filter(F.col("role") == reach.ROLE_LEAF).select(*LEAF_SCHEMA.names))
                frontier = nxt
                self.stats.unique_nodes += read_here
                self.stats.levels.append({"depth": depth, "frontier": n, "read": read_here, "where": DISTRIBUTED,
                                          "tasks": parts, "next": n_next,
                                          "seconds": round(time.perf_counter() - lt, 3)})
                log.info("%s: depth %d read %d node files in %d tasks, %d new children", self.label, depth,
                         read_here, parts, n_next)
                n = n_next
                depth += 1
            empty_self = ex.to_df(OUTPUT_SCHEMA.empty_table())
            selfs = rowsets.executors(ex, functools.reduce(lambda a, b: a.unionByName(b), self_parts, empty_self))
            leaves, n_leaves = self._executor_leaves(leaf_parts, visited, excl)
            # The summary still runs without adaptive execution (`executor_levels`): with it,
            # this small aggregation is two jobs.
            reached = self._finish(selfs, leaves, n_leaves, sizes)  # its rows hold their own checkpoint
        finally:
            for df in self.checkpoints:
                try:
                    df.unpersist()
                except Exception:  # noqa: BLE001
                    pass
        return reached

    def _executor_leaves(self, leaf_parts: list[DataFrame], visited: DataFrame | None,
                         excl: DataFrame | None) -> tuple[RowSet | None, int]:
        """The executors' leaves of every level, deduplicated (smallest depth, then smallest
        first_version), less the visited and excluded ones, kept; and how many."""
        if not leaf_parts:
            return None, 0
        F = self.ex.F  # noqa: N806
        leaves = functools.reduce(lambda a, b: a.unionByName(b), leaf_parts)
        best = F.min(F.struct("depth", "first_version", "kind")).alias("m")
        leaves = (leaves.groupBy("path").agg(best)
                  .select("path", F.col("m.kind").alias("kind"), F.col("m.depth").alias("depth"),
                          F.col("m.first_version").alias("first_version")))
        if visited is not None:
            leaves = leaves.join(visited, "path", "left_anti")
        if excl is not None:
            leaves = leaves.join(excl, "path", "left_anti")
        leaves = self._keep(leaves, eager=False)
        return rowsets.executors(self.ex, leaves), leaves.count()

    def _finish(self, selfs: RowSet, leaves: RowSet | None, n: int, sizes: bool) -> Reached:
        """The walk's last step, wherever its rows are: the nodes' rows (`selfs`) and the `n`
        definition files (`leaves`, `LEAF_SCHEMA`: deduplicated, none visited nor excluded),
        sized or not, as one result, and its summary."""
        place = Place(self.ex, selfs.where)  # where the levels left the rows
        # No definition met: kept by the summary's job (one job instead of two).
        out = selfs.keep() if leaves is None else self._with_definitions(place, selfs, leaves, n, sizes)
        self.leaves = {}
        summarize(out, self.stats)
        return Reached(self.stats, out)

    def _with_definitions(self, place: Place, selfs: RowSet, leaves: RowSet, n: int, sizes: bool) -> RowSet:
        """`selfs` and the `leaves` as `OUTPUT_SCHEMA` rows, sized when `sizes` (else
        `walk_rules.UNKNOWN_SIZE`): on the driver by the sizes taken while the levels ran
        (`sized_in_order`); on the executors by listings on an object store, else by a stat
        per file in tasks (materialized inside the phase, so its seconds are the sizing's)."""
        phase = f"{self.name}.size_definitions"
        size_field = OUTPUT_SCHEMA.field("size")
        if not place.distributed:  # the step is recorded on the driver even when it sizes nothing
            items = n if sizes else 0
            with place.phase(phase, items, f"size {items} definition files"):
                keys = [str(k) for k in leaves.column_values("path")]
                lsize = sized_in_order(self.sizer, self.leaves, keys, self.reader, self.io_threads) if sizes else None
            if lsize is not None:
                sized_t = leaves.to_table().add_column(2, size_field, pa.array(lsize, pa.int64()))
                return selfs.union(rowsets.driver(self.ex, sized_t))
        elif sizes and n and not self.reader.storage.on_local_disk:
            # Object store: sizes from listings, never a HEAD per file (`reach.listed_sizes`'s
            # request model). Hashed definitions: recursive listings of the 16 hash folders (a
            # LIST per 1,000 files). The others (lakehouse definitions at the root, files
            # outside the hash folders, a partial export's own files and anything else reached
            # by absolute URI): one delimited listing per folder that holds one of them.
            ex = self.ex
            F = ex.F  # noqa: N806
            df = leaves.native
            with place.phase(phase, n, f"size {n} definition files (listings)"):
                listed = ex.map_arrow(pa.table({"folder": pa.array(HASH_FOLDERS, pa.string())}),
                                      functools.partial(list_size_batches, self.reader.storage, self.io_threads),
                                      LISTED_SCHEMA, ex.partitions(len(HASH_FOLDERS), 1))
                hashed = F.col("path").rlike(_HASHED_KEY)
                by_list = _sized_by(F, df.filter(hashed), listed)
                others = df.filter(~hashed)
                # `reach.size_folder` as a column: the key up to its last "/" ("" at the root).
                folders = sorted(r["folder"] for r in others.select(
                    F.regexp_extract(F.col("path"), r"^(.*)/[^/]*$", 1).alias("folder")).distinct().collect())
                sized_parts = [selfs.native, by_list]
                if folders:
                    in_folders = ex.map_arrow(pa.table({"folder": pa.array(folders, pa.string())}),
                                              functools.partial(folder_size_batches, self.reader, self.io_threads),
                                              LISTED_SCHEMA, ex.partitions(len(folders), 64, self.parallelism))
                    sized_parts.append(_sized_by(F, others, in_folders))
                return rowsets.executors(ex, functools.reduce(lambda a, b: a.unionByName(b), sized_parts)).keep(eager=True)
        elif sizes and n:
            parts = place.partitions(n, max(self.batch_size, 1024), self.parallelism)
            with place.phase(phase, n, f"size {n} definition files ({parts} tasks)"):
                sized = leaves.map_batches(functools.partial(size_batches, self.reader, self.io_threads),
                                           OUTPUT_SCHEMA, parts)
                return selfs.union(sized).keep(eager=True)
        # No phase to time here (executors): kept by the summary's job that follows, one job instead of two.
        return selfs.union(leaves.with_constant(size_field, walk_rules.UNKNOWN_SIZE, OUTPUT_COLUMNS)).keep()


def _sized_by(F: ModuleType, leaves: DataFrame, listed: DataFrame) -> DataFrame:  # noqa: N803 - the session's functions
    """`leaves` (LEAF_SCHEMA) as OUTPUT_SCHEMA rows, sized by the `listed` (LISTED_SCHEMA) files;
    a leaf no listing shows is missing (`walk_rules.UNKNOWN_SIZE`)."""
    return (leaves.join(listed, "path", "left")
            .select("path", "kind", F.coalesce(F.col("listed_size"), F.lit(walk_rules.UNKNOWN_SIZE)).cast("long").alias("size"),
                    "depth", "first_version"))


# ---- the job ------------------------------------------------------------------------------
def run_walk(ex: Execution, lakehouse: Lakehouse, cfg: WalkConfig, result: JobResult) -> JobResult:
    """The walk job: list every file reachable from the configured versions (default: every
    retained version, pinned export and pinned version; self-contained exports are reported in
    ``details["exports"]``, not walked) into Parquet at ``cfg.output``."""
    t0 = time.perf_counter()
    versions = None if isinstance(cfg.versions, str) else list(cfg.versions)  # str: 'retained'
    # The version the job started at: the walk reports that snapshot (a commit meanwhile is
    # walked by the next run), and discovering it again costs round trips on an object store.
    inp = walk_roots.walk_input(lakehouse, versions, latest=result.version_before)
    result.seconds["plan"] = round(time.perf_counter() - t0, 3)
    result.counts["versions"] = len(inp.retained_versions)
    result.counts["exports"] = len(inp.export_roots)
    result.counts["self_contained_exports"] = len(inp.self_contained_exports)
    result.counts["pinned_versions"] = len(inp.pinned_versions)
    result.details["exports"] = exports_walked(inp)
    result.details["warnings"] = inp.warnings
    t0 = time.perf_counter()
    reached, st = walk_reachable_with_stats(ex, lakehouse, inp.roots, cfg.batch_size, cfg.parallelism,
                                            label=f"tlake walk {result.run_id}")
    result.seconds["walk"] = round(time.perf_counter() - t0, 3)
    try:
        t0 = time.perf_counter()
        out = reached.rows.write(cfg.output, lakehouse.storage.options, st.total_files)
        result.seconds["write"] = round(time.perf_counter() - t0, 3)
        result.output_location = out
        fill_walk_counts(result, st)
        fill_table_pointer_counts(result, lakehouse, st, ex.limits.io_threads(lakehouse.storage))
        summary = {"run_id": result.run_id, "lakehouse": lakehouse.uri, "output": out,
                   "versions": inp.retained_versions, "exports": inp.export_roots,
                   "self_contained_exports": inp.self_contained_exports,
                   "pinned_versions": inp.pinned_versions, "stats": st.to_dict()}
        result.plan_location = write_json(lakehouse.storage, f"{run_dir('walk', result.run_id)}/_summary.json", summary)
    finally:
        reached.release()
    log.info("walk %s: %d reachable files (%s), %d bytes; listing at %s", result.run_id, st.total_files,
             ", ".join(f"{k} {v}" for k, v in sorted(st.files.items())), sum(st.bytes.values()), out)
    return result


def exports_walked(inp: walk_roots.WalkInput) -> dict[str, dict[str, Any]]:
    """What the walk did with each recorded export, for the result's details: a pinned export's
    root was walked (it may reference source files); a self-contained one (unpinned: a full
    export, or a partial one that reached the bottom of the tree) was neither read nor sized
    (`trinitylake.treewalk.walk_roots`)."""
    out: dict[str, dict[str, Any]] = {}
    pinned = inp.pinned_versions
    for name, uri in inp.export_roots.items():
        out[name] = {"root": uri, "walked": True, "pinned_version": pinned.get(name),
                     "reason": "pinned: references source files"}
    for name, v in pinned.items():
        if name not in out:  # its root is missing (see the warnings): the pinned version is walked
            out[name] = {"root": None, "walked": False, "pinned_version": v,
                         "reason": f"root missing; pinned version {v} walked instead"}
    for name, uri in inp.self_contained_exports.items():
        out[name] = {"root": uri, "walked": False, "pinned_version": None,
                     "reason": "self-contained, not walked"}
    return dict(sorted(out.items()))


def fill_walk_counts(result: JobResult, st: WalkStats, prefix: str = "reachable") -> None:
    result.counts[prefix] = st.total_files
    for k, v in st.files.items():
        result.counts[f"{prefix}_{k}"] = v
    result.bytes[prefix] = sum(st.bytes.values())
    for k, v in st.bytes.items():
        result.bytes[f"{prefix}_{k}"] = v
    result.counts["node_reads"] = result.counts.get("node_reads", 0) + st.node_reads
    result.counts["unique_nodes"] = result.counts.get("unique_nodes", 0) + st.unique_nodes
    result.details[f"{prefix}_walk"] = {"levels": st.levels, "read_ratio": st.read_ratio, "roots": st.roots,
                                        "missing": st.missing, "seconds": st.seconds, "where": st.where}


def fill_table_pointer_counts(result: JobResult, lakehouse: Lakehouse, st: WalkStats, io_threads: int) -> None:
    """``table_pointers_<kind>`` counts of the latest version's tables (`table_pointers.table_pointer_counts`:
    ICEBERG / other formats / none, and how many point outside the lakehouse root), from the
    table definitions alone; ``details["table_pointers"]`` says what was counted, or why not
    (more than `table_pointers.TABLE_POINTER_DEF_LIMIT` definition files reached)."""
    t0 = time.perf_counter()
    counts, details = table_pointers.table_pointer_counts(lakehouse, None, st.files.get(reach.KIND_DEFINITION, 0),
                                             io_threads=io_threads)
    result.counts.update(counts)
    details["seconds"] = round(time.perf_counter() - t0, 3)
    result.details["table_pointers"] = details

