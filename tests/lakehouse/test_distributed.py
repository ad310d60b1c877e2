"""Distributed transactions across real processes: begin in one, stage from several, commit
from another; concurrency-safe staging, conflicts, TTL, abort, and what maintenance keeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.lakehouse import _dtxn_workers as DW
from tests.lakehouse import _workers as W
from tests.oracle import expect as E
from tests.support.jobs import TTL_MS, run_local
from trinitylake.errors import (
    AlreadyExistsError,
    ObjectNotFoundError,
    TransactionClosedError,
    TransactionConflictError,
    TransactionExpiredError,
    ValidationError,
)
from trinitylake.format import definitions as D
from trinitylake.format.paths import is_format_owned, txn_def_path
from trinitylake.lakehouse import Lakehouse
from trinitylake.lakehouse import distributed as DT
from trinitylake.spark.execution import Execution
from trinitylake.treewalk import walk_roots as WR
from trinitylake.treewalk.walker import walk_reachable


def _lh(tmp_path, **kw) -> Lakehouse:
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, **kw)
    lh.create_namespace("ns")
    return lh


def _owned(lh) -> set[str]:
    return {f.path for f in lh.storage.list("") if is_format_owned(f.path)}


def test_begin_stage_from_many_processes_commit_from_another(tmp_path):
    lh = _lh(tmp_path)
    dt = DT.DistributedTransaction.begin(lh)
    assert lh.storage.exists(txn_def_path(dt.id))  # the Java reference's name, hash-prefixed
    procs, per = 4, 3
    staged = W.run_with_barrier(DW.stage_tables, lambda w, b: (lh.uri, dt.id, w, per, b), procs)
    # Nothing is visible before the commit; the transaction's own view sees everything.
    assert Lakehouse.open(lh.uri, audit=False).view().list_tables("ns") == []
    expected = sorted({name for s in staged for name in s})
    assert DT.DistributedTransaction.load(lh, dt.id).view().list_tables("ns") == expected
    assert sum(s.count("shared") for s in staged) == 1  # exactly one create of ns.shared won
    (outcome,) = W.run_with_barrier(DW.commit, lambda w, b: (lh.uri, dt.id, w, b), 1)
    assert outcome == ("committed", 2)
    fresh = Lakehouse.open(lh.uri, audit=False)
    assert fresh.latest_version() == 2 and fresh.view().list_tables("ns") == expected
    assert len(fresh.change_set(2).keys) == procs * per + 1  # one version, every staged change
    winner = next(w for w, s in enumerate(staged) if "shared" in s)
    assert fresh.view().describe_table("ns", "shared")["properties"] == {"by": str(winner)}
    # Lost staging races left nothing behind: every format-owned file is reachable from a
    # version, or is one of the transaction's state files and running roots (by the oracle).
    o = E.oracle_of(fresh)
    assert E.owned(o) - E.version_files(o, range(3)) - E.txn_files(o, dt.id) == set()
    assert E.txn_entries(o) == []  # committed: no longer live
    assert DT.DistributedTransaction.load(lh, dt.id).info()["state"] == "committed"
    assert DT.list_transactions(lh) == []


def test_two_processes_committing_the_same_transaction_commit_it_once(tmp_path):
    lh = _lh(tmp_path)
    dt = DT.DistributedTransaction.begin(lh)
    dt.stage(lambda t: t.create_table("ns", "a"))
    outcomes = W.run_with_barrier(DW.commit, lambda w, b: (lh.uri, dt.id, w, b), 2)
    assert sorted(o[0] for o in outcomes) == ["closed", "committed"], outcomes
    assert Lakehouse.open(lh.uri, audit=False).latest_version() == 2


def test_cli_begin_stage_from_processes_commit(tmp_path):
    lh = _lh(tmp_path)
    env = {**os.environ, "TLAKE_LAKEHOUSE": lh.uri}
    tl = [sys.executable, "-m", "trinitylake", "--no-audit"]

    def run(*args, check=True):
        p = subprocess.run([*tl, *args], env=env, capture_output=True, text=True, timeout=300)
        if check:
            assert p.returncode == 0, p.stderr
        return p

    txn_id = run("txn", "begin", "--distributed").stdout.strip().splitlines()[-1]
    stagers = [subprocess.Popen([*tl, "--txn", txn_id, "table", "create", f"ns.t{i}"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    for p in stagers:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert txn_id in run("txn", "list").stdout
    assert json.loads(run("table", "list", "ns", "--json").stdout)["tables"] == []  # nothing committed yet
    assert json.loads(run("--txn", txn_id, "table", "list", "ns", "--json").stdout)["tables"] == ["t0", "t1", "t2"]
    assert "as version 2" in run("txn", "commit", txn_id).stdout
    assert Lakehouse.open(lh.uri, audit=False).view().list_tables("ns") == ["t0", "t1", "t2"]
    again = run("txn", "commit", txn_id, check=False)
    assert again.returncode == 1 and "TransactionClosedError" in again.stderr and "version 2" in again.stderr
    missing = run("--txn", "no-such-txn", "namespace", "create", "x", check=False)
    assert missing.returncode == 1 and "ObjectNotFoundError" in missing.stderr and "no-such-txn" in missing.stderr


def test_write_write_conflict_aborts_and_cleans_up(tmp_path):
    lh = _lh(tmp_path)
    dt = DT.DistributedTransaction.begin(lh)
    dt.stage(lambda t: t.create_table("ns", "t"))
    staged_def = DT.DistributedTransaction.load(lh, dt.id).view().get_key(lh.view().codec.table_key("ns", "t"))
    assert lh.storage.exists(staged_def)
    lh.create_table("ns", "t")  # a local transaction wins the same key
    with pytest.raises(TransactionConflictError, match=r"both wrote ns\.t.*aborted"):
        DT.DistributedTransaction.load(lh, dt.id).commit()
    assert not lh.storage.exists(staged_def)  # nothing references it: deleted, not left behind
    with pytest.raises(TransactionClosedError, match="aborted"):
        DT.DistributedTransaction.load(lh, dt.id).stage(lambda t: t.create_namespace("x"))


def test_stage_rebases_over_unrelated_commits_and_serializable_reads_conflict(tmp_path):
    lh = _lh(tmp_path)
    lh.create_namespace("other")
    snap = DT.DistributedTransaction.begin(lh, isolation="snapshot")
    ser = DT.DistributedTransaction.begin(lh, isolation="serializable")
    for dt in (snap, ser):
        dt.stage(lambda t: t.create_table("ns", f"x{len(t.list_tables('other'))}"))  # reads 'other'
    lh.create_table("other", "o")  # changes what both transactions read, not what they wrote
    lh.create_namespace("unrelated")
    # A stage re-pins on the latest version: SNAPSHOT passes, SERIALIZABLE's read set conflicts.
    snap.stage(lambda t: t.create_table("ns", "y"))
    assert snap.info()["begin_version"] == lh.latest_version()
    with pytest.raises(TransactionConflictError, match="serializable.*aborted"):
        ser.stage(lambda t: t.create_table("ns", "z"))
    v = snap.commit()
    assert lh.view(version=v).list_tables("ns") == ["x0", "y"]


def test_expired_transaction_can_neither_stage_nor_commit(tmp_path):
    lh = _lh(tmp_path, txn_ttl_millis=1000)
    with pytest.raises(ValidationError, match="ttl"):
        DT.DistributedTransaction.begin(lh, ttl_millis=5000)  # above the lakehouse's TTL
    dt = DT.DistributedTransaction.begin(lh, ttl_millis=1)
    dt.stage(lambda t: t.create_table("ns", "early"))  # within the clock tolerance
    time.sleep((1 + DT.CLOCK_TOLERANCE_MS) / 1000 + 0.1)
    with pytest.raises(TransactionExpiredError, match=f"{dt.id}.*can no longer stage"):
        dt.stage(lambda t: t.create_table("ns", "late"))
    with pytest.raises(TransactionExpiredError, match=f"{dt.id}.*can no longer commit"):
        dt.commit()
    assert lh.latest_version() == 1 and DT.list_transactions(lh) == []
    assert dt.abort() == []  # an expired transaction can still be cleaned up
    assert dt.info()["state"] == "aborted" and dt.info()["staged"] is None


def test_abort_deletes_staged_files_and_closes(tmp_path):
    lh = _lh(tmp_path)
    before = _owned(lh)
    dt = DT.DistributedTransaction.begin(lh)
    dt.stage(lambda t: t.create_namespace("n2"))
    dt.stage(lambda t: t.create_table("n2", "t"))
    assert dt.abort() == []
    # Only the state files (tombstones the orphan job collects) remain of the transaction.
    assert _owned(lh) - before == {txn_def_path(dt.id, n) for n in range(4)}
    with pytest.raises(TransactionClosedError, match="aborted"):
        dt.commit()
    with pytest.raises(ObjectNotFoundError):
        DT.DistributedTransaction.load(lh, "never-begun")
    with pytest.raises(AlreadyExistsError):
        DT.DistributedTransaction.begin(lh, txn_id=dt.id)


def _reached(lh) -> set[str]:
    """What the library's walk reaches from the roots it picks (`walk_roots`), on the driver."""
    return walk_reachable(Execution("local"), lh, WR.walk_input(lh).roots, sizes=False).keys()


