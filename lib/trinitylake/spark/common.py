"""Shared plumbing of the maintenance jobs: progress listeners (re-exported from
`trinitylake.spark.execution`) and the jobs' crash points (`trinitylake.seams`)."""

from __future__ import annotations

import logging

from trinitylake import seams
from trinitylake.spark.execution import add_progress_listener, notify

__all__ = ["add_progress_listener", "notify"]

log = logging.getLogger("trinitylake.spark")


def crash_point(name: str) -> None:
    """A point where a crash test may kill the driver (`trinitylake.seams`)."""
    seams.crash_point(name)
