"""Rows a step of a job works on, wherever they are held: one interface, `RowSet`, with two
implementations chosen once per step by its placement (`trinitylake.rowsets.place`):

* `ArrowRows`: an Arrow table held by the driver (or the batches a driver-side map yields as
  its tasks finish); maps run on the driver's thread pool, joins and aggregates are Arrow
  compute;
* `SparkRows`: a DataFrame on the executors; maps are ``mapInArrow`` (Connect-safe: the
  DataFrame API only, see `trinitylake.spark.execution`), joins and aggregates Spark's own.

A step is written once against the interface: per-batch functions over Arrow record batches
(the same function runs in a driver thread or an executor task), predicates that say
themselves in both forms (`Predicate`), key joins, counts and sums. When rows of both kinds
meet (a driver-held side joined with a distributed one), the driver's side is shipped.
"""

from __future__ import annotations

import functools
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from trinitylake.errors import StorageError, TrinityLakeError
from trinitylake.spark.execution import DISTRIBUTED, LOCAL, BatchFn, Execution, ddl
from trinitylake.spark.output import write_listing

if TYPE_CHECKING:
    from types import ModuleType

    from pyspark.sql import Column, DataFrame

    from trinitylake.storage import Storage


class Predicate(Protocol):
    """A row condition said in both forms: an Arrow mask of a table, and a Spark column built
    with the session's `functions` module."""

    def arrow(self, table: pa.Table) -> pa.ChunkedArray | pa.Array: ...

    def column(self, functions: ModuleType) -> Column: ...


#: A term of `RowSet.totals`.
Term = str | Predicate | tuple[Predicate, str]
#: A grouping key of `RowSet.count_by`: a column, or a predicate's value under a name.
Key = str | tuple[str, Predicate]


class Equals:
    """`column` == `value` (or != with `negate`)."""

    def __init__(self, column: str, value: object, *, negate: bool = False):
        self.name, self.value, self.negate = column, value, negate

    def arrow(self, table: pa.Table) -> pa.ChunkedArray:
        return (pc.not_equal if self.negate else pc.equal)(table.column(self.name), self.value)

    def column(self, functions: ModuleType) -> Column:
        col = functions.col(self.name)
        return col != self.value if self.negate else col == self.value


class OneOf:
    """`column` holds one of `values`."""

    def __init__(self, column: str, *values: str):
        self.name, self.values = column, list(values)

    def arrow(self, table: pa.Table) -> pa.ChunkedArray:
        return pc.is_in(table.column(self.name), pa.array(self.values, table.schema.field(self.name).type))

    def column(self, functions: ModuleType) -> Column:
        return functions.col(self.name).isin(self.values)


class AllOf:
    """Every one of `predicates` holds."""

    def __init__(self, *predicates: Predicate):
        self.predicates = predicates

    def arrow(self, table: pa.Table) -> pa.ChunkedArray:
        return functools.reduce(pc.and_, [p.arrow(table) for p in self.predicates])

    def column(self, functions: ModuleType) -> Column:
        return functools.reduce(lambda a, b: a & b, [p.column(functions) for p in self.predicates])