def test_live_transactions_are_walked_by_maintenance_until_expired(tmp_path):
    lh = _lh(tmp_path)
    dt = DT.DistributedTransaction.begin(lh)
    dt.stage(lambda t: t.create_table("ns", "staged"))
    o = E.oracle_of(lh)
    (t,) = o.live_transactions()
    assert (t.id, t.begin_version) == (dt.id, lh.latest_version())
    staged_def = o.relative(E.merged_keys(o, t.running_root)[lh.view().codec.table_key("ns", "staged")])
    running = o.relative(t.running_root)
    live = E.live_walk(o, sizes=False).paths()
    assert {staged_def, running} <= live and not {staged_def, running} & E.version_files(o, [t.begin_version])
    assert _reached(lh) == live
    assert WR.walk_input(lh).txn_running_roots == [running]
    # A transaction whose lease ran out long ago (a hand-written later state) is not walked.
    old = D.TransactionDef()
    old.CopyFrom(dt.state().d)
    old.expire_at_millis = int(time.time() * 1000) - DT.KEEP_AFTER_EXPIRY_MS - 1
    lh.storage.create_exclusive(txn_def_path(dt.id, dt.state().number + 1), D.dumps(old))
    assert o.live_transactions() == [] and [t.id for t in o.transactions().values()] == [dt.id]
    live = E.live_walk(o, sizes=False).paths()
    assert staged_def not in live and _reached(lh) == live


