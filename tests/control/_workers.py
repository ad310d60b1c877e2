"""Functions run in child processes (spawned: importable by name, no inherited runtimes)."""

from __future__ import annotations

import time

from trinitylake.control import AuditRecord, ControlTable, SeqAllocator
from trinitylake.storage import Storage


def allocate_many(root: str, options: dict | None, worker: int, n: int, go_at: float) -> list[tuple[int, float, float]]:
    """Allocate `n` seqs; return (seq, monotonic start, monotonic end) per allocation."""
    alloc = SeqAllocator(Storage(root, options))
    while time.time() < go_at:  # start together
        time.sleep(0.005)
    out = []
    for i in range(n):
        t0 = time.monotonic()
        seq = alloc.allocate(f"w{worker}-{i}")
        out.append((seq, t0, time.monotonic()))
    return out


def append_many(uri: str, options: dict | None, worker: int, n: int, go_at: float) -> int:
    """Append `n` commits of two rows each (begin + committed of one seq)."""
    ct = ControlTable(uri, options)
    while time.time() < go_at:
        time.sleep(0.005)
    for i in range(n):
        seq = ct.seq.allocate(f"w{worker}-{i}")
        ct.append(
            [
                AuditRecord(seq, "begin", f"w{worker}-{i}", "job", {"worker": worker, "i": i}),
                AuditRecord(seq, "committed", f"w{worker}-{i}", "job", {"worker": worker, "i": i}, version_after=seq),
            ]
        )
    return n


def run_in_processes(fn, args_list: list[tuple], timeout: float = 300.0) -> list:
    """Run fn(*args) for each args in its own spawned process; results in order."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(len(args_list)) as pool:
        handles = [pool.apply_async(fn, a) for a in args_list]
        return [h.get(timeout=timeout) for h in handles]
