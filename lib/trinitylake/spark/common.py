"""Shared plumbing of the maintenance jobs: progress listeners (re-exported from
`trinitylake.spark.execution`) and fault injection for the crash tests."""

from __future__ import annotations

import logging

from trinitylake import seams
from trinitylake.spark.execution import add_progress_listener, notify

__all__ = ["add_progress_listener", "notify"]

log = logging.getLogger("trinitylake.spark")


def crash_point(name: str) -> None:
    """A point where a crash test may kill the driver (`trinitylake.seams`)."""
    seams.crash_point(name)


class InjectedFault(RuntimeError):
    """Raised by fault injection (tests only)."""


class DeleteBudget:
    """Fault injection for the delete phase: N delete batches run, the batches after them fail
    as if the job had been killed mid-delete (the budget comes from `trinitylake.seams`, where
    the tests register it; None, the normal case, when nothing is registered)."""

    def __init__(self, batches: int):
        self.left = batches

    @classmethod
    def current(cls) -> DeleteBudget | None:
        n = seams.delete_batches_allowed()
        return None if n is None else cls(n)

    def take(self, n: int) -> int:
        """Batches of the next `n` that may run; the rest must fail."""
        allowed = max(0, min(n, self.left))
        self.left -= allowed
        return allowed
