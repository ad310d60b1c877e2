"""Functions run in spawned child processes (importable by name, nothing inherited)."""

from __future__ import annotations

import time

from trinitylake.errors import TransactionConflictError
from trinitylake.lakehouse import Lakehouse


def create_tables(uri: str, options: dict | None, worker: int, n: int, barrier) -> list[tuple[int, int]]:
    """Create tables ns.w<worker>_<i>, one commit each; return (i, committed version)."""
    lh = Lakehouse.open(uri, storage_options=options, audit=False)
    barrier.wait(120)  # start together
    out = []
    for i in range(n):
        txn = lh.begin()
        txn.create_table("ns", f"w{worker}_{i:03d}", properties={"worker": str(worker)})
        out.append((i, txn.commit()))
    return out


def alter_same_table_in_rounds(uri: str, options: dict | None, worker: int, rounds: int, barrier) -> dict:
    """Each round: everybody begins at the same version (barrier), then everybody commits an
    alter of ns.hot. Exactly one wins per round; the others must get TransactionConflictError."""
    lh = Lakehouse.open(uri, storage_options=options, audit=False)
    committed, conflicts = [], 0
    for r in range(rounds):
        barrier.wait(120)
        txn = lh.begin()
        txn.alter_table("ns", "hot", set_properties={f"w{worker}": str(r)})
        barrier.wait(120)
        try:
            committed.append((r, txn.commit()))
        except TransactionConflictError:
            conflicts += 1
    return {"worker": worker, "committed": committed, "conflicts": conflicts}


def alter_same_table_until_done(uri: str, options: dict | None, worker: int, n: int, barrier) -> dict:
    """Set ns.hot's property w<worker> to 0..n-1, each in its own transaction, starting a new
    transaction after every conflict (the conflicting one cannot be retried)."""
    lh = Lakehouse.open(uri, storage_options=options, audit=False)
    barrier.wait(120)
    committed, conflicts = [], 0
    for j in range(n):
        while True:
            txn = lh.begin()
            txn.alter_table("ns", "hot", set_properties={f"w{worker}": str(j)})
            try:
                committed.append((j, txn.commit()))
                break
            except TransactionConflictError:
                conflicts += 1
    return {"worker": worker, "committed": committed, "conflicts": conflicts}


def _queue_result(q, fn, args):
    try:
        q.put((args[2] if len(args) > 2 else None, "ok", fn(*args)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put((args[2] if len(args) > 2 else None, "error", repr(e)))


def run_with_barrier(fn, make_args, n: int, timeout: float = 300.0) -> list:
    """Run fn(*make_args(worker, barrier)) in n spawned processes sharing one Barrier."""
    import multiprocessing as mp
    import queue

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n)
    q = ctx.Queue()
    procs = [ctx.Process(target=_queue_result, args=(q, fn, make_args(w, barrier))) for w in range(n)]
    for p in procs:
        p.start()
    results = []
    deadline = time.time() + timeout
    try:
        for _ in range(n):
            try:
                results.append(q.get(timeout=max(1.0, deadline - time.time())))
            except queue.Empty:
                raise AssertionError("a worker did not finish in time") from None
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    errors = [r for r in results if r[1] == "error"]
    assert not errors, errors
    return [r[2] for r in sorted(results, key=lambda r: r[0])]
