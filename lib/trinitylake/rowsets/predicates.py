"""Row conditions said in both forms (`Predicate`): an Arrow mask of a table, and a Spark
column built with the session's `functions` module; and the terms and keys that `RowSet`'s
aggregates take."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from types import ModuleType

    from pyspark.sql import Column


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
