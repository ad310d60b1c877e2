"""Expire paused at each phase boundary while a commit, a rollback, an export pin or a long
transaction lands; and a driver SIGKILLed after its commit followed by a rollback. The oracle
(`tests.oracle`, independent of the library's walk) gives the exact set of files that must go
and what every retained version and export must still read.

Regression for the hole of issue 19: after expire committed ``oldest_retained_version`` and
before it deleted, a rollback to an expired version was accepted, and its new latest version
referenced files that expire then deleted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.maintenance.helpers import build_history, write_minimal_export
from tests.oracle import Oracle
from tests.support.jobs import AHEAD_MS, TTL_MS, pause_at, run_local
from trinitylake.errors import UnsafeOperationError, VersionExpiredError
from trinitylake.format.paths import root_name
from trinitylake.jobs.expire import job as expire_mod
from trinitylake.jobs.runner import JobFailedError
from trinitylake.lakehouse import Lakehouse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POINTS = ["expire_after_plan", "expire_after_commit", "expire_before_delete", "expire_mid_delete"]
KEEP = 4
RAN: list[tuple[str, str, int, int, float]] = []  # (what, point, files deleted, files checked, seconds)
_T0 = [0.0]


@pytest.fixture(autouse=True)
def _clock():
    _T0[0] = time.perf_counter()


@pytest.fixture(scope="module", autouse=True)
def _figures(ledger):
    yield
    by: dict[str, list[tuple[str, int, int, float]]] = {}
    for what, point, deleted, checked, sec in RAN:
        by.setdefault(what, []).append((point, deleted, checked, sec))
    for what, runs in sorted(by.items()):
        ledger.add("oracle", what, trials=len(runs), seconds=sum(r[3] for r in runs),
                   points=sorted({r[0] for r in runs}), files_deleted=sum(r[1] for r in runs),
                   files_checked=sum(r[2] for r in runs))


def _lakehouse(tmp_path, seed: int = 7) -> Lakehouse:
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=seed, ops=28)
    return lh


def _expected(o: Oracle, keep: int = KEEP):
    """(expired versions, the oracle's files of the expired versions) before the run."""
    latest, d = o.latest()
    expired = list(range(d.oldest_retained_version, latest + 1 - keep))
    return expired, o.version_files(expired)


def _check(o: Oracle, before_owned: set[str], before_snap, expired_files: set[str]) -> set[str]:
    """The oracle's verdict after a run; returns the deleted files."""
    assert o.problems(before_snap) == []
    deleted = before_owned - o.owned_files()
    live = o.live_files()
    assert not deleted & live, f"deleted files a retained version reaches: {sorted(deleted & live)[:3]}"
    _check.last = (len(deleted), len(live))  # type: ignore[attr-defined]
    return deleted


def _ran(what: str, point: str) -> None:
    RAN.append((what, point, *_check.last, time.perf_counter() - _T0[0]))  # type: ignore[attr-defined]


@pytest.mark.parametrize("point", POINTS)
def test_a_rollback_to_an_expiring_version_is_kept_or_refused(tmp_path, monkeypatch, point):
    lh = _lakehouse(tmp_path)
    o = Oracle(lh.uri)
    expired, expired_files = _expected(o)
    target = expired[len(expired) // 2]
    owned, snap = o.owned_files(), o.snapshot()
    with pause_at(monkeypatch, expire_mod, point, lambda: Lakehouse.open(lh.uri, audit=False).rollback(target)) as got:
        res = run_local("expire", lh.uri, min_versions_to_keep=KEEP)
    assert len(got) == 1
    deleted = _check(o, owned, snap, expired_files)
    latest, d = o.latest()
    assert d.oldest_retained_version == expired[-1] + 1
    if point == "expire_after_plan":
        # Before the floor moved: allowed, and its files are kept by walk_new.
        assert got[0] == latest - 1 == res.details["commit_version"] - 1 and res.counts["new_roots_walked"] == 2
        assert o.items(f"{o.root}/{root_name(got[0])}") == snap.versions[target]
        assert deleted == expired_files - o.live_files()
        assert deleted < expired_files
    else:
        assert isinstance(got[0], VersionExpiredError) and f"version {target} is expired" in str(got[0])
        assert latest == res.details["commit_version"], "the refused rollback committed nothing"
        assert deleted == expired_files - o.live_files()
    _ran("expire paused at a phase boundary; a rollback to an expiring version lands", point)


@pytest.mark.parametrize("point", POINTS)
def test_an_export_pinning_an_expiring_version_stops_expire_or_is_refused(tmp_path, monkeypatch, point):
    lh = _lakehouse(tmp_path, seed=8)
    o = Oracle(lh.uri)
    expired, expired_files = _expected(o)
    pin = expired[-1]
    owned, snap = o.owned_files(), o.snapshot()

    def export():
        return write_minimal_export(Lakehouse.open(lh.uri, audit=False), pin, str(tmp_path / "exp"), "e1")

    with pause_at(monkeypatch, expire_mod, point, export) as got:
        if point == "expire_after_plan":
            with pytest.raises(JobFailedError) as err:
                run_local("expire", lh.uri, min_versions_to_keep=KEEP)
            assert isinstance(err.value.__cause__, UnsafeOperationError)
            assert "pin versions" in str(err.value) and f"{pin}" in str(err.value)
        else:
            run_local("expire", lh.uri, min_versions_to_keep=KEEP)
    assert len(got) == 1
    deleted = _check(o, owned, snap, expired_files)
    latest, d = o.latest()
    if point == "expire_after_plan":
        # The export was recorded first: expire refused to commit and deleted nothing.
        assert isinstance(got[0], str) and d.exported_snapshot_pins["e1"] == pin
        assert d.oldest_retained_version == 0 and deleted == set()
        assert o.snapshot().exports["e1"] == snap.versions[pin]
    else:
        assert isinstance(got[0], VersionExpiredError) and f"pins version {pin}" in str(got[0])
        assert "e1" not in d.exported_snapshots and "e1" not in d.exported_snapshot_pins
        assert deleted == expired_files - o.live_files()
    _ran("expire paused at a phase boundary; an export pins an expiring version", point)


@pytest.mark.parametrize("point", POINTS)
def test_commits_and_a_long_transaction_landing_mid_expire_survive(tmp_path, monkeypatch, point):
    lh = _lakehouse(tmp_path, seed=9)
    o = Oracle(lh.uri)
    expired, expired_files = _expected(o)
    long_txn = lh.begin()  # pinned at the latest version, which never expires
    long_txn.create_namespace("late")
    ns = lh.view().list_namespaces()[0]

    def commits():
        other = Lakehouse.open(lh.uri, audit=False)
        other.create_table(ns, "mid")
        t = other.begin()
        t.alter_table(ns, "mid", set_properties={"at": point})
        t.commit()
        return long_txn.commit()

    owned, snap = o.owned_files(), o.snapshot()
    with pause_at(monkeypatch, expire_mod, point, commits) as got:
        run_local("expire", lh.uri, min_versions_to_keep=KEEP)
    assert isinstance(got[0], int), got
    deleted = _check(o, owned, snap, expired_files)
    assert deleted == expired_files - o.live_files()
    latest = Lakehouse.open(lh.uri, audit=False).view()
    assert "late" in latest.list_namespaces() and "mid" in latest.list_tables(ns)
    assert latest.load_table(ns, "mid").properties["at"] == point
    _ran("expire paused at a phase boundary; commits and a long transaction land", point)


def test_rollback_after_a_kill_at_expire_after_commit_is_refused_and_a_rerun_finishes(tmp_path):
    """The reproduction from the issue: kill expire right after its commit, roll back below it."""
    lh = _lakehouse(tmp_path, seed=10)
    o = Oracle(lh.uri)
    expired, expired_files = _expected(o)
    owned, snap = o.owned_files(), o.snapshot()
    env = {**os.environ, "TLAKE_TEST_CRASH_AT": "expire_after_commit", "PYTHONPATH": os.pathsep.join((ROOT, os.environ.get("PYTHONPATH", "")))}
    proc = subprocess.run(
        [sys.executable, "jobs/expire.py", "--lakehouse", lh.uri, "--execution", "local", "--max-version-age", "0",
         "--clock-skew-margin", "0", "--min-versions-to-keep", str(KEEP), "--reference-time",
         str(int(time.time() * 1000) + AHEAD_MS), "--control-uri", str(tmp_path / "control")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert o.owned_files() >= owned, "killed before deleting anything"
    latest_before = o.latest()[0]
    cli = subprocess.run([os.path.join(os.path.dirname(sys.executable), "tlake"), "--lakehouse", lh.uri, "--no-audit", "rollback",
                          "--to", str(expired[1])], cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join((ROOT, os.environ.get("PYTHONPATH", "")))},
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1 and "VersionExpiredError" in cli.stderr and "is expired" in cli.stderr, cli.stderr
    assert o.latest()[0] == latest_before
    with pytest.raises(VersionExpiredError):
        Lakehouse.open(lh.uri, audit=False).rollback(expired[-1])
    # One more version to keep: the killed run's own commit is a version, and the floor stays.
    res = run_local("expire", lh.uri, min_versions_to_keep=KEEP + 1)
    assert res.counts["versions_leftover"] == len(expired) and res.counts["versions_expired"] == 0
    deleted = _check(o, owned, snap, expired_files)
    assert deleted == expired_files - o.live_files()
    assert not {root_name(v) for v in expired} & o.owned_files()
    _ran("expire SIGKILLed after its commit; rollback below the floor refused (tlake CLI); re-run", "expire_after_commit")
