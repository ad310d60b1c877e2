"""The distributed reachable-file walk, and the `walk` job.

The driver holds only the roots (the version chain, export roots, pinned versions) and
counts. Node files are read by executors, level by level:

1. the frontier of level d (a cached DataFrame of node keys) is repartitioned into
   ``ceil(n / batch_size)`` partitions (at most 4 x default parallelism) and every task reads
   its node files with a few I/O threads (`trinitylake.maintenance.reach.expand_node_rows`),
   emitting the node's own row, its children and its definitions;
2. the children are deduplicated per level (``groupBy(path)``, keeping the smallest
   first_version) and against *every* node visited so far (``left_anti`` join with the union
   of the earlier frontiers), so a node shared by many versions, or found at different depths
   in different versions, is read exactly once (the ``node_reads`` accumulator measures it:
   node reads / unique nodes = 1.0);
3. the next level starts from what is left; the walk ends when a level is empty.

Definitions are never read: their rows from all levels are deduplicated once at the end
(smallest depth, then smallest first_version), and optionally sized by executors.

An optional `exclude` DataFrame of keys prunes the walk: an excluded node is neither read nor
emitted, and since everything below a node is reachable from it, nothing below it is either.
Expiration uses it to compute ``reach(expired) - reach(retained)`` while reading only the node
files that the expired versions do not share with the retained ones.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from trinitylake.errors import CorruptNodeError
from trinitylake.maintenance import reach as R
from trinitylake.maintenance.plan import run_dir, write_json
from trinitylake.maintenance.results import JobResult
from trinitylake.spark.common import Phases, partitions_for
from trinitylake.spark.output import write_parquet

log = logging.getLogger(__name__)

OUTPUT_COLUMNS = ("path", "kind", "size", "depth", "first_version")
OUTPUT_DDL = "path string, kind string, size bigint, depth int, first_version bigint"
_FRONTIER_DDL = "path string, base string, first_version bigint"
_LEVEL_DDL = ("role string, path string, kind string, size bigint, depth int, first_version bigint, "
              "base string, error string")
# Rows a task hands to its I/O threads at a time (bounds a task's memory).
_CHUNK = 1024


@dataclass
class WalkStats:
    """What a walk did: reads, unique files, levels, files and bytes per kind."""

    roots: int = 0
    node_reads: int = 0
    unique_nodes: int = 0
    files: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    levels: list[dict[str, Any]] = field(default_factory=list)
    missing: int = 0
    outside: int = 0  # reachable files outside the lakehouse root (exports' own files)
    seconds: float = 0.0

    @property
    def total_files(self) -> int:
        return sum(self.files.values())

    @property
    def read_ratio(self) -> float:
        """Node reads per unique node file read (1.0 = every node read exactly once)."""
        return self.node_reads / self.unique_nodes if self.unique_nodes else 1.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["read_ratio"] = self.read_ratio
        d["total_files"] = self.total_files
        return d


# ---- executor functions -------------------------------------------------------------------
def _chunks(it: Any, n: int) -> Any:
    buf = []
    for x in it:
        buf.append(x)
        if len(buf) >= n:
            yield buf
            buf = []
    if buf:
        yield buf


class _Counter:
    """AccumulatorParam of ``{name: count}`` dicts (role counts and reads of one level)."""

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:  # noqa: N802 - Spark's API
        for k, n in b.items():
            a[k] = a.get(k, 0) + n
        return a


def _expand_partition(reader: R.Reader, io_threads: int, acc: Any, rows: Any) -> Any:
    counts: dict[str, int] = {}
    for chunk in _chunks(rows, _CHUNK):
        batch = [(r[0], r[1], r[2], r[3], r[4]) for r in chunk]
        for emitted, n in R.expand_node_rows(reader, batch, io_threads):
            counts["reads"] = counts.get("reads", 0) + n
            for row in emitted:
                counts[row[0]] = counts.get(row[0], 0) + 1
            yield from emitted
    acc.add(counts)


def _expand_rows(reader: R.Reader, io_threads: int, acc: Any, depth: int, rows: Any) -> Any:
    """Frontier rows (path, base, first_version) of one depth; depth 0 holds the roots."""
    return _expand_partition(reader, io_threads, acc, ((r[0], r[1], r[2], depth, depth == 0) for r in rows))


def _size_partition(reader: R.Reader, io_threads: int, rows: Any) -> Any:
    for chunk in _chunks(rows, _CHUNK):
        sizes = R.sizes_of(reader, [r[0] for r in chunk], io_threads)
        for r, s in zip(chunk, sizes, strict=True):
            yield (r[0], r[1], int(s), int(r[3]), int(r[4]))


# ---- the walk -----------------------------------------------------------------------------
def walk_reachable(
    spark: Any,
    lakehouse: Any,
    roots: Sequence[tuple[int, str]],
    batch_size: int = 256,
    parallelism: int = 0,
    **kwargs: Any,
) -> Any:
    """Every file reachable from `roots`, as a cached DataFrame
    ``[path string, kind string, size long, depth int, first_version long]``.

    Args:
        spark: the SparkSession.
        lakehouse: the source `Lakehouse` (its storage root and options; keys are relative to
            its root, see `trinitylake.maintenance.reach`).
        roots: ``(version, root pointer)`` pairs: ``root_name(v)`` for a source version, the
            full URI of an export's root file for an export.
        batch_size: node files per Spark task.
        parallelism: maximum partitions per level (0 = 4 x default parallelism).
        **kwargs: see :func:`walk_reachable_with_stats` (exclude, sizes, tolerate_missing, ...).

    `kind` is root, node, definition or lakehouse_def; `size` is -1 where unknown (a missing
    definition file, or ``sizes=False``). The DataFrame is persisted; unpersist it when done.

    Raises:
        CorruptNodeError: a node file is missing or unreadable (nothing was written or deleted).
    """
    df, _ = walk_reachable_with_stats(spark, lakehouse, roots, batch_size, parallelism, **kwargs)
    return df


def walk_reachable_with_stats(
    spark: Any,
    lakehouse: Any,
    roots: Sequence[tuple[int, str]],
    batch_size: int = 256,
    parallelism: int = 0,
    *,
    exclude: Any = None,
    sizes: bool = True,
    tolerate_missing: bool = False,
    io_threads: int = 8,
    label: str = "walk",
) -> tuple[Any, WalkStats]:
    """:func:`walk_reachable` plus its :class:`WalkStats`.

    Args:
        exclude: a DataFrame with a ``path`` column of walk keys to prune (see module doc).
        sizes: stat definition files for their sizes (node sizes come free with the read).
        tolerate_missing: skip missing node files (expiration re-walking versions whose files
            an interrupted run already deleted) instead of failing.
        io_threads: concurrent reads per task.
        label: prefix of the Spark job descriptions.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    sc = spark.sparkContext
    storage = lakehouse.storage
    reader = R.Reader(storage.root, storage.options)
    loc = reader.locator
    stats = WalkStats()
    start: dict[str, tuple[str, int]] = {}
    for version, ptr in roots:
        key, base = loc.root_entry(int(version), ptr)
        if key not in start or version < start[key][1]:
            start[key] = (base, int(version))
    stats.roots = len(start)
    level = StorageLevel.MEMORY_AND_DISK
    persisted: list[Any] = []

    def keep(df: Any) -> Any:
        df = df.persist(level)
        persisted.append(df)
        return df

    counter = _Counter()
    final = None
    with _walk_sql_conf(spark):
        frontier = spark.createDataFrame([(k, b, v) for k, (b, v) in start.items()], _FRONTIER_DDL)
        excl = keep(exclude.select("path").distinct()) if exclude is not None else None
        n = len(start)
        if excl is not None and n:
            frontier = keep(frontier.join(excl, "path", "left_anti"))
            n = frontier.count()
        visited = None
        self_parts: list[Any] = []
        leaf_parts: list[Any] = []
        depth = 0
        leaf_rows = 0
        try:
            while n > 0:
                # One Spark job per level: read the frontier (a Python stage), deduplicate the
                # children per key and against every key visited so far (JVM stages), count what
                # is left. Role counts come back in an accumulator.
                lt = time.perf_counter()
                parts = partitions_for(spark, n, batch_size, parallelism)
                sc.setJobDescription(f"{label}: read {n} node files at depth {depth} ({parts} tasks)")
                acc = sc.accumulator({}, counter)
                src = frontier.repartition(parts) if parts > 1 else frontier.coalesce(1)
                rdd = src.rdd.mapPartitions(functools.partial(_expand_rows, reader, io_threads, acc, depth))
                out = keep(spark.createDataFrame(rdd, _LEVEL_DDL, verifySchema=False))
                keys = frontier.select("path")
                visited = keys if visited is None else visited.union(keys)
                nxt = (out.filter(F.col("role") == R.ROLE_CHILD)
                       .groupBy("path")
                       .agg(F.min(F.struct("first_version", "base")).alias("m"))
                       .select("path", F.col("m.base").alias("base"), F.col("m.first_version").alias("first_version"))
                       .join(visited, "path", "left_anti"))
                if excl is not None:
                    nxt = nxt.join(excl, "path", "left_anti")
                nxt = keep(nxt)
                n_next = nxt.count()
                roles = dict(acc.value)
                stats.node_reads += roles.get("reads", 0)
                bad = roles.get(R.ROLE_ERROR, 0) + (0 if tolerate_missing else roles.get(R.ROLE_MISSING, 0))
                if bad:
                    bad_roles = [R.ROLE_ERROR] + ([] if tolerate_missing else [R.ROLE_MISSING])
                    sample = (out.filter(F.col("role").isin(bad_roles)).select("path", "first_version", "error")
                              .limit(5).collect())
                    raise CorruptNodeError(f"cannot read node files at depth {depth} of {lakehouse.uri}: "
                                           + R.describe_failures([tuple(r) for r in sample], bad))
                stats.missing += roles.get(R.ROLE_MISSING, 0)
                leaf_rows += roles.get(R.ROLE_LEAF, 0)
                self_parts.append(out.filter(F.col("role") == R.ROLE_SELF).select(*OUTPUT_COLUMNS))
                leaf_parts.append(out.filter(F.col("role") == R.ROLE_LEAF).select("path", "kind", "depth",
                                                                                 "first_version"))
                frontier = nxt
                read_here = roles.get(R.ROLE_SELF, 0)
                stats.unique_nodes += read_here
                stats.levels.append({"depth": depth, "frontier": n, "read": read_here, "tasks": parts,
                                     "next": n_next, "seconds": round(time.perf_counter() - lt, 3)})
                log.info("%s: depth %d read %d node files in %d tasks, %d new children", label, depth, read_here,
                         parts, n_next)
                n = n_next
                depth += 1
            sc.setJobDescription(f"{label}: collect the reachable definitions")
            selfs = _union(spark, self_parts, OUTPUT_DDL)
            leaves = _union(spark, leaf_parts, "path string, kind string, depth int, first_version bigint")
            # Smallest depth, then smallest first_version; never a file read as a node, or excluded.
            best = F.min(F.struct("depth", "first_version", "kind")).alias("m")
            leaves = (leaves.groupBy("path").agg(best)
                      .select("path", F.col("m.kind").alias("kind"), F.lit(-1).cast("long").alias("size"),
                              F.col("m.depth").alias("depth"), F.col("m.first_version").alias("first_version")))
            if visited is not None:
                leaves = leaves.join(visited, "path", "left_anti")
            if excl is not None:
                leaves = leaves.join(excl, "path", "left_anti")
            if sizes and leaf_rows:
                # The leaf rows emitted (before deduplication) bound the number of definitions.
                parts = partitions_for(spark, leaf_rows, max(batch_size, 256), parallelism)
                src = leaves.repartition(parts) if parts > 1 else leaves.coalesce(1)
                sized = src.rdd.mapPartitions(functools.partial(_size_partition, reader, io_threads))
                leaves = spark.createDataFrame(sized, OUTPUT_DDL, verifySchema=False)
            final = selfs.unionByName(leaves).persist(level)
            sc.setJobDescription(f"{label}: summarize")
            outside = F.col("path").contains("://")
            summary = final.groupBy("kind").agg(F.count("*").alias("n"),
                                                F.sum(F.when(F.col("size") >= 0, F.col("size"))).alias("b"),
                                                F.sum(outside.cast("int")).alias("o"))
            for r in summary.collect():
                stats.files[r["kind"]] = int(r["n"])
                stats.bytes[r["kind"]] = int(r["b"] or 0)
                stats.outside += int(r["o"] or 0)
        except BaseException:
            if final is not None:
                final.unpersist()
            raise
        finally:
            sc.setJobDescription(None)
            for df in persisted:
                df.unpersist()
    stats.seconds = round(time.perf_counter() - t0, 3)
    log.info("%s: %d files reachable from %d roots (%s); %d node reads for %d unique nodes in %.2fs",
             label, stats.total_files, stats.roots, stats.files, stats.node_reads, stats.unique_nodes, stats.seconds)
    return final, stats


