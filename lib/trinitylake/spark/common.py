"""Shared plumbing of the Spark maintenance jobs: partition sizing, phases, fault injection."""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trinitylake.maintenance.results import JobResult
from trinitylake.spark.execution import add_progress_listener, notify

__all__ = ["add_progress_listener", "notify"]

log = logging.getLogger("trinitylake.spark")

# Python tasks cost ~30 ms each here; more tasks than this per core only add overhead.
PARTITIONS_PER_CORE = 4

def partitions_for(spark: Any, n: int, batch_size: int, parallelism: int = 0) -> int:
    """Partitions for `n` items handled `batch_size` per task: ``ceil(n / batch_size)``, capped
    at `parallelism` when given, else at 4 x Spark's default parallelism; at least 1."""
    if n <= 0:
        return 1
    cap = parallelism if parallelism and parallelism > 0 else PARTITIONS_PER_CORE * spark.sparkContext.defaultParallelism
    return max(1, min(math.ceil(n / max(1, batch_size)), cap))


class Phases:
    """Times the phases of a run into ``result.seconds`` and labels their Spark jobs."""

    def __init__(self, spark: Any, result: JobResult):
        self.spark = spark
        self.result = result

    @contextmanager
    def __call__(self, name: str, what: str | None = None) -> Iterator[None]:
        sc = self.spark.sparkContext
        sc.setJobDescription(f"tlake {self.result.job} {self.result.run_id}: {what or name}")
        t0 = time.perf_counter()
        log.info("%s %s: phase %s started", self.result.job, self.result.run_id, name)
        notify(what or name)
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self.result.seconds[name] = round(self.result.seconds.get(name, 0.0) + dt, 3)
            sc.setJobDescription(None)
            log.info("%s %s: phase %s took %.2fs", self.result.job, self.result.run_id, name, dt)

    def describe(self, what: str) -> None:
        self.spark.sparkContext.setJobDescription(f"tlake {self.result.job} {self.result.run_id}: {what}")


def crash_point(name: str) -> None:
    """Fault injection for crash tests: ``TLAKE_TEST_CRASH_AT=<name>`` kills the process with
    SIGKILL at that point (no cleanup, no finally blocks), like a lost driver."""
    if os.environ.get("TLAKE_TEST_CRASH_AT") == name:
        log.error("TLAKE_TEST_CRASH_AT=%s: killing the driver", name)
        os.kill(os.getpid(), signal.SIGKILL)


class InjectedFault(RuntimeError):
    """Raised by fault injection (tests only)."""


class DeleteBudget:
    """Fault injection for the delete phase: ``TLAKE_TEST_FAIL_DELETE_AFTER=N`` lets N delete
    batches run; the batches after them fail as if the job had been killed mid-delete.

    None (the normal case) when the variable is unset.
    """

    def __init__(self, batches: int):
        self.left = batches

    @classmethod
    def from_env(cls) -> DeleteBudget | None:
        v = os.environ.get("TLAKE_TEST_FAIL_DELETE_AFTER")
        return cls(int(v)) if v and v.strip().isdigit() else None

    def take(self, n: int) -> int:
        """Batches of the next `n` that may run; the rest must fail."""
        allowed = max(0, min(n, self.left))
        self.left -= allowed
        return allowed
