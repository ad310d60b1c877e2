"""The tests' handler of the library's crash points (`trinitylake.seams`), driven by an
environment variable so that it reaches processes the tests start (CLI runs, Spark's Python
workers): ``TLAKE_TEST_CRASH_AT=<name>``: SIGKILL at crash point `name` (no cleanup, no finally
blocks), like a lost driver.

Read when a crash point is reached, so a test may set it in the pytest process too. (Kills
mid-delete and mid-copy come from `tests.support.faults`: a real SIGKILL of the process doing
the storage operation.)"""

from __future__ import annotations

import logging
import os
import signal

CRASH_ENV = "TLAKE_TEST_CRASH_AT"


def _crash(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        logging.getLogger("trinitylake.spark").error("%s=%s: killing the process", CRASH_ENV, name)
        os.kill(os.getpid(), signal.SIGKILL)


def install() -> None:
    """Register the handler; a no-op where the library is not importable (the DAG tests'
    virtualenv)."""
    try:
        from trinitylake import seams
    except ImportError:
        return
    seams.on_crash_point(_crash)
