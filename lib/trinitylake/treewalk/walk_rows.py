"""The rows of the reachable-file walk (`trinitylake.treewalk.walker`): their schemas, the walk's
stats (`WalkStats`; `fill_walk_counts` puts them in a job's result) and result (`Reached`), and
the ``mapInArrow`` functions its executor levels run (reading node files, sizing and listing
definition files)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trinitylake.rowsets import RowSet, SparkRows
from trinitylake.spark.execution import LOCAL, batch_of, chunks, functions_for, rows_of
from trinitylake.treewalk import node_batch, reach, walk_rules

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from trinitylake.runs.results import JobResult
    from trinitylake.storage import Storage

OUTPUT_SCHEMA = pa.schema([("path", pa.string()), ("kind", pa.string()), ("size", pa.int64()),
                           ("depth", pa.int32()), ("first_version", pa.int64())])
OUTPUT_COLUMNS = tuple(OUTPUT_SCHEMA.names)
OUTPUT_DDL = "path string, kind string, size bigint, depth int, first_version bigint"
FRONTIER_SCHEMA = pa.schema([("path", pa.string()), ("base", pa.string()), ("first_version", pa.int64())])
LEVEL_SCHEMA = node_batch.LEVEL_SCHEMA  # role, path, kind, size, depth, first_version, base, error
LEAF_SCHEMA = pa.schema([("path", pa.string()), ("kind", pa.string()), ("depth", pa.int32()),
                         ("first_version", pa.int64())])
KEYS_SCHEMA = pa.schema([("path", pa.string())])
# Node files a task hands to its I/O threads at a time (bounds a task's memory).
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

    @property
    def where(self) -> str:
        places = {lv["where"] for lv in self.levels}
        return places.pop() if len(places) == 1 else ("mixed" if places else LOCAL)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["read_ratio"] = self.read_ratio
        d["total_files"] = self.total_files
        return d


class Reached:
    """The files a walk reached (`OUTPUT_SCHEMA` rows, wherever the walk left them) and its stats."""

    def __init__(self, stats: WalkStats, rows: RowSet):
        self.stats = stats
        self.rows = rows

    def keys(self) -> set[str]:
        """Every reached key, on the driver."""
        return {str(k) for k in self.rows.column_values("path")}

    def release(self) -> None:
        self.rows.release()


def fill_walk_counts(result: JobResult, st: WalkStats, prefix: str = "reachable") -> None:
    """A walk's stats in a job's result: ``<prefix>`` and ``<prefix>_<kind>`` files and bytes,
    the node reads, and ``details["<prefix>_walk"]`` (levels, read ratio, roots, where it ran)."""
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


# ---- executor functions -------------------------------------------------------------------
def expand_batches(reader: reach.Reader, io_threads: int, depth: int, batches: Iterator[pa.RecordBatch]
                   ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of one level: frontier batches (path, base, first_version) in,
    `LEVEL_SCHEMA` batches out (`node_batch`: per chunk of node files, its nodes' rows, then
    their children and definitions, then bad pointers)."""
    pool = ThreadPoolExecutor(max_workers=io_threads) if io_threads > 1 and node_batch.wants_threads(reader) else None
    try:
        for chunk in chunks(rows_of(batches, "path", "base", "first_version"), _CHUNK):
            rows = [(p, b, fv, depth, depth == 0) for p, b, fv in chunk]
            yield from node_batch.expand_rows(reader, rows, pool)
    finally:
        if pool is not None:
            pool.shutdown()