class RowSet(ABC):
    """Rows of one schema, held by the driver (`ArrowRows`) or by the executors (`SparkRows`)."""

    #: ``local`` (driver) or ``distributed`` (executors), as the execution record says it.
    where: str

    @abstractmethod
    def map_batches(self, fn: BatchFn, schema: pa.Schema, partitions: int, *, in_flight: int = 1,
                    by: str | None = None, by_range: bool = False) -> RowSet:
        """`fn` over the rows' record batches in `partitions` tasks (the driver runs up to
        `in_flight` of them at once); the rows it yields, of `schema`. With `by`, the rows of
        one value of that column meet in one task: hashed on the executors, or cut into ranges
        of values when `by_range`; on the driver always ranges of the sorted values. `fn` may
        ask `task_number()` which task it is."""

    @abstractmethod
    def filter(self, predicate: Predicate) -> RowSet:
        """The rows where `predicate` holds."""

    @abstractmethod
    def select(self, *names: str) -> RowSet:
        """The named columns."""

    @abstractmethod
    def anti_join(self, other: RowSet, on: str = "path") -> RowSet:
        """The rows whose `on` value `other` does not hold."""

    @abstractmethod
    def semi_join(self, other: RowSet, on: str = "path") -> RowSet:
        """The rows whose `on` value `other` holds."""

    @abstractmethod
    def union(self, other: RowSet) -> RowSet:
        """These rows and `other`'s (same columns)."""

    @abstractmethod
    def with_constant(self, field: pa.Field, value: object, columns: Sequence[str]) -> RowSet:
        """These rows with a column `field` of one `value`, their columns in the order `columns`."""

    @abstractmethod
    def totals(self, *terms: Term) -> tuple[int, ...]:
        """(rows, then one value per term): a column name sums the column, a `Predicate` counts
        the rows where it holds, (predicate, column) sums the column over those rows; 0 over no
        rows. One aggregate (on the executors, one job)."""

    @abstractmethod
    def count_by(self, keys: Sequence[Key], column: str | None = None) -> dict[tuple[object, ...], tuple[int, int]]:
        """Per value of the `keys` (column names, or (name, predicate) for a predicate's value):
        (rows, sum of `column`; 0 without one)."""

    @abstractmethod
    def first_by(self, key: str, *order: str) -> RowSet:
        """One row per value of `key`: the smallest in the order of the `order` columns (then of
        the other columns)."""

    @abstractmethod
    def distinct(self, column: str) -> RowSet:
        """The distinct values of `column`, as rows of that one column."""

    @abstractmethod
    def distinct_count(self, column: str) -> int:
        """Distinct values of `column`."""

    @abstractmethod
    def head(self, n: int, *names: str) -> list[tuple[object, ...]]:
        """Up to `n` rows (the named columns) brought to the driver."""

    @abstractmethod
    def keep(self, *, eager: bool = False) -> RowSet:
        """The rows materialized once (a checkpoint on the executors, released by `release`):
        now when `eager`, else by the first action over them."""

    @abstractmethod
    def to_table(self) -> pa.Table:
        """Every row on the driver (a bounded set: the step's placement says so)."""

    @abstractmethod
    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows' batches on the driver, as they come."""

    @abstractmethod
    def write(self, uri: str, options: dict[str, object] | None, rows: int) -> str:
        """Write the rows as a Parquet listing (`trinitylake.spark.output.write_listing`)."""

    @abstractmethod
    def release(self) -> None:
        """Let go of what the rows hold (checkpoints, the driver's table)."""

    @property
    @abstractmethod
    def native(self) -> pa.Table | DataFrame:
        """The Arrow table or the DataFrame (for the library's own table-or-DataFrame helpers)."""

    def column_values(self, name: str) -> list[object]:
        """Every value of one column on the driver."""
        return self.to_table().column(name).to_pylist()


# ---- the driver ------------------------------------------------------------------------------
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


