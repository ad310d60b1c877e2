"""txn_seq allocation: unique, strictly increasing in allocation order, across processes."""

from __future__ import annotations

import time

import pytest

from trinitylake.control import SeqAllocator
from trinitylake.storage import Storage

from ._workers import allocate_many, run_in_processes

PROCS, PER_PROC = 6, 20


@pytest.fixture
def alloc(tmp_path) -> SeqAllocator:
    return SeqAllocator(Storage(str(tmp_path / "_control")))


def test_sequential_allocation_starts_at_one_and_records_txn_id(alloc):
    assert alloc.last() == 0
    assert [alloc.allocate(f"t{i}") for i in range(5)] == [1, 2, 3, 4, 5]
    assert alloc.last() == 5
    assert alloc.owner(3) == "t2"
    assert alloc.owner(99) is None
    assert alloc.storage.read("_seq/00000000000000000003") == b"t2"


def test_empty_txn_id_is_refused(alloc):
    with pytest.raises(ValueError):
        alloc.allocate("")
    assert list(alloc.storage.list("")) == []


@pytest.mark.parametrize("hint", [None, b"garbage", b"1", b"999"])
def test_missing_corrupt_stale_or_future_hint_is_not_trusted(alloc, hint):
    for i in range(4):
        alloc.allocate(f"t{i}")
    if hint is None:
        alloc.storage.delete([alloc.hint_path])
    else:
        alloc.storage.write(alloc.hint_path, hint)
    assert alloc.last() == 4
    assert alloc.allocate("next") == 5


def test_prune_keeps_newest_and_allocation_continues_above(alloc):
    for i in range(30):
        alloc.allocate(f"t{i}")
    assert alloc.prune(keep_last=5) == 25
    left = sorted(f.path for f in alloc.storage.list("_seq") if not f.path.endswith("_hint"))
    assert left == [f"_seq/{n:020d}" for n in range(26, 31)]
    assert alloc.prune(keep_last=5) == 0
    # A stale hint pointing into the pruned region must not hand out an old number again.
    alloc.storage.write(alloc.hint_path, b"3")
    assert alloc.last() == 30
    assert alloc.allocate("after") == 31
    assert alloc.prune(keep_last=0) == 5  # keep_last is at least 1: never the newest
    assert alloc.last() == 31


def test_number_claimed_in_a_pruned_region_is_abandoned(alloc, monkeypatch):
    for i in range(10):
        alloc.allocate(f"t{i}")
    alloc.prune(keep_last=2)
    # Simulate a race: this allocator validated its start (2) just before a prune deleted it.
    monkeypatch.setattr(alloc, "_start", lambda: 2)
    assert alloc.allocate("late") == 11  # 3 was claimed, seen as reused (2 missing), abandoned
    monkeypatch.undo()
    assert alloc.allocate("next") == 12


def _check_concurrent(results: list[list[tuple[int, float, float]]]) -> None:
    allocs = [a for per in results for a in per]
    seqs = [s for s, _, _ in allocs]
    assert len(seqs) == PROCS * PER_PROC
    assert len(set(seqs)) == len(seqs), "duplicate txn_seq handed out"
    assert min(seqs) >= 1
    for per in results:  # each process sees its own numbers strictly increase
        own = [s for s, _, _ in per]
        assert own == sorted(own) and len(set(own)) == len(own)
    # The processes really raced (their ranges interleave), or the test proves nothing.
    ranges = [(min(s for s, _, _ in per), max(s for s, _, _ in per)) for per in results]
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(ranges) for b in ranges[i + 1 :])
    # Across processes: an allocation that finished before another started got a smaller seq.
    by_end = sorted(allocs, key=lambda a: a[2])
    for s_a, _, end_a in by_end:
        for s_b, start_b, _ in allocs:
            if end_a < start_b:
                assert s_a < s_b, f"seq {s_a} finished before {s_b} started but is not smaller"


def test_concurrent_processes_local(tmp_path):
    root = str(tmp_path / "_control")
    go = time.time() + 3.0
    results = run_in_processes(allocate_many, [(root, None, w, PER_PROC, go) for w in range(PROCS)])
    _check_concurrent(results)
    alloc = SeqAllocator(Storage(root))
    assert alloc.last() == max(s for per in results for s, _, _ in per)


