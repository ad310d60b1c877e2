"""The executors' rows (`SparkRows`): a DataFrame; maps are ``mapInArrow`` (Connect-safe: the
DataFrame API only, see `trinitylake.spark.execution`), joins and aggregates Spark's own."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from trinitylake.rowsets.predicates import Key, Predicate, Term
from trinitylake.rowsets.rowset import RowSet
from trinitylake.spark.execution import DISTRIBUTED, BatchFn, Execution, ddl
from trinitylake.spark.output import write_listing

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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