# ---- the executors ---------------------------------------------------------------------------
class SparkRows(RowSet):
    """Rows held by the executors: a DataFrame (its checkpoints released by `release`)."""

    where = DISTRIBUTED

    def __init__(self, ex: Execution, df: DataFrame, held: list[DataFrame] | None = None):
        self.ex = ex
        self.df = df
        #: Checkpoints these rows hold (`keep`; rows derived from them hold none).
        self.held = held if held is not None else []

    @property
    def native(self) -> DataFrame:
        return self.df

    def _with(self, df: DataFrame, *others: RowSet) -> SparkRows:
        """Rows derived from these (and `others`): they hold no checkpoint of their own."""
        return SparkRows(self.ex, df)

    def ship(self, rows: RowSet) -> SparkRows:
        """`rows` on the executors (a driver-held side of a join or union goes there)."""
        if isinstance(rows, SparkRows):
            return rows
        return SparkRows(self.ex, self.ex.to_df(rows.to_table()))

    def map_batches(self, fn: BatchFn, schema: pa.Schema, partitions: int, *, in_flight: int = 1,
                    by: str | None = None, by_range: bool = False) -> SparkRows:
        if by and by_range:
            # Ranges sampled by Spark, even for one task: `by`'s values meet, sorted or not.
            df = self.df.repartitionByRange(partitions, by)
        elif partitions > 1:
            df = self.df.repartition(partitions, by) if by else self.df.repartition(partitions)
        else:
            df = self.df.coalesce(1)
        return self._with(df.mapInArrow(fn, ddl(schema)))

    def filter(self, predicate: Predicate) -> SparkRows:
        return self._with(self.df.filter(predicate.column(self.ex.F)))

    def select(self, *names: str) -> SparkRows:
        return self._with(self.df.select(*names))

    def anti_join(self, other: RowSet, on: str = "path") -> SparkRows:
        return self._with(self.df.join(self.ship(other).df.select(on), on, "left_anti"), other)

    def semi_join(self, other: RowSet, on: str = "path") -> SparkRows:
        return self._with(self.df.join(self.ship(other).df.select(on), on, "left_semi"), other)

    def join(self, other: RowSet, on: str = "path") -> SparkRows:
        """An inner join on `on` (the columns of both)."""
        return self._with(self.df.join(self.ship(other).df, on, "inner"), other)

    def union(self, other: RowSet) -> SparkRows:
        return self._with(self.df.unionByName(self.ship(other).df), other)

    def with_constant(self, field: pa.Field, value: object, columns: Sequence[str]) -> SparkRows:
        sql_type = ddl(pa.schema([field])).split(" ", 1)[1]
        const = self.ex.F.lit(value).cast(sql_type).alias(field.name)
        return self._with(self.df.select(*[const if c == field.name else c for c in columns]))

    def totals(self, *terms: Term) -> tuple[int, ...]:
        functions = self.ex.F
        aggs = [functions.count("*").alias("n")]
        for i, term in enumerate(terms):
            if isinstance(term, str):
                agg = functions.sum(term)
            elif isinstance(term, tuple):
                agg = functions.sum(functions.when(term[0].column(functions), functions.col(term[1])))
            else:
                agg = functions.sum(term.column(functions).cast("int"))
            aggs.append(agg.alias(f"t{i}"))
        row = self.df.agg(*aggs).collect()[0]
        return (int(row["n"] or 0),) + tuple(int(row[f"t{i}"] or 0) for i in range(len(terms)))

    def count_by(self, keys: Sequence[Key], column: str | None = None) -> dict[tuple[object, ...], tuple[int, int]]:
        functions = self.ex.F
        cols = [k[1].column(functions).alias(k[0]) if isinstance(k, tuple) else functions.col(k) for k in keys]
        names = [k[0] if isinstance(k, tuple) else k for k in keys]
        aggs = [functions.count("*").alias("n")] + ([functions.sum(column).alias("s")] if column else [])
        return {tuple(r[n] for n in names): (int(r["n"]), int(r["s"] or 0) if column else 0)
                for r in self.df.groupBy(*cols).agg(*aggs).collect()}

    def first_by(self, key: str, *order: str) -> SparkRows:
        functions = self.ex.F
        rest = [c for c in self.df.columns if c != key]
        smallest = functions.min(functions.struct(*order, *[c for c in rest if c not in order])).alias("m")
        picked = self.df.groupBy(key).agg(smallest).select(key, *[functions.col(f"m.{c}").alias(c) for c in rest])
        return self._with(picked.select(*self.df.columns))

    def distinct(self, column: str) -> SparkRows:
        return self._with(self.df.select(column).distinct())

    def distinct_count(self, column: str) -> int:
        return int(self.df.select(column).distinct().count())

    def head(self, n: int, *names: str) -> list[tuple[object, ...]]:
        return [tuple(r[c] for c in names) for r in self.df.limit(n).collect()]

    def keep(self, *, eager: bool = False) -> SparkRows:
        df = self.df.localCheckpoint(eager=eager)
        return SparkRows(self.ex, df, [df])

    def to_table(self) -> pa.Table:
        return self.df.toArrow()

    def batches(self) -> Iterator[pa.RecordBatch]:
        yield from self.to_table().to_batches()

    def write(self, uri: str, options: dict[str, object] | None, rows: int) -> str:
        return write_listing(self.ex, self.df, uri, options, rows=rows)

    def release(self) -> None:
        for df in self.held:
            try:
                df.unpersist()
            except Exception:  # noqa: BLE001 - checkpoints go with the session
                pass
        self.held = []


