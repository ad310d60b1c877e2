"""Row sets: the rows a job's step works on, held by the driver (Arrow) or the executors
(Spark), behind one interface; and where a step runs (`place`). See `rowsets.rowset`."""

from trinitylake.rowsets.rowset import (
    AllOf,
    ArrowRows,
    Equals,
    OneOf,
    Place,
    Predicate,
    RowSet,
    SparkRows,
    chain,
    driver,
    executors,
    place,
    task_number,
)

__all__ = ["AllOf", "ArrowRows", "Equals", "OneOf", "Place", "Predicate", "RowSet", "SparkRows", "chain", "driver", "executors", "place", "task_number"]
