"""Row sets: the rows a job's step works on, held by the driver (Arrow, `arrow_rows`) or the
executors (Spark, `spark_rows`), behind one interface (`rowset.RowSet`), filtered by conditions
said in both forms (`predicates`); and where a step runs (`placement.place`)."""

from trinitylake.rowsets.arrow_rows import ArrowRows, task_number
from trinitylake.rowsets.placement import Place, driver, executors, place
from trinitylake.rowsets.predicates import AllOf, Equals, Key, OneOf, Predicate, Term
from trinitylake.rowsets.rowset import RowSet, chain
from trinitylake.rowsets.spark_rows import SparkRows

__all__ = ["AllOf", "ArrowRows", "Equals", "Key", "OneOf", "Place", "Predicate", "RowSet", "SparkRows", "Term", "chain", "driver", "executors", "place", "task_number"]
