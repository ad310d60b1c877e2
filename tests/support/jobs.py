"""Running the maintenance jobs on the driver for the oracle-checked tests, and pausing them.

`run_local` runs a job in this process with every phase on the driver (no Spark session is
started for these small lakehouses). `pause_at` replaces a job module's ``crash_point`` with a
hook, so that a test can run an action at a named phase boundary deterministically (no sleeps,
no threads): the job calls the hook, the hook commits/rolls back/pins, the job goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.spark.conftest import job_config
from trinitylake.jobs.runner import run_job

TTL_MS = 60_000
#: Expire sees "now" this far ahead of the clock that stamped the versions, so the
#: versions just built count as older than the transaction TTL without sleeping (the job
#: accepts up to 10 minutes of skew). Only transactions begun at the latest version are kept
#: open across a run, and the latest version never expires. Orphans runs on the real clock
#: (its age floor protects files of in-flight commits); planted orphans are made old instead.
AHEAD_MS = 2 * TTL_MS


def run_local(job: str, uri: str, *, storage_options: dict | None = None, **overrides: Any):
    if job == "expire":
        overrides.setdefault("reference_time", int(time.time() * 1000) + AHEAD_MS)
        overrides.setdefault("max_version_age", 0)
        overrides.setdefault("clock_skew_margin", 0)
    if job == "tables_expire":
        # Tables written seconds ago, no transaction running: their snapshots may expire below
        # the transaction-TTL floor (the run says so with the floor's unsafe flag).
        overrides.setdefault("unsafe_min_age", True)
    if storage_options:
        overrides["storage_options"] = storage_options
    cfg = job_config(job, uri, execution="local", **overrides)
    return run_job(job, cfg, audit=False)


@contextmanager
def pause_at(monkeypatch: Any, module: Any, point: str, action: Callable[[], Any]) -> Iterator[list[Any]]:
    """While active, `module`'s ``crash_point(point)`` runs `action` once; the list collects
    what it returned or raised (an exception is recorded, not propagated into the job)."""
    outcomes: list[Any] = []
    original = module.crash_point

    def hook(name: str) -> None:
        if name == point and not outcomes:
            try:
                outcomes.append(action())
            except Exception as e:  # noqa: BLE001 - the test inspects what the action met
                outcomes.append(e)
        original(name)

    monkeypatch.setattr(module, "crash_point", hook)
    try:
        yield outcomes
    finally:
        monkeypatch.setattr(module, "crash_point", original)