@pytest.mark.s3
def test_concurrent_processes_s3(s3_bucket, s3_storage_options):
    root = f"{s3_bucket}/lh/_control"
    go = time.time() + 4.0
    results = run_in_processes(allocate_many, [(root, dict(s3_storage_options), w, PER_PROC, go) for w in range(PROCS)])
    _check_concurrent(results)
    alloc = SeqAllocator(Storage(root, dict(s3_storage_options)))
    assert alloc.last() == max(s for per in results for s, _, _ in per)


def test_allocate_many_takes_increasing_free_numbers_and_writes_the_hint_once(alloc):
    """`SeqAllocator.allocate_many` (the catalog server's group commit): numbers another
    allocator took in between are skipped, each taken one holds the txn id, the hint ends at the last."""
    assert alloc.allocate("a") == 1
    alloc.storage.create_exclusive(alloc.marker_path(4), b"other")  # another allocator, racing ahead
    got = alloc.allocate_many("g", 4)
    assert got == [2, 3, 5, 6]
    assert [alloc.owner(n) for n in got] == ["g"] * 4 and alloc.owner(4) == "other"
    assert alloc._read_hint() == 6 and alloc.allocate("b") == 7
    assert alloc.allocate_many("g", 0) == []


def test_a_hint_executor_writes_the_hint_off_the_allocation_and_a_prune_writes_its_own_at_once(alloc):
    """With `hint_executor` set (the catalog server's allocator) an allocation returns without
    writing the hint: the executor writes it, in allocation order. A prune still points the hint
    above the region it deletes before deleting it."""
    from concurrent.futures import ThreadPoolExecutor

    gate = ThreadPoolExecutor(1)
    held = gate.submit(time.sleep, 0.3)  # the executor busy: nothing it is given runs yet
    alloc.hint_executor = gate
    assert alloc.allocate_many("g", 3) == [1, 2, 3] and alloc.allocate("h") == 4
    assert alloc._read_hint() == 0  # not written by the allocations themselves
    held.result()
    gate.submit(lambda: None).result()
    assert alloc._read_hint() == 4
    gate.submit(time.sleep, 0.3)
    assert alloc.allocate_many("g", 3) == [5, 6, 7]
    gate.shutdown(wait=False, cancel_futures=True)  # the hint queued behind the sleep (7) never written
    assert alloc._read_hint() == 4
    alloc.hint_executor = ThreadPoolExecutor(1)
    alloc.hint_executor.submit(time.sleep, 0.3)
    assert alloc.prune(keep_last=2) == 5
    assert alloc._read_hint() == 7  # written by the prune itself, not queued behind the sleep


def test_allocate_many_on_s3_creates_the_markers_in_flight_and_skips_taken_ones(s3_bucket, s3_storage_options):
    """On an object store the markers after the first are created together (put_many with
    If-None-Match); one another allocator holds is skipped, not overwritten."""
    alloc = SeqAllocator(Storage(f"{s3_bucket}/lh-many/_control", dict(s3_storage_options)))
    assert alloc.storage.engine is not None  # the batch path, not one request after another
    assert alloc.allocate("a") == 1
    alloc.storage.create_exclusive(alloc.marker_path(3), b"other")
    alloc.storage.create_exclusive(alloc.marker_path(5), b"other")
    got = alloc.allocate_many("g", 5)
    assert got == [2, 4, 6, 7, 8]
    assert [alloc.owner(n) for n in got] == ["g"] * 5 and alloc.owner(3) == alloc.owner(5) == "other"
    assert alloc.allocate("b") == 9


def test_an_allocator_starts_above_its_own_last_number_and_falls_back_when_others_went_on(tmp_path, monkeypatch):
    """The next allocation of an allocator looks above the number it took last (its marker and
    the next probed together, the hint not read); when another allocator took numbers meanwhile,
    or a prune removed its marker, it goes by the hint and the listing as before: never a number
    below one already handed out."""
    storage = Storage(str(tmp_path / "_control"))
    a, b = SeqAllocator(storage), SeqAllocator(storage)
    reads: list[str] = []
    read = Storage.read
    monkeypatch.setattr(Storage, "read", lambda self, path, *args, **kw: (reads.append(path), read(self, path, *args, **kw))[1])
    assert a.allocate("a1") == 1
    reads.clear()
    assert a.allocate("a2") == 2
    assert reads == []  # no hint read: its own last number, and the next one free
    assert [b.allocate("b1"), b.allocate("b2")] == [3, 4]
    assert a.allocate("a3") == 5  # the next one above its own was taken: by the hint
    assert a.allocate_many("a4", 3) == [6, 7, 8]
    reads.clear()
    assert b.allocate("b3") == 9
    assert reads == ["_seq/_hint"]
    assert a.prune(keep_last=1) == 8  # a's own marker 8 is gone
    assert a.allocate("a5") == 10
    assert [storage.read(a.marker_path(n)) for n in (9, 10)] == [b"b3", b"a5"]


