"""Shared plumbing of the maintenance jobs: progress listeners (re-exported from
`trinitylake.spark.execution`) and fault injection for the crash tests."""

from __future__ import annotations

import logging
import os
import signal

from trinitylake.spark.execution import add_progress_listener, notify

__all__ = ["add_progress_listener", "notify"]

log = logging.getLogger("trinitylake.spark")


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
