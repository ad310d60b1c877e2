"""Writer processes of the crash and stress tests.

They run in children of a multiprocessing *forkserver* that preloaded this module (and so the
library): a child starts in milliseconds, which a few hundred crash trials need, and is forked
from a single-threaded server, never from the test process with its Spark and S3 threads.

A writer prints ``ACK <version> <ns> <table>`` to its output file after each commit call
returned: what an application would have told its user. The file is line-buffered, so every
line is in the kernel before the next commit starts and survives a SIGKILL.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from typing import Any

import trinitylake.lakehouse  # noqa: F401 - preloaded by the forkserver
from trinitylake.errors import TransactionConflictError, TransactionExpiredError
from trinitylake.lakehouse import Lakehouse

_CTX: Any = None


def context() -> Any:
    """The forkserver context, started once per test session with this module preloaded."""
    global _CTX
    if _CTX is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["tests.reliability._workers"])
        _CTX = ctx
    return _CTX


def crash_writer(uri: str, options: dict | None, ns: str, prefix: str, commits: int, crash_at: str | None,
                 crash_before_commit: int, out_path: str, fault_spec: str | None = None) -> None:
    """Commit `commits` table creations ``<prefix><i>`` one by one. With `crash_at`, the
    commit number `crash_before_commit` runs with ``TLAKE_TEST_CRASH_AT=<crash_at>`` (SIGKILL
    at that point of the commit)."""
    if fault_spec:
        from tests.support.faults import FaultSpec, install

        install(FaultSpec.from_json(fault_spec))
    out = open(out_path, "a", buffering=1)
    lh = Lakehouse.open(uri, storage_options=options, audit=False)
    out.write("READY\n")
    for i in range(commits):
        if crash_at and i == crash_before_commit:
            os.environ["TLAKE_TEST_CRASH_AT"] = crash_at
        table = f"{prefix}{i}"
        v = lh.create_table(ns, table)
        out.write(f"ACK {v} {ns} {table}\n")
    out.write("DONE\n")


def stress_writer(uri: str, options: dict | None, writer: int, commits: int, pause_s: float, seed: int,
                  out_path: str, fault_spec: str | None = None) -> None:
    """`commits` successful commits into namespace ``w<writer>``; every 7th also alters the
    shared table ``shared.t`` (write-write conflicts). Conflicts and expired transactions
    are retried with a new transaction, as an application would."""
    if fault_spec:
        from tests.support.faults import FaultSpec, install

        install(FaultSpec.from_json(fault_spec))
    rng = random.Random(seed)
    out = open(out_path, "a", buffering=1)
    lh = Lakehouse.open(uri, storage_options=options, audit=False)
    ns = f"w{writer}"
    done = conflicts = expired = 0
    while done < commits:
        table = f"t{done}"
        try:
            txn = lh.begin()
            txn.create_table(ns, table, properties={"writer": str(writer), "i": str(done)})
            if done % 7 == 3:
                txn.alter_table("shared", "t", set_properties={f"w{writer}": str(done)})
            v = txn.commit()
        except TransactionConflictError:
            conflicts += 1
            continue
        except TransactionExpiredError:
            expired += 1
            continue
        out.write(f"ACK {v} {ns} {table}\n")
        done += 1
        if pause_s:
            time.sleep(rng.uniform(0, pause_s))
    out.write(f"DONE conflicts={conflicts} expired={expired}\n")