# ---- placement -------------------------------------------------------------------------------
class Place:
    """Where one step runs, decided once (`place`): its rows' implementation, its task counts
    and its entry in the execution record."""

    def __init__(self, ex: Execution, where: str):
        self.ex = ex
        self.where = where

    @property
    def distributed(self) -> bool:
        return self.where == DISTRIBUTED

    def rows(self, data: pa.Table | RowSet) -> RowSet:
        """`data` held where this step runs (a driver table shipped to the executors)."""
        if isinstance(data, RowSet):
            if self.distributed and isinstance(data, ArrowRows):
                return SparkRows(self.ex, self.ex.to_df(data.to_table()))
            return data
        return SparkRows(self.ex, self.ex.to_df(data)) if self.distributed else ArrowRows(self.ex, data)

    def add_task_requests(self, counted: str | dict[str, int] | None) -> None:
        """Object-store requests a task counted and sent back: the job's count takes those of
        executor tasks (other processes); the driver's own are counted where they are made."""
        if self.distributed and counted:
            self.ex.add_executor_requests(counted)

    @contextmanager
    def executor_failures(self, what: str, advice: str) -> Iterator[None]:
        """A failed executor job (a lost executor, a task's error, all arriving wrapped) raised
        as a `StorageError` that names `what` plainly; the driver's own errors pass as raised."""
        try:
            yield
        except TrinityLakeError:
            raise
        except Exception as e:
            if not self.distributed:
                raise
            first = str(e).strip().splitlines()[0][:500] if str(e).strip() else type(e).__name__
            raise StorageError(f"{what} failed ({first}); {advice}") from e

    def partitions(self, n: int, per_task: int, cap: int = 0) -> int:
        """Tasks for `n` items handled `per_task` per task (`Execution.partitions` on the
        executors; on the driver ``ceil(n / per_task)``, run `in_flight` at a time)."""
        if self.distributed:
            return self.ex.partitions(n, per_task, cap)
        return max(1, -(-n // max(1, per_task)))

    def phase(self, name: str, items: int, what: str | None = None, *, on_driver: bool = True
              ) -> AbstractContextManager[dict[str, object] | None]:
        """Record the step (`Execution.phase`) where it runs; a step that the record names only
        when the executors run it (`on_driver` False) is not recorded on the driver."""
        if not on_driver and not self.distributed:
            return nullcontext(None)
        return self.ex.phase(name, self.where, items, what)


def place(ex: Execution, items: int, *, inputs: Sequence[RowSet] = (), storage: Storage | None = None,
          requests_per_item: float = 0.0, phase: str | None = None, jobs: int = 1,
          limit: int | None = None) -> Place:
    """Where a step over `items` items runs: on the executors when one of its `inputs` already
    is, else as `Execution.distributed` estimates it (the mode, the size thresholds, or the
    object store's estimated times)."""
    if any(r.where == DISTRIBUTED for r in inputs):
        return Place(ex, DISTRIBUTED)
    if ex.distributed(items, limit, storage=storage, requests_per_item=requests_per_item, phase=phase, jobs=jobs):
        return Place(ex, DISTRIBUTED)
    return Place(ex, LOCAL)


def driver(ex: Execution, table: pa.Table) -> ArrowRows:
    """Rows the driver holds."""
    return ArrowRows(ex, table)


def executors(ex: Execution, df: DataFrame) -> SparkRows:
    """Rows the executors hold."""
    return SparkRows(ex, df)


def chain(parts: Iterable[RowSet]) -> RowSet:
    """The union of row sets (at least one)."""
    return functools.reduce(lambda a, b: a.union(b), parts)


__all__ = ["AllOf", "ArrowRows", "Equals", "Key", "OneOf", "Place", "Predicate", "RowSet", "SparkRows", "Term", "chain", "driver", "executors", "place", "task_number"]