def test_allocate_many_above_its_own_last_number_creates_every_marker_in_one_batch(tmp_path, monkeypatch):
    """Above the allocator's own last number, seen present with the next one free, all of a
    group's markers are created together (on an object store: one round trip for all); from a
    start found by the hint the first is taken alone, with its predecessor check, then the rest."""
    storage = Storage(str(tmp_path / "_control"))
    a, b = SeqAllocator(storage), SeqAllocator(storage)
    assert a.allocate("a1") == 1
    singles: list[str] = []
    batches: list[int] = []
    one, many = Storage.create_exclusive, Storage.create_exclusive_many
    in_batch = []  # local disk creates a batch's markers one by one: those are not singles

    def single(self, path, data):
        if not in_batch:
            singles.append(path)
        return one(self, path, data)

    def batch(self, items):
        batches.append(len(items))
        in_batch.append(1)
        try:
            return many(self, items)
        finally:
            in_batch.pop()

    monkeypatch.setattr(Storage, "create_exclusive", single)
    monkeypatch.setattr(Storage, "create_exclusive_many", batch)
    assert a.allocate_many("g", 3) == [2, 3, 4]
    assert singles == [] and batches == [3]
    singles.clear()
    batches.clear()
    assert b.allocate_many("h", 3) == [5, 6, 7]
    assert singles == [b.marker_path(5)] and batches == [2]
    assert [a.owner(n) for n in range(1, 8)] == ["a1", "g", "g", "g", "h", "h", "h"]


def test_allocate_many_above_its_own_number_abandons_what_it_made_when_a_prune_removed_its_marker(tmp_path):
    """Its markers are created while its own last marker is probed: when a prune has removed
    that marker, the numbers just made may have been handed out before (the pruned region) and
    are abandoned; the allocation goes on above every number taken, by the prune's hint."""
    storage = Storage(str(tmp_path / "_control"))
    a, b = SeqAllocator(storage), SeqAllocator(storage)
    assert a.allocate_many("a", 5) == [1, 2, 3, 4, 5]
    assert b.allocate_many("b", 5) == [6, 7, 8, 9, 10]
    assert b.prune(keep_last=2) == 8  # 1..8 gone: a's own marker (5) among them
    assert a.allocate_many("g", 2) == [11, 12]
    assert a.owner(6) == "g" and a.owner(9) == "b"  # 6 and 7 made, then left as gaps


def test_allocate_many_above_its_own_number_goes_by_the_hint_when_another_took_the_next(tmp_path):
    """When another allocator took the number right above its own last one, how far the others
    went is not known from one probe: what it made is left as gaps and the allocation starts
    again above the hint's number, never below a number handed out."""
    storage = Storage(str(tmp_path / "_control"))
    a, b = SeqAllocator(storage), SeqAllocator(storage)
    assert a.allocate("a") == 1
    assert b.allocate("b") == 2
    got = a.allocate_many("g", 3)
    assert got[0] > 4 and got == list(range(got[0], got[0] + 3))
    assert a.owner(2) == "b" and b.allocate("c") == got[-1] + 1


def _allocate_in_child(alloc: SeqAllocator, out) -> None:
    out.put(alloc.allocate_many("child", 2))


def test_an_allocator_copied_into_a_forked_process_still_allocates(tmp_path):
    """The probe of its own marker runs on a thread pool of the process it runs in: a child
    forked after the parent's allocations (whose pool's thread stays behind) allocates, not
    waiting for a thread it does not have."""
    import multiprocessing

    alloc = SeqAllocator(Storage(str(tmp_path / "_control")))
    assert alloc.allocate_many("a", 2) == [1, 2]
    assert alloc.allocate_many("a", 2) == [3, 4]  # the probe's pool in use here
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_allocate_in_child, args=(alloc, out))
    child.start()
    child.join(30)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail("the forked allocator hung")
    assert child.exitcode == 0 and out.get(timeout=5) == [5, 6]
