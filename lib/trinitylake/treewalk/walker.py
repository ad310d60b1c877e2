"""The reachable-file walk: on the driver or on the executors, level by level.

A walk is the frontier walk of `trinitylake.treewalk.frontier`: each level is one
`Walk.read_level`, written once over row sets (`trinitylake.rowsets`), and the frontier walk
places it:

* **on the driver** while the level's frontier is at most ``local_max_items`` node files and
  the walk holds at most ``driver_max_rows`` rows: the rows are Arrow tables, the level's
  node files are read by one task on the driver's threads;
* **on the executors** otherwise: the rows are DataFrames, tasks of ``batch_size`` node files
  run through ``mapInArrow``, and every level's result is checkpointed (``localCheckpoint``),
  so the query plan stays flat however deep the tree.

Either way a level reads its node files in batches of many files (`trinitylake.treewalk.node_batch`:
Arrow arrays, no Python object per pointer), emits each node's own row, its children and its
definitions, counts them by role in one aggregate, and merges the children (smallest
first_version per key) less every node visited or excluded.

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
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from trinitylake import rowsets
from trinitylake.errors import CorruptNodeError
from trinitylake.rowsets import Equals, OneOf, Place, RowSet
from trinitylake.spark.execution import (
    DISTRIBUTED,
    Execution,
    as_execution,
)
from trinitylake.treewalk import reach, walk_rules
from trinitylake.treewalk.frontier import walk_levels
from trinitylake.treewalk.walk_rows import (
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

if TYPE_CHECKING:
    from types import ModuleType

    from pyspark.sql import Column, DataFrame

    from trinitylake.lakehouse import Lakehouse
    from trinitylake.storage import Storage
    from trinitylake.storage.background_sizes import BackgroundSizes
    from trinitylake.util import Session

log = logging.getLogger(__name__)

#: What a walk may exclude (see `walk_reachable_with_stats`): a walk's result, rows with a
#: ``path`` column, or keys.
Exclusion: TypeAlias = "Reached | pa.Table | DataFrame | set[str] | frozenset[str] | list[str] | tuple[str, ...] | None"

#: Keys of hashed files (below one of the `HASH_FOLDERS`).
_HASHED_KEY = r"^[01]{4}/"
#: The column numbering a driver walk's definitions in the order they were fed to be sized.
_FED = "_fed"
#: Keys handed to the sizing process at a time.
_FEED_KEYS = 65_536


# ---- the walk -----------------------------------------------------------------------------
def walk_reachable(spark_or_ex: Execution | Session, lakehouse: Lakehouse, roots: Sequence[tuple[int, str]], batch_size: int = 256,
                   parallelism: int = 0, *, exclude: Exclusion = None, sizes: bool = True, tolerate_missing: bool = False,
                   io_threads: int = 8, label: str = "walk", name: str = "walk") -> Reached:
    """Every file reachable from `roots` (see :func:`walk_reachable_with_stats`)."""
    reached, _ = walk_reachable_with_stats(spark_or_ex, lakehouse, roots, batch_size, parallelism, exclude=exclude,
                                           sizes=sizes, tolerate_missing=tolerate_missing, io_threads=io_threads,
                                           label=label, name=name)
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
    walk = Walk(ex, lakehouse, batch_size, parallelism, exclude, tolerate_missing, io_threads, label, name)
    reached = walk.run(roots, sizes)
    return reached, reached.stats


class _Present:
    """Level rows whose file was read (a node's size is known): a `rowsets.Predicate`."""

    def arrow(self, table: pa.Table) -> pa.ChunkedArray:
        return walk_rules.present_arrow(table.column("size")).fill_null(False)

    def column(self, functions: ModuleType) -> Column:
        return walk_rules.present_column(functions.col("size"))


def _exclusion(ex: Execution, exclude: Exclusion) -> RowSet | None:
    """The keys a walk prunes, as rows of one ``path`` column held where they are."""
    if exclude is None:
        return None
    if isinstance(exclude, Reached):
        return exclude.rows.select("path")
    if isinstance(exclude, pa.Table):
        return rowsets.driver(ex, exclude.select(["path"]))
    if isinstance(exclude, set | frozenset | list | tuple):
        return rowsets.driver(ex, batch_table(KEYS_SCHEMA, [sorted(set(exclude))])) if exclude else None
    return rowsets.executors(ex, exclude.select("path"))


class Walk:
    """One walk: its levels (`read_level`, wherever the frontier walk places them) and what
    they hold, as row sets: the nodes read (`selfs`), the definitions met (`leaf_parts`), the
    keys visited and excluded."""

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
        self.kept: list[RowSet] = []
        excl = _exclusion(ex, exclude)
        # Kept on the executors: a level joins it, and its lineage is not recomputed per level.
        self.excl = self._keep(excl) if excl is not None and excl.where == DISTRIBUTED else excl
        self.visited: RowSet | None = None
        self.selfs: list[RowSet] = []
        self.leaf_parts: list[RowSet] = []
        self.sizes = True
        # While the levels run on the driver: how many definition keys they met, each once (see
        # `_met`), and whether every level ran there (then `leaf_parts` hold each key once, in
        # the order fed to the second process that sizes them meanwhile).
        self.met = 0
        self.on_driver_only = True
        self.sizer: BackgroundSizes | None = None

    def run(self, roots: Sequence[tuple[int, str]], sizes: bool) -> Reached:
        t0 = time.perf_counter()
        loc = self.reader.locator
        first: dict[str, tuple[str, int]] = {}
        for version, ptr in roots:
            key, base = loc.root_entry(int(version), ptr)
            if key not in first or version < first[key][1]:
                first[key] = (base, int(version))
        self.stats.roots = len(first)
        self.sizes = sizes
        frontier: RowSet = rowsets.driver(self.ex, batch_table(FRONTIER_SCHEMA, [
            list(first), [b for b, _ in first.values()], [fv for _, fv in first.values()]]))
        size = len(first)
        if self.excl is not None:
            frontier = self._keep(frontier.anti_join(self.excl))
            size = frontier.totals()[0]
        if sizes:
            self.sizer = self.reader.storage.sizes_in_background()
        try:
            reached = walk_levels(self.ex, self, frontier, size, 0)
        finally:
            if self.sizer is not None:
                self.sizer.close()
        self.stats.seconds = round(time.perf_counter() - t0, 3)
        st = self.stats
        log.info("%s: %d files reachable from %d roots (%s); %d node reads for %d unique nodes in %.2fs (%s)",
                 self.label, st.total_files, st.roots, st.files, st.node_reads, st.unique_nodes, st.seconds, st.where)
        return reached

    # -- what the frontier walk asks (`treewalk.frontier.Levels`) --
    @property
    def phase(self) -> str:
        return f"{self.name}.read_nodes"

    @property
    def storage(self) -> Storage:
        return self.reader.storage

    def held_after(self, frontier: int) -> int:
        return sum(lv["frontier"] for lv in self.stats.levels) + self.met + frontier

    def on_executors_only(self) -> bool:
        return self.excl is not None and self.excl.where == DISTRIBUTED

    def read_level(self, step: Place, frontier: RowSet, size: int, depth: int) -> tuple[RowSet, int]:
        """One level, wherever it runs: the frontier's node files read in batches (the same
        `node_batch` reader in a driver thread or an executor task), their rows counted by
        role in one aggregate, the children merged (smallest first_version, then base) less
        every node visited or excluded, kept with their count (two Spark jobs a level)."""
        lt = time.perf_counter()
        if step.distributed and self.sizer is not None:  # the executors size what the walk reaches
            self.sizer.close()
            self.sizer = None
        if step.distributed and self.excl is not None and self.excl.where != DISTRIBUTED:
            self.excl = self._keep(step.rows(self.excl))  # shipped once, not per level
        # The driver reads a level as one task (on a thread pool where the storage wants
        # threads: object stores; on a local filesystem one thread walked a 21k-file lakehouse
        # in 0.6 s, 16 in 1.5 s); the executors in tasks of `batch_size` node files.
        tasks = step.partitions(size, self.batch_size, self.parallelism) if step.distributed else 1
        threads = self.io_threads if step.distributed else self.ex.limits.io_threads(self.reader.storage)
        what = f"read {size} node files at depth {depth}" + (f" ({tasks} tasks)" if step.distributed else "")
        with step.phase(self.phase, size, what):
            fn = functools.partial(expand_batches, self.reader, threads, depth)
            level = self._keep(frontier.map_batches(fn, LEVEL_SCHEMA, tasks))
            counts = level.count_by(["role", ("read", _Present())])
            paths = frontier.select("path")
            self.visited = paths if self.visited is None else self.visited.union(paths)
            if step.distributed and depth % 4 == 3:
                # A union of kept frontiers: flat without a checkpoint of its own, and kept
                # again every few levels so it stays a handful of scans.
                self.visited = self._keep(self.visited, eager=True)
            nxt = (level.filter(Equals("role", reach.ROLE_CHILD)).select(*FRONTIER_SCHEMA.names)
                   .first_by("path", "first_version", "base").anti_join(self.visited))
            if self.excl is not None:
                nxt = nxt.anti_join(self.excl)
            nxt = self._keep(nxt)
            n_next = nxt.totals()[0]

        def rows(role: str, read: bool | None = None) -> int:
            return sum(n for (r, was_read), (n, _) in counts.items() if r == role and read in (None, was_read))

        read_here = rows(reach.ROLE_SELF)
        self.stats.node_reads += read_here + rows(reach.ROLE_ERROR, True)
        bad_roles = [reach.ROLE_ERROR] + ([] if self.tolerate_missing else [reach.ROLE_MISSING])
        bad = sum(rows(r) for r in bad_roles)
        if bad:
            sample = level.filter(OneOf("role", *bad_roles)).head(5, "path", "first_version", "error")
            raise CorruptNodeError(f"cannot read node files at depth {depth} of {self.lakehouse.uri}: "
                                   + reach.describe_failures([(str(k), int(str(v)), str(e)) for k, v, e in sample], bad))
        self.stats.missing += rows(reach.ROLE_MISSING)
        self.selfs.append(level.filter(Equals("role", reach.ROLE_SELF)).select(*OUTPUT_COLUMNS))
        # The columns first: a filter copies every column it keeps.
        leaves = level.select("role", *LEAF_SCHEMA.names).filter(Equals("role", reach.ROLE_LEAF)).select(*LEAF_SCHEMA.names)
        if step.distributed:
            self.on_driver_only = False
            self.leaf_parts.append(leaves)
        else:
            # What the driver keeps of the level is taken (its nodes, definitions and next
            # frontier, each its own table): its rows are let go now, before its definitions
            # are sorted, not when the walk ends (a 1.1M-file walk held every level twice, 2.3
            # GB at its peak), and handed back: Arrow's allocator keeps freed pages for reuse,
            # 450-550 MB after a level of that walk.
            self.kept = [k for k in self.kept if k is not level]
            level.release()
            pa.default_memory_pool().release_unused()
            self._met(leaves)
        self.stats.unique_nodes += read_here
        self.stats.levels.append({"depth": depth, "frontier": size, "read": read_here, "where": step.where,
                                  "tasks": tasks if step.distributed else 0, "next": n_next,
                                  "seconds": round(time.perf_counter() - lt, 3)})
        if step.distributed:
            log.info("%s: depth %d read %d node files in %d tasks, %d new children", self.label, depth,
                     read_here, tasks, n_next)
        return nxt, n_next

    def _met(self, leaves: RowSet) -> None:
        """The definition keys a driver level met for the first time, kept as the level's part of
        the definitions: each key once, with its smallest first_version (then kind) at this
        depth. A key an earlier level met keeps that level's row (the smallest depth wins, the
        rule `result` applies to executor levels), so the parts never overlap and the driver
        holds each definition once, however many nodes name it (1.01M keys met 3.4M times in a
        1.1M-file walk). Counted as held, and handed, in the parts' order, to the second process
        that sizes them meanwhile."""
        if self.leaf_parts:  # first the keys earlier (driver) levels met: most of a deep level's
            leaves = leaves.anti_join(rowsets.chain(self.leaf_parts).select("path"))
        new = leaves.first_by("path", "first_version", "kind")
        n = new.totals()[0]
        self.leaf_parts.append(new)
        self.met += n
        if self.sizer is not None and self.sizer.active and n:
            column = new.to_table().column("path")
            for at in range(0, n, _FEED_KEYS):  # a bounded list of Python strings at a time
                self.sizer.add(column.slice(at, _FEED_KEYS).to_pylist())

    def result(self, step: Place) -> Reached:
        """Every node read and every definition met (smallest depth, then first_version, then
        kind; none visited nor excluded), sized or not, as one result and its summary."""
        selfs = (rowsets.chain(self.selfs) if self.selfs
                 else step.rows(rowsets.driver(self.ex, OUTPUT_SCHEMA.empty_table())))
        leaves, n = None, 0
        if self.leaf_parts:
            leaves = rowsets.chain(self.leaf_parts)
            if self.on_driver_only:  # each key once already (`_met`), numbered in the order fed
                leaves = rowsets.driver(self.ex, leaves.to_table().append_column(
                    _FED, pa.array(range(self.met), pa.int64())))
            else:
                leaves = leaves.first_by("path", "depth", "first_version", "kind")
            for other in (self.visited, self.excl):
                if other is not None:
                    leaves = leaves.anti_join(other)
            leaves = self._keep(leaves)
            n = leaves.totals()[0]
        self.selfs, self.leaf_parts = [], []
        # The summary still runs without adaptive execution (the frontier walk's executor
        # levels): with it, this small aggregation is two jobs.
        return self._finish(selfs, leaves, n, self.sizes)

    def release(self) -> None:
        for rows in self.kept:
            rows.release()
        self.kept = []

    def _keep(self, rows: RowSet, *, eager: bool = False) -> RowSet:
        """`rows` materialized once (on the executors a checkpoint: flat plans, one
        computation), now when `eager`, else in the first job that reads them, which then both
        computes and keeps them. Each Spark job costs scheduling and planning (about 0.2 s of
        driver CPU each on `local[2]`, more on a cluster), so a level reads its nodes in the
        job that counts their roles, and keeps its next frontier in the job that counts it:
        two jobs, not four. Released when the walk's result is made."""
        kept = rows.keep(eager=eager)
        self.kept.append(kept)
        return kept

    def _finish(self, selfs: RowSet, leaves: RowSet | None, n: int, sizes: bool) -> Reached:
        """The walk's last step, wherever its rows are: the nodes' rows (`selfs`) and the `n`
        definition files (`leaves`, `LEAF_SCHEMA`: deduplicated, none visited nor excluded),
        sized or not, as one result, and its summary."""
        place = Place(self.ex, selfs.where)  # where the levels left the rows
        # No definition met: kept by the summary's job (one job instead of two).
        out = selfs.keep() if leaves is None else self._with_definitions(place, selfs, leaves, n, sizes)
        summarize(out, self.stats)
        return Reached(self.stats, out)

    def _sizes(self, leaves: pa.Table) -> pa.Array:
        """Sizes of the definitions the driver's levels met (`leaves`, numbered in the order fed
        by `_FED`): from the second process when it answered for every key met, else sized in
        this process."""
        everything = self.sizer.finish(self.met) if self.sizer is not None else None
        if everything is None:
            keys = [str(k) for k in leaves.column("path").to_pylist()]
            return pa.array(reach.sizes_of(self.reader, keys, self.io_threads), pa.int64())
        sizes = pa.Array.from_buffers(pa.int64(), self.met, [None, pa.py_buffer(everything)]).take(leaves.column(_FED))
        # -2: the child's stat failed otherwise than "missing": the storage answers (retries,
        # typed errors).
        again = pc.indices_nonzero(pc.equal(sizes, -2)).to_pylist()
        if not again:
            return sizes
        fixed = sizes.to_pylist()
        for i in again:
            fixed[i] = self.reader.size(str(leaves.column("path")[i]))
        return pa.array(fixed, pa.int64())

    def _with_definitions(self, place: Place, selfs: RowSet, leaves: RowSet, n: int, sizes: bool) -> RowSet:
        """`selfs` and the `leaves` as `OUTPUT_SCHEMA` rows, sized when `sizes` (else
        `walk_rules.UNKNOWN_SIZE`): on the driver by the sizes taken while the levels ran
        (`_sizes`); on the executors by listings on an object store, else by a stat
        per file in tasks (materialized inside the phase, so its seconds are the sizing's)."""
        phase = f"{self.name}.size_definitions"
        size_field = OUTPUT_SCHEMA.field("size")
        if not place.distributed:  # the step is recorded on the driver even when it sizes nothing
            items = n if sizes else 0
            table = leaves.to_table()
            with place.phase(phase, items, f"size {items} definition files"):
                lsize = self._sizes(table) if sizes else None
            table = table.drop_columns([_FED])
            if lsize is not None:
                return selfs.union(rowsets.driver(self.ex, table.add_column(2, size_field, lsize)))
            leaves = rowsets.driver(self.ex, table)
        elif sizes and n and self.reader.storage.remote:
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
