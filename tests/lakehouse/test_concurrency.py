"""Concurrent writers in real OS processes (spawned), on local disk and on S3 (moto)."""

from __future__ import annotations

import pytest

from tests.lakehouse import _workers as W
from tests.lakehouse.helpers import storage_versions
from trinitylake.lakehouse import Lakehouse


def _setup(uri, options=None):
    lh = Lakehouse.create(uri, storage_options=options, order=4, node_max_bytes=4096, audit=False)
    lh.create_namespace("ns")
    lh.create_table("ns", "hot")
    return lh


def _check_distinct_tables(lh, results, procs, per):
    base = 2
    versions = sorted(v for res in results for _, v in res)
    # Every commit got its own version, contiguous right after the setup, none lost.
    assert versions == list(range(base + 1, base + 1 + procs * per))
    assert lh.latest_version() == base + procs * per
    assert storage_versions(lh.storage) == list(range(base + procs * per + 1))
    fresh = Lakehouse.open(lh.uri, storage_options=lh.storage.options or None, audit=False)
    tables = fresh.view().list_tables("ns")
    assert tables == sorted(["hot"] + [f"w{w}_{i:03d}" for w in range(procs) for i in range(per)])
    # Each version holds exactly its own change and everything committed before it.
    by_version = {v: f"w{w}_{i:03d}" for w, res in enumerate(results) for i, v in res}
    for v in (base + 1, base + procs * per // 2, base + procs * per):
        assert fresh.view(version=v).table_exists("ns", by_version[v])
        assert len(fresh.view(version=v).list_tables("ns")) == 1 + v - base
        assert len(fresh.change_set(v).keys) == 1
    # Every process's own commits came in increasing versions.
    for res in results:
        vs = [v for _, v in res]
        assert vs == sorted(vs)


def test_eight_processes_distinct_tables_local(tmp_path):
    uri = str(tmp_path / "lh")
    lh = _setup(uri)
    procs, per = 8, 25
    results = W.run_with_barrier(W.create_tables, lambda w, b: (uri, None, w, per, b), procs)
    _check_distinct_tables(lh, results, procs, per)


def _check_hot_table(lh, base, results, expected_commits):
    committed = [(r["worker"], j, v) for r in results for j, v in r["committed"]]
    assert len(committed) == expected_commits
    versions = sorted(v for _, _, v in committed)
    assert versions == list(range(base + 1, base + 1 + expected_commits))
    assert lh.latest_version() == base + expected_commits
    # No lost update: walking the versions, each one adds exactly its writer's value and keeps
    # every value committed before it.
    by_version = {v: (w, j) for w, j, v in committed}
    props = lh.view(version=base).describe_table("ns", "hot")["properties"]
    for v in range(base + 1, base + 1 + expected_commits):
        w, j = by_version[v]
        props = {**props, f"w{w}": str(j)}
        assert lh.view(version=v).describe_table("ns", "hot")["properties"] == props, v
    return props


def test_same_table_in_lockstep_rounds_conflicts_exactly(tmp_path):
    uri = str(tmp_path / "lh")
    lh = _setup(uri)
    procs, rounds = 4, 4
    results = W.run_with_barrier(W.alter_same_table_in_rounds, lambda w, b: (uri, None, w, rounds, b), procs)
    # All begin at the same version each round: one winner, procs - 1 conflicts per round.
    assert sum(len(r["committed"]) for r in results) == rounds
    assert sum(r["conflicts"] for r in results) == rounds * (procs - 1)
    winners_by_round = sorted(j for r in results for j, _ in r["committed"])
    assert winners_by_round == list(range(rounds))
    _check_hot_table(lh, 2, results, rounds)
    # Failed transactions left no version behind.
    assert storage_versions(lh.storage) == list(range(2 + rounds + 1))


def test_same_table_free_running_no_lost_update(tmp_path):
    uri = str(tmp_path / "lh")
    lh = _setup(uri)
    procs, per = 4, 6
    results = W.run_with_barrier(W.alter_same_table_until_done, lambda w, b: (uri, None, w, per, b), procs)
    final = _check_hot_table(lh, 2, results, procs * per)
    assert final == {f"w{w}": str(per - 1) for w in range(procs)}
    # Every failed attempt was reported as a TransactionConflictError and made no version.
    assert storage_versions(lh.storage) == list(range(2 + procs * per + 1))


@pytest.mark.s3
def test_processes_distinct_tables_s3(s3_bucket, s3_storage_options):
    # Reduced from 8 x 25 to 4 x 10: each S3 commit is several HTTP round trips to moto in
    # this process, which serves all workers.
    uri = s3_bucket + "/lh"
    lh = _setup(uri, s3_storage_options)
    procs, per = 4, 10
    results = W.run_with_barrier(W.create_tables, lambda w, b: (uri, s3_storage_options, w, per, b), procs)
    _check_distinct_tables(lh, results, procs, per)


@pytest.mark.s3
def test_same_table_lockstep_s3(s3_bucket, s3_storage_options):
    uri = s3_bucket + "/lh"
    lh = _setup(uri, s3_storage_options)
    procs, rounds = 3, 3
    results = W.run_with_barrier(
        W.alter_same_table_in_rounds, lambda w, b: (uri, s3_storage_options, w, rounds, b), procs
    )
    assert sum(len(r["committed"]) for r in results) == rounds
    assert sum(r["conflicts"] for r in results) == rounds * (procs - 1)
    _check_hot_table(lh, 2, results, rounds)


def test_threads_share_one_lakehouse_object():
    """Commits from threads over one Lakehouse (one shared NodeStore): each commit's unwritten
    nodes are its own. Regression: the staging area was shared, so one thread's commit cleared
    nodes another thread's commit was still restructuring (FileNotFoundError on a node-*.arrow)."""
    import random
    import sys
    import threading
    import uuid

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        lh = Lakehouse.create(f"memory://threads-{uuid.uuid4().hex}", order=3, node_max_bytes=1024, audit=False,
                              properties={"tlake.buffer.max-messages": "1"})
        lh.create_namespace("ns")
        errors: list[BaseException] = []
        expected: set[str] = set()
        lock = threading.Lock()

        def work(w: int) -> None:
            rnd = random.Random(w)
            live: list[str] = []
            try:
                for i in range(80):
                    t = lh.begin()
                    t.create_table("ns", f"w{w}_{i:03d}")
                    live.append(f"w{w}_{i:03d}")
                    for _ in range(rnd.randint(0, 2)):
                        if len(live) > 3:
                            t.drop_table("ns", live.pop(rnd.randrange(len(live))))
                    t.commit()
                with lock:
                    expected.update(live)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[0]
    fresh = Lakehouse.open(lh.uri, audit=False)
    assert fresh.latest_version() == 1 + 4 * 80
    assert set(fresh.view().list_tables("ns")) == expected
