"""ForkSafePool: a module-level pool that a forked child can use."""

from __future__ import annotations

import multiprocessing

from trinitylake.thread_pools import ForkSafePool

POOL = ForkSafePool(1, "test-pool")


def _use(out) -> None:
    out.put(POOL.get().submit(lambda: "ran in the child").result(timeout=10))


def test_a_forked_child_gets_a_pool_of_its_own_that_runs_work() -> None:
    parent = POOL.get()
    assert parent.submit(lambda: 1).result() == 1  # the parent's thread started, then idle
    assert POOL.get() is parent
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_use, args=(out,))
    child.start()
    child.join(30)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0 and out.get(timeout=5) == "ran in the child"
