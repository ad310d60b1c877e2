"""The tests' handlers of the library's seams (`trinitylake.seams`), driven by environment
variables so that they reach processes the tests start (CLI runs, Spark's Python workers):

* ``TLAKE_TEST_CRASH_AT=<name>``: SIGKILL at crash point `name` (no cleanup, no finally
  blocks), like a lost driver;
* ``TLAKE_TEST_FAIL_DELETE_AFTER=N``: N delete batches run, the rest fail as if killed.

Read when a seam is reached, so a test may set them in the pytest process too."""

from __future__ import annotations

import logging
import os
import signal

CRASH_ENV = "TLAKE_TEST_CRASH_AT"
DELETE_ENV = "TLAKE_TEST_FAIL_DELETE_AFTER"


def _crash(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        logging.getLogger("trinitylake.spark").error("%s=%s: killing the process", CRASH_ENV, name)
        os.kill(os.getpid(), signal.SIGKILL)


def _delete_budget() -> int | None:
    v = os.environ.get(DELETE_ENV)
    return int(v) if v and v.strip().isdigit() else None


def install() -> None:
    """Register the handlers; a no-op where the library is not importable (the DAG tests'
    virtualenv)."""
    try:
        from trinitylake import seams
    except ImportError:
        return
    seams.on_crash_point(_crash)
    seams.on_delete_budget(_delete_budget)