@contextmanager
def _walk_sql_conf(spark: Any) -> Any:
    """Adaptive execution off while walking: every level is one small query whose partitions
    the walk sizes itself, and AQE would split each into several jobs with re-planning in
    between (measured: a third of a level's time on small lakehouses). Restored afterwards."""
    key = "spark.sql.adaptive.enabled"
    old = spark.conf.get(key, None)
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


def _union(spark: Any, parts: list[Any], ddl: str) -> Any:
    if not parts:
        return spark.createDataFrame([], ddl)
    return functools.reduce(lambda a, b: a.unionByName(b), parts)


# ---- the job ------------------------------------------------------------------------------
def run_walk(spark: Any, lakehouse: Any, cfg: Any, result: JobResult) -> JobResult:
    """The walk job: list every file reachable from the configured versions (default: every
    retained version, export and pinned version) into Parquet at ``cfg.output``."""
    phase = Phases(spark, result)
    with phase("plan", "choose the roots"):
        versions = None if cfg.versions == "retained" else list(cfg.versions)
        inp = R.walk_input(lakehouse, versions)
    result.counts["versions"] = len(inp.retained_versions)
    result.counts["exports"] = len(inp.export_roots)
    result.counts["pinned_versions"] = len(inp.pinned_versions)
    result.details["warnings"] = inp.warnings
    with phase("walk", "walk the reachable files"):
        df, st = walk_reachable_with_stats(spark, lakehouse, inp.roots, cfg.batch_size, cfg.parallelism,
                                           label=f"tlake walk {result.run_id}")
    try:
        with phase("write", "write the listing"):
            out = write_parquet(df, cfg.output, lakehouse.storage.options, rows=st.total_files)
        result.output_location = out
        _fill_walk_counts(result, st)
        summary = {"run_id": result.run_id, "lakehouse": lakehouse.uri, "output": out,
                   "versions": inp.retained_versions, "exports": inp.export_roots,
                   "pinned_versions": inp.pinned_versions, "stats": st.to_dict()}
        plan_storage = lakehouse.storage
        result.plan_location = write_json(plan_storage, f"{run_dir('walk', result.run_id)}/_summary.json", summary)
    finally:
        df.unpersist()
    log.info("walk %s: %d reachable files (%s), %d bytes; listing at %s", result.run_id, st.total_files,
             ", ".join(f"{k} {v}" for k, v in sorted(st.files.items())), sum(st.bytes.values()), out)
    return result


def _fill_walk_counts(result: JobResult, st: WalkStats, prefix: str = "reachable") -> None:
    result.counts[prefix] = st.total_files
    for k, v in st.files.items():
        result.counts[f"{prefix}_{k}"] = v
    result.bytes[prefix] = sum(st.bytes.values())
    for k, v in st.bytes.items():
        result.bytes[f"{prefix}_{k}"] = v
    result.counts["node_reads"] = result.counts.get("node_reads", 0) + st.node_reads
    result.counts["unique_nodes"] = result.counts.get("unique_nodes", 0) + st.unique_nodes
    result.details[f"{prefix}_walk"] = {"levels": st.levels, "read_ratio": st.read_ratio, "roots": st.roots,
                                        "missing": st.missing, "seconds": st.seconds}
