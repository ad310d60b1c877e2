"""Retention of _maintenance/<job>/<run_id> folders: the policy (newest N, age), what is always
kept (the running run, unfinished runs a resume may need, the last failed run), and the
pruning step of real walk and orphans runs on a real local lakehouse."""

from __future__ import annotations

import os

import pytest

from trinitylake.runs.retention import choose, list_runs, prune_runs, run_states
from trinitylake.storage import Storage

DAY_MS = 24 * 3600 * 1000
NOW_MS = 1_800_000_000_000


def _plant(root, job, run_id, age_days, finished=True, nested=True):
    d = root / "_maintenance" / job / run_id
    (d / "candidates").mkdir(parents=True)
    files = [d / "plan.json", d / "candidates" / "part-0.parquet"] if nested else [d / "plan.json"]
    if finished:
        files.append(d / "result.json")
    for f in files:
        f.write_text("{}")
        t = (NOW_MS - age_days * DAY_MS) / 1000
        os.utime(f, (t, t))
    return d


def test_policy_keeps_newest_and_young_and_protects_unfinished_and_last_failed(tmp_path):
    for i, age in enumerate([90, 80, 70, 60, 50, 5]):
        _plant(tmp_path, "expire", f"r{i}", age)
    _plant(tmp_path, "expire", "crashed-old", 95, finished=False)  # older than a success: may go
    _plant(tmp_path, "expire", "in-flight", 1, finished=False)  # newer than every success: stays
    states = {"r1": "failed", "r2": "failed"}
    st = Storage(str(tmp_path))
    runs = list_runs(st, "expire", states)
    assert [r.run_id for r in runs][:2] == ["crashed-old", "r0"]
    prune, protected = choose(runs, current_run_id="r0", keep_runs=2, max_age_ms=30 * DAY_MS, now_ms=NOW_MS)
    assert protected == {"r0", "r2", "in-flight"}  # current, last failed, unfinished after the last success
    # The newest 2 folders are r5 and in-flight; everything older than them and past 30 days goes.
    assert sorted(r.run_id for r in prune) == ["crashed-old", "r1", "r3", "r4"]


@pytest.mark.parametrize(("keep", "age_days", "expected"), [(0, 0, 3), (10, 0, 0), (0, 100, 0), (1, 10, 2)])
def test_a_run_goes_only_beyond_the_newest_n_and_past_the_age(tmp_path, keep, age_days, expected):
    for i, age in enumerate([40, 30, 20]):
        _plant(tmp_path, "walk", f"w{i}", age)
    prune, _ = choose(list_runs(Storage(str(tmp_path)), "walk"), current_run_id=None, keep_runs=keep,
                      max_age_ms=age_days * DAY_MS, now_ms=NOW_MS)
    assert len(prune) == expected


def test_prune_deletes_files_and_empty_folders(tmp_path):
    _plant(tmp_path, "orphans", "old", 60)
    keep = _plant(tmp_path, "orphans", "new", 1)
    out = prune_runs(Storage(str(tmp_path)), "orphans", current_run_id="new", keep_runs=0, max_age_ms=30 * DAY_MS,
                     now_ms=NOW_MS)
    assert out.pruned == ["old"] and out.files_deleted == 3 and out.kept == ["new"]
    assert sorted(os.listdir(tmp_path / "_maintenance" / "orphans")) == ["new"]
    assert (keep / "result.json").exists()


def test_run_states_from_control_rows():
    from trinitylake.control.records import AuditRecord

    rows = [AuditRecord(1, "begin", "a", "orphans"), AuditRecord(1, "read", "a", "orphans"),
            AuditRecord(2, "begin", "b", "orphans"), AuditRecord(2, "failed", "b", "orphans"),
            AuditRecord(3, "begin", "c", "orphans"), AuditRecord(4, "begin", "d", "walk")]
    assert run_states(rows, "orphans") == {"a": "succeeded", "b": "failed", "c": "running"}


def test_jobs_prune_their_old_runs_and_dry_runs_prune_nothing(make_lakehouse):
    from trinitylake.config import load_job_config
    from trinitylake.jobs.runner import run_job
    from trinitylake.lakehouse import Lakehouse

    lh = make_lakehouse(audit=True)
    root = lh.storage.uri("").removeprefix("file://")
    base = {"lakehouse": lh.uri, "execution": "local", "master": "no-such-master", "keep_runs": 1,
            "keep_runs_max_age": "0s"}
    runs = [run_job("walk", load_job_config("walk", overrides=base, env={}), lakehouse=Lakehouse.open(lh.uri))
            for _ in range(3)]
    assert all(r.status == "succeeded" for r in runs)
    walk_dir = os.path.join(root, "_maintenance", "walk")
    assert os.listdir(walk_dir) == [runs[-1].run_id]
    assert runs[-1].details["bookkeeping"]["pruned"] == [runs[1].run_id]
    # A failed orphans run's folder outlives later dry runs (which prune nothing) and one real run.
    dry = [run_job("orphans", load_job_config("orphans", overrides={**base, "dry_run": True}, env={}),
                   lakehouse=Lakehouse.open(lh.uri)) for _ in range(2)]
    assert all(r.status == "dry_run" and "bookkeeping" not in r.details for r in dry)
    assert len(os.listdir(os.path.join(root, "_maintenance", "orphans"))) == 2
    real = run_job("orphans", load_job_config("orphans", overrides=base, env={}), lakehouse=Lakehouse.open(lh.uri))
    assert os.listdir(os.path.join(root, "_maintenance", "orphans")) == [real.run_id]


def test_control_table_states_are_read_only_when_something_may_be_pruned(tmp_path):
    _plant(tmp_path, "walk", "a", 60)
    _plant(tmp_path, "walk", "b", 50)
    calls = []

    def states():
        calls.append(1)
        return {"a": "failed"}

    st = Storage(str(tmp_path))
    out = prune_runs(st, "walk", current_run_id="b", keep_runs=2, max_age_ms=0, now_ms=NOW_MS, states=states)
    assert calls == [] and sorted(out.kept) == ["a", "b"] and out.pruned == []
    out = prune_runs(st, "walk", current_run_id="b", keep_runs=1, max_age_ms=0, now_ms=NOW_MS, states=states)
    assert calls == [1] and out.pruned == [] and out.protected == ["a", "b"]  # "a" is the last failed run
