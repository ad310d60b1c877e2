"""Where a step runs (`place`, decided once per step), and rows made where they are held
(`driver`, `executors`)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

import pyarrow as pa

from trinitylake.rowsets.arrow_rows import ArrowRows
from trinitylake.rowsets.rowset import RowSet
from trinitylake.rowsets.spark_rows import SparkRows
from trinitylake.spark.execution import DISTRIBUTED, LOCAL, Execution, executor_failures

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from trinitylake.storage import Storage


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

    def executor_failures(self, what: str, advice: str) -> AbstractContextManager[None]:
        """A failed executor job (a lost executor, a task's error, all arriving wrapped) raised
        as a `StorageError` that names `what` plainly (`spark.execution.executor_failures`, the
        one wrapper); on the driver errors pass as raised."""
        return executor_failures(what, advice) if self.distributed else nullcontext()

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
