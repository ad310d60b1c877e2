"""Rows a step of a job works on, wherever they are held: one interface, `RowSet`, with two
implementations chosen once per step by its placement (`trinitylake.rowsets.placement`):

* `ArrowRows`: an Arrow table held by the driver (or the batches a driver-side map yields as
  its tasks finish); maps run on the driver's thread pool, joins and aggregates are Arrow
  compute;
* `SparkRows`: a DataFrame on the executors; maps are ``mapInArrow`` (Connect-safe: the
  DataFrame API only, see `trinitylake.spark.execution`), joins and aggregates Spark's own.

A step is written once against the interface: per-batch functions over Arrow record batches
(the same function runs in a driver thread or an executor task), predicates that say
themselves in both forms (`Predicate`), key joins, counts and sums. When rows of both kinds
meet (a driver-held side joined with a distributed one), the driver's side is shipped.

The rows' conditions are `trinitylake.rowsets.predicates`; the driver's engine
`trinitylake.rowsets.arrow_rows`, the executors' `trinitylake.rowsets.spark_rows`.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from trinitylake.rowsets.predicates import Key, Predicate, Term
from trinitylake.spark.execution import BatchFn

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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


def chain(parts: Iterable[RowSet]) -> RowSet:
    """The union of row sets (at least one)."""
    return functools.reduce(lambda a, b: a.union(b), parts)