def _age(lh: Lakehouse, paths, seconds: float) -> None:
    root = lh.storage.root[len("file://"):]
    t = time.time() - seconds
    for p in paths:
        os.utime(os.path.join(root, p), (t, t))


def test_orphans_keep_what_a_live_transaction_staged_however_old(tmp_path):
    """Staged long ago, the lease renewed since: only the running root keeps the early files.
    The orphan job deletes exactly the oracle's orphans, none of the transaction's live files."""
    lh = _lh(tmp_path, txn_ttl_millis=TTL_MS)
    dt = DT.DistributedTransaction.begin(lh)
    dt.stage(lambda t: t.create_table("ns", "early"))
    lh.create_namespace("n2")
    o = E.oracle_of(lh)
    early = E.owned(o)
    _age(lh, early, 40 * 86_400)  # every file so far, the transaction's first states included
    dt.stage(lambda t: t.create_table("ns", "late"))  # renews the lease, re-pins on version 2
    (t,) = o.live_transactions()
    staged = E.walk(o, [(t.begin_version, t.running_root)], sizes=False).paths()
    keep = staged & early - E.version_files(o, E.kept_versions(o))
    assert keep, "the test needs aged files that only the transaction reaches"
    cutoff = time.time() - TTL_MS / 1000
    expected = E.orphans(o, cutoff)
    assert expected, "and superseded states or running roots to collect"
    res = run_local("orphans", lh.uri, reference_time=int(cutoff * 1000) + TTL_MS)
    assert res.status == "succeeded"
    assert early - E.owned(o) == expected and not keep & expected
    assert o.problems() == []
    v = dt.commit()
    assert Lakehouse.open(lh.uri, audit=False).view(version=v).list_tables("ns") == ["early", "late"]


def test_expire_keeps_what_a_live_transactions_running_root_reaches(tmp_path):
    """A transaction pinned on a version that expire then drops: its running root still reads,
    and expire deletes exactly what the oracle says the expired versions alone reach. (Expire
    sees "now" two TTLs ahead of the clock that leases the transaction; with one clock the TTL
    rule keeps the version a live transaction is pinned on, and the running roots in expire's
    walk are the second line: they hold within the clock-skew margin.)"""
    lh = _lh(tmp_path, txn_ttl_millis=TTL_MS)
    for i in range(6):
        lh.create_table("ns", f"t{i}")
    dt = DT.DistributedTransaction.begin(lh)
    dt.stage(lambda t: t.create_table("ns", "staged"))
    for i in range(6):
        lh.drop_table("ns", f"t{i}")
    o = E.oracle_of(lh)
    (t,) = o.live_transactions()
    before, expiring = o.snapshot(), list(range(lh.latest_version()))
    assert t.id in before.txns and t.begin_version in expiring
    expected = E.expired_files(o, expiring)
    txn_only = (E.walk(o, E.txn_entries(o), sizes=False).paths() & E.version_files(o, expiring)) - (
        E.version_files(o, [lh.latest_version()]))
    assert txn_only, "the test needs files of expired versions that only the running root still reaches"
    owned = E.owned(o)
    res = run_local("expire", lh.uri, min_versions_to_keep=1)
    assert res.status == "succeeded" and res.counts["versions_expired"] == len(expiring)
    assert owned - E.owned(o) == expected and not txn_only & expected
    # The transaction's tree still reads whole, its staged table included.
    assert o.problems(before) == [] and lh.view().codec.table_key("ns", "staged") in before.txns[t.id]


@pytest.mark.s3
def test_stage_from_processes_and_commit_on_s3(s3_bucket, s3_storage_options):
    uri = s3_bucket + "/dlh"
    lh = Lakehouse.create(uri, storage_options=s3_storage_options, order=4, node_max_bytes=4096, audit=False)
    lh.create_namespace("ns")
    dt = DT.DistributedTransaction.begin(lh)
    staged = W.run_with_barrier(DW.stage_tables, lambda w, b: (uri, dt.id, w, 2, b, s3_storage_options), 3)
    assert sum(s.count("shared") for s in staged) == 1
    outcomes = W.run_with_barrier(DW.commit, lambda w, b: (uri, dt.id, w, b, s3_storage_options), 2)
    assert sorted(o[0] for o in outcomes) == ["closed", "committed"], outcomes
    fresh = Lakehouse.open(uri, storage_options=s3_storage_options, audit=False)
    assert fresh.latest_version() == 2
    assert fresh.view().list_tables("ns") == sorted({n for s in staged for n in s})