def size_batches(reader: reach.Reader, io_threads: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function sizing definition rows (LEAF_SCHEMA in, OUTPUT_SCHEMA out) one
    key at a time: on local disk (a ``stat`` each). Object stores size from listings instead
    (`list_size_batches`, `folder_size_batches`)."""
    for chunk in chunks(rows_of(batches, "path", "kind", "depth", "first_version"), _CHUNK):
        # listing=False: this task holds a slice of the keys; on an object store the folders
        # are listed in a phase of their own.
        sizes = reach.sizes_of(reader, [r[0] for r in chunk], io_threads, listing=False)
        yield batch_of(OUTPUT_SCHEMA, [[r[0] for r in chunk], [r[1] for r in chunk], [int(s) for s in sizes],
                                       [r[2] for r in chunk], [r[3] for r in chunk]])


LISTED_SCHEMA = pa.schema([("path", pa.string()), ("listed_size", pa.int64())])
#: The top-level hash folders of the format (``bbbb/``): hashed files live below them.
HASH_FOLDERS = [format(i, "04b") for i in range(16)]


def list_size_batches(storage: Storage, io_threads: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: every file (path, size) under the task's folders, listed
    recursively (an object store answers 1,000 sizes per LIST request)."""
    folders = [f for b in batches for f in b.column(0).to_pylist()]
    if not folders:
        return

    def one(folder: str) -> pa.RecordBatch:
        files = list(storage.list(folder))
        return pa.RecordBatch.from_arrays([pa.array([f.path for f in files], pa.string()),
                                           pa.array([int(f.size) for f in files], pa.int64())], schema=LISTED_SCHEMA)

    with ThreadPoolExecutor(max_workers=max(1, min(io_threads, len(folders)))) as pool:
        for b in pool.map(one, folders):
            if b.num_rows:
                yield b



def folder_size_batches(reader: reach.Reader, io_threads: int, batches: Iterator[pa.RecordBatch]
                        ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: every file (walk key, size) directly in the task's folders
    (`reach.size_folder` values: relative folders, ``""`` for the root, or URIs of folders
    elsewhere), one delimited listing each (`reach.folder_sizes`: a LIST per 1,000 files)."""
    folders = [f for b in batches for f in b.column(0).to_pylist()]
    if not folders:
        return
    stores: dict[str, Storage] = {}

    def one(folder: str) -> pa.RecordBatch:
        sizes = reach.folder_sizes(reader, folder, stores)
        return pa.RecordBatch.from_arrays([pa.array(list(sizes), pa.string()),
                                           pa.array(list(sizes.values()), pa.int64())], schema=LISTED_SCHEMA)

    with ThreadPoolExecutor(max_workers=max(1, min(io_threads, len(folders)))) as pool:
        for b in pool.map(one, folders):
            if b.num_rows:
                yield b


def batch_table(schema: pa.Schema, cols: list[list[Any]]) -> pa.Table:
    return pa.Table.from_batches([batch_of(schema, cols)])


# ---- what the walk reached, in sums -------------------------------------------------------
def summarize(rows: RowSet, stats: WalkStats) -> None:
    """Files and bytes per kind, and files outside the root, of the walk's result (one small
    aggregate where the rows are)."""
    if isinstance(rows, SparkRows):
        _summarize_df(rows.df, stats)
    else:
        _summarize_table(rows.to_table(), stats)


def _summarize_table(table: pa.Table, stats: WalkStats) -> None:
    stats.files, stats.bytes, stats.outside = {}, {}, 0
    if table.num_rows == 0:
        return
    sized = pa.table({"kind": table.column("kind"), "size": walk_rules.known_bytes_arrow(table.column("size")),
                      "outside": walk_rules.outside_arrow(table.column("path")).cast(pa.int64())})
    agg = sized.group_by("kind").aggregate([("size", "count"), ("size", "sum"), ("outside", "sum")])
    for kind, n, b, o in zip(*(agg.column(c).to_pylist() for c in ("kind", "size_count", "size_sum", "outside_sum")),
                             strict=True):
        stats.files[kind] = int(n)
        stats.bytes[kind] = int(b or 0)
        stats.outside += int(o or 0)


def _summarize_df(df: DataFrame, stats: WalkStats) -> None:
    F = functions_for(df.sparkSession)  # noqa: N806

    outside = walk_rules.outside_column(F.col("path"))
    summary = df.groupBy("kind").agg(F.count("*").alias("n"),
                                     F.sum(walk_rules.known_bytes_column(F, F.col("size"))).alias("b"),
                                     F.sum(outside.cast("int")).alias("o"))
    stats.files, stats.bytes, stats.outside = {}, {}, 0
    for r in summary.collect():
        stats.files[r["kind"]] = int(r["n"])
        stats.bytes[r["kind"]] = int(r["b"] or 0)
        stats.outside += int(r["o"] or 0)
