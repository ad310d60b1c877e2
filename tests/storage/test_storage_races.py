"""create_exclusive under contention: exactly one writer wins, the others get FileExistsError."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from trinitylake.storage import Storage

THREADS = 32
INSTANCES = 4  # a new s3fs instance costs a botocore session: keep them few
PROCESSES = 8


def _race(storages: list[Storage], path: str) -> tuple[list[int], list[BaseException]]:
    """Every storage tries to create `path` with its own content at the same moment."""
    barrier = threading.Barrier(len(storages))

    def attempt(i: int) -> str:
        s = storages[i]
        s.exists("warm-up")  # build the filesystem and connect before the start line
        barrier.wait(timeout=60)
        try:
            s.create_exclusive(path, f"writer-{i}".encode())
            return "won"
        except FileExistsError:
            return "lost"

    winners: list[int] = []
    errors: list[BaseException] = []
    with ThreadPoolExecutor(max_workers=len(storages)) as pool:
        futures = [pool.submit(attempt, i) for i in range(len(storages))]
        for i, f in enumerate(futures):
            try:
                if f.result(timeout=120) == "won":
                    winners.append(i)
            except BaseException as e:  # noqa: BLE001 - any other error fails the test below
                errors.append(e)
    return winners, errors


def test_threads_race_for_one_key(backend: Any) -> None:
    # Threads share a Storage (tasks in one executor) and several independent Storages race
    # (other executors or processes; each s3fs instance has its own client and connections).
    independent = [backend.new(client=str(i)) for i in range(INSTANCES)]
    shared = independent[0]
    storages = [independent[i % INSTANCES] for i in range(THREADS)]
    for key in ("_root_1.arrow", "deep/dir/_root_2.arrow"):
        winners, errors = _race(storages, key)
        assert errors == []
        assert len(winners) == 1, f"{len(winners)} writers won on {backend.kind}"
        assert shared.read(key) == f"writer-{winners[0]}".encode()
    assert sorted(f.path for f in shared.list()) == ["_root_1.arrow", "deep/dir/_root_2.arrow"]


def test_threads_on_distinct_keys_never_conflict(backend: Any) -> None:
    shared = backend.new()
    barrier = threading.Barrier(16)

    def create(i: int) -> None:
        barrier.wait(timeout=60)
        shared.create_exclusive(f"v/_{i}", str(i).encode())

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(create, range(16)))
    assert sorted(f.path for f in shared.list("v")) == sorted(f"v/_{i}" for i in range(16))


# ---- real OS processes (local files) ----------------------------------------------------------
def _process_writer(root: str, path: str, i: int, barrier: Any, results: Any) -> None:
    try:
        s = Storage(root)
        barrier.wait(timeout=60)
        try:
            s.create_exclusive(path, f"process-{i}-{os.getpid()}".encode())
            results.put((i, "won"))
        except FileExistsError:
            results.put((i, "lost"))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        results.put((i, f"error: {e!r}"))


def _mp_context() -> Any:
    # fork is fast and the child only makes os calls; spawn where fork does not exist.
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


@pytest.mark.parametrize("rounds", [2])
def test_processes_race_for_one_key_locally(tmp_path: Any, rounds: int) -> None:
    ctx = _mp_context()
    root = str(tmp_path / "lake")
    for r in range(rounds):
        path = f"_root_{r}.arrow"
        barrier = ctx.Barrier(PROCESSES)
        results = ctx.Queue()
        procs = [
            ctx.Process(target=_process_writer, args=(root, path, i, barrier, results), daemon=True)
            for i in range(PROCESSES)
        ]
        try:
            for p in procs:
                p.start()
            outcomes = dict(results.get(timeout=120) for _ in procs)
            for p in procs:
                p.join(timeout=60)
                assert p.exitcode == 0
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=10)
        assert len(outcomes) == PROCESSES
        assert Counter(outcomes.values()) == {"won": 1, "lost": PROCESSES - 1}, outcomes
        (winner,) = [i for i, o in outcomes.items() if o == "won"]
        assert Storage(root).read(path).startswith(f"process-{winner}-".encode())
    leftovers = sorted(os.listdir(tmp_path / "lake"))
    assert leftovers == [f"_root_{r}.arrow" for r in range(rounds)]  # no temporary files left
