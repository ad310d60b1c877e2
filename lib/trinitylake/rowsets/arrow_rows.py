"""The driver's rows (`ArrowRows`): an Arrow table, or the batches of a driver-side map taken
as its tasks finish; maps run on the driver's thread pool, joins and aggregates are Arrow
compute. A driver-held side met by executor-held rows is shipped to them (`SparkRows.ship`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from trinitylake.rowsets.predicates import Key, Predicate, Term
from trinitylake.rowsets.rowset import RowSet
from trinitylake.rowsets.spark_rows import SparkRows
from trinitylake.spark.execution import LOCAL, BatchFn, Execution
from trinitylake.spark.output import write_listing


def _slices(table: pa.Table, parts: int, by: str | None = None) -> list[pa.Table]:
    """`table` in up to `parts` slices of about equal rows; with `by`, sorted by that column
    and cut only where its value changes (one value's rows in one slice)."""
    if by is not None:
        table = table.sort_by(by)
    n = table.num_rows
    if parts <= 1 or n <= 1:
        return [table]
    per = -(-n // min(parts, n))
    starts = list(range(0, n, per))
    if by is not None:
        values = table.column(by)
        moved = [0]
        for i in starts[1:]:
            i = max(i, moved[-1])
            while 0 < i < n and values[i] == values[i - 1]:
                i += 1
            if i < n and i > moved[-1]:
                moved.append(i)
        starts = moved
    return [table.slice(a, b - a) for a, b in zip(starts, [*starts[1:], n], strict=True)]


def _sortable(column: pa.ChunkedArray, *, ranks: bool) -> pa.Array:
    """`column` as numbers that sort as its values do (`ranks`), or that only tell equal values
    apart; numbers as they are."""
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
            or pa.types.is_binary(column.type)):
        return column.combine_chunks()
    encoded = pc.dictionary_encode(column).combine_chunks()
    if not ranks:
        return encoded.indices
    order = pc.rank(encoded.dictionary, sort_keys="ascending", tiebreaker="dense")
    return order.take(encoded.indices)


_task = threading.local()


def task_number() -> int:
    """The number of the task running a `map_batches` function: its slice on the driver, its
    partition on the executors (0 outside any task)."""
    number = getattr(_task, "number", None)
    if number is not None:
        return int(number)
    from pyspark import TaskContext  # only reached inside an executor task, where pyspark is loaded

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


class ArrowRows(RowSet):
    """Rows held by the driver: an Arrow table, or the batches of a driver-side map, taken as
    its tasks finish (`batches`) and kept once read (`to_table`)."""

    where = LOCAL

    def __init__(self, ex: Execution, table: pa.Table | None = None, *, schema: pa.Schema | None = None,
                 stream: Iterator[pa.RecordBatch] | None = None):
        self.ex = ex
        self._table = table
        self._schema = table.schema if table is not None else schema
        self._stream = stream

    @property
    def native(self) -> pa.Table:
        return self.to_table()

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self._table is not None:
            yield from self._table.to_batches()
            return
        # Read once, as the tasks finish; kept when read to the end.
        got: list[pa.RecordBatch] = []
        stream, self._stream = self._stream, None
        for b in stream or ():
            got.append(b)
            yield b
        self._table = pa.Table.from_batches(got, schema=self._schema)

    def to_table(self) -> pa.Table:
        if self._table is None:
            for _ in self.batches():
                pass
        assert self._table is not None
        return self._table

    def map_batches(self, fn: BatchFn, schema: pa.Schema, partitions: int, *, in_flight: int = 1,
                    by: str | None = None, by_range: bool = False) -> ArrowRows:
        slices = list(enumerate(_slices(self.to_table(), partitions, by)))

        def task(numbered: tuple[int, pa.Table]) -> list[pa.RecordBatch]:
            _task.number = numbered[0]
            try:
                return [b for b in fn(iter(numbered[1].to_batches())) if b.num_rows]
            finally:
                _task.number = None

        def run() -> Iterator[pa.RecordBatch]:
            if in_flight <= 1 or len(slices) <= 1:
                for part in slices:
                    yield from task(part)
                return
            with ThreadPoolExecutor(max_workers=min(in_flight, len(slices))) as pool:
                for got in pool.map(task, slices):
                    yield from got

        return ArrowRows(self.ex, schema=schema, stream=run())

    def filter(self, predicate: Predicate) -> ArrowRows:
        t = self.to_table()
        return ArrowRows(self.ex, t.filter(predicate.arrow(t)) if t.num_rows else t)

    def select(self, *names: str) -> ArrowRows:
        return ArrowRows(self.ex, self.to_table().select(list(names)))

    def _is_in(self, other: RowSet, on: str) -> pa.ChunkedArray:
        return pc.is_in(self.to_table().column(on), value_set=other.to_table().column(on))

    def anti_join(self, other: RowSet, on: str = "path") -> RowSet:
        if isinstance(other, SparkRows):
            return other.ship(self).anti_join(other, on)
        t = self.to_table()
        return ArrowRows(self.ex, t.filter(pc.invert(self._is_in(other, on))) if t.num_rows else t)

    def semi_join(self, other: RowSet, on: str = "path") -> RowSet:
        if isinstance(other, SparkRows):
            return other.ship(self).semi_join(other, on)
        t = self.to_table()
        return ArrowRows(self.ex, t.filter(self._is_in(other, on)) if t.num_rows else t)

    def union(self, other: RowSet) -> RowSet:
        if isinstance(other, SparkRows):
            return other.ship(self).union(other)
        return ArrowRows(self.ex, pa.concat_tables([self.to_table(), other.to_table().select(self.to_table().schema.names)]))

    def with_constant(self, field: pa.Field, value: object, columns: Sequence[str]) -> ArrowRows:
        t = self.to_table()
        t = t.append_column(field, pa.array([value] * t.num_rows, field.type))
        return ArrowRows(self.ex, t.select(list(columns)))

    def totals(self, *terms: Term) -> tuple[int, ...]:
        t = self.to_table()
        if t.num_rows == 0:
            return (0,) * (1 + len(terms))
        out = [t.num_rows]
        for term in terms:
            if isinstance(term, str):
                v = pc.sum(t.column(term))
            elif isinstance(term, tuple):
                v = pc.sum(pc.if_else(term[0].arrow(t), t.column(term[1]), 0))
            else:
                v = pc.sum(term.arrow(t).cast(pa.int64()))
            out.append(int(v.as_py() or 0))
        return tuple(out)

    def count_by(self, keys: Sequence[Key], column: str | None = None) -> dict[tuple[object, ...], tuple[int, int]]:
        t = self.to_table()
        if t.num_rows == 0:
            return {}
        names = []
        for k in keys:
            if isinstance(k, tuple):
                t = t.append_column(k[0], k[1].arrow(t))
            names.append(k[0] if isinstance(k, tuple) else k)
        aggs: list[tuple[str | list[str], str]] = [([], "count_all")] + ([(column, "sum")] if column else [])
        agg = t.group_by(names).aggregate(aggs)
        counts = agg.column("count_all").to_pylist()
        sums = agg.column(f"{column}_sum").to_pylist() if column else [0] * len(counts)
        groups = zip(*(agg.column(n).to_pylist() for n in names), strict=True)
        return {g: (int(n), int(s or 0)) for g, n, s in zip(groups, counts, sums, strict=True)}

    def first_by(self, key: str, *order: str) -> ArrowRows:
        t = self.to_table()
        if t.num_rows <= 1:
            return self
        rest = [c for c in t.column_names if c != key and c not in order]
        # Sorted as numbers: strings by their rank among the distinct values (hashing them once
        # and sorting integers took a third of sorting the strings over a walk's 100k keys).
        # The key only groups, so the order of its first appearance will do.
        ranked = pa.table({f"_{i}": _sortable(t.column(c), ranks=i > 0) for i, c in enumerate((key, *order, *rest))})
        idx = pc.sort_indices(ranked, sort_keys=[(n, "ascending") for n in ranked.column_names])
        keys = ranked.column("_0").take(idx).combine_chunks()
        first = pa.concat_arrays([pa.array([True]), pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1)).fill_null(True)])
        return ArrowRows(self.ex, t.take(idx.filter(first)))

    def distinct(self, column: str) -> ArrowRows:
        t = self.to_table()
        return ArrowRows(self.ex, pa.table({column: pc.unique(t.column(column))}, schema=pa.schema([t.schema.field(column)]))
                         if t.num_rows else t.select([column]))

    def distinct_count(self, column: str) -> int:
        t = self.to_table()
        return int(pc.count_distinct(t.column(column)).as_py()) if t.num_rows else 0

    def head(self, n: int, *names: str) -> list[tuple[object, ...]]:
        t = self.to_table().slice(0, n)
        return list(zip(*(t.column(c).to_pylist() for c in names), strict=True))

    def keep(self, *, eager: bool = False) -> ArrowRows:
        if eager:
            self.to_table()
        return self

    def write(self, uri: str, options: dict[str, object] | None, rows: int) -> str:
        return write_listing(self.ex, self.to_table(), uri, options, rows=rows)

    def release(self) -> None:
        self._table = None
        self._stream = None
