"""Crash injection: a writer process is SIGKILLed in the middle of its commits.

Two kinds of trials, on one lakehouse per test (each trial continues where the last one died):

* **named points**: ``TLAKE_TEST_CRASH_AT`` in {before_nodes, before_root, after_root,
  after_hint} kills the writer at that point of a randomly chosen commit;
* **timer kills**: the writer commits back to back and is killed after a random delay,
  wherever it is (writing nodes, creating the root, writing the hint, between commits).

After every kill: every version reads and walks, versions are contiguous, each version adds
exactly the one table its commit created, every acknowledged commit is present with its
table, and the next writer (a probe commit in the test process) succeeds.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from tests.reliability import _workers
from tests.reliability._verify import Ack, Verifier, parse_acks
from trinitylake.lakehouse import Lakehouse

POINTS = ("before_nodes", "before_root", "after_root", "after_hint")


def _run_trials(tmp_path, verifier: Verifier, trials: list[tuple[str, str | None, float]], *, options=None,
                timeout_s: float = 60.0) -> dict:
    """Run `trials` = [(label, crash point or None, kill delay)], checking after each."""
    ctx = _workers.context()
    stats = {"killed": 0, "killed_by_point": 0, "killed_by_timer": 0, "finished_before_kill": 0, "acked": 0,
             "durable_unacked": 0, "probe_commits": 0}
    rng = random.Random(len(trials))
    for k, (label, point, delay) in enumerate(trials):
        out = str(tmp_path / f"trial-{k}.log")
        crash_commit = rng.randrange(0, 4)
        commits = crash_commit + 1 if point else 10_000
        before = verifier.latest()
        p = ctx.Process(target=_workers.crash_writer,
                        args=(verifier.uri, options, "ns", f"k{k}_", commits, point, crash_commit, out))
        p.start()
        if point is None:
            _wait_ready(out, p, timeout_s)
            time.sleep(delay)
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.join(timeout_s)
        assert not p.is_alive(), f"trial {k} ({label}): writer still running after {timeout_s}s"
        acks = parse_acks(out)
        if p.exitcode == -signal.SIGKILL:
            stats["killed"] += 1
            stats["killed_by_point" if point else "killed_by_timer"] += 1
        else:
            assert p.exitcode == 0 and point is None, f"trial {k} ({label}): writer exit code {p.exitcode}"
            stats["finished_before_kill"] += 1
        stats["acked"] += len(acks)
        problems = verifier.check(acks, one_table_per_version_from=1)
        latest = verifier.latest()
        stats["durable_unacked"] += (latest - before) - len(acks)
        if point in ("after_root", "after_hint"):
            assert latest - before == len(acks) + 1, f"trial {k}: the killed commit's version {latest} is missing"
        if point in ("before_nodes", "before_root"):
            assert latest - before == len(acks), f"trial {k}: a commit killed {point} became visible"
        assert not problems, f"trial {k} ({label}): {problems}"
        # The next writer succeeds, and sees every version before it.
        probe = f"probe{k}"
        v = Lakehouse.open(verifier.uri, storage_options=options, audit=False).create_table("ns", probe)
        assert v == latest + 1, f"trial {k}: the next writer committed version {v}, expected {latest + 1}"
        stats["probe_commits"] += 1
        assert not verifier.check([Ack(v, "ns", probe)], one_table_per_version_from=1)
    assert not verifier.recheck_acks()
    return stats


def _wait_ready(out: str, p, timeout_s: float) -> None:
    """Wait until the writer opened the lakehouse, so that the delay falls in its commits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and p.is_alive():
        try:
            with open(out) as f:
                if "READY" in f.read():
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.005)


def _fresh(make_lakehouse, uri=None, **kw) -> Verifier:
    lh = make_lakehouse(uri, **kw) if uri else make_lakehouse(**kw)
    lh.create_namespace("ns")
    v = Verifier(lh.uri, lh.storage.options or None)
    assert not v.check()
    return v


def test_crash_at_named_points(tmp_path, make_lakehouse, ledger, scale) -> None:
    verifier = _fresh(make_lakehouse)
    trials = [(f"{p} #{i}", p, 0.0) for i in range(scale.crash_trials_per_point) for p in POINTS]
    t0 = time.perf_counter()
    try:
        stats = _run_trials(tmp_path, verifier, trials)
    finally:
        ledger.add("crash", "SIGKILL at named commit points (TLAKE_TEST_CRASH_AT)", trials=len(trials),
                   faults=len(trials), data_lost=len(verifier.problems), seconds=time.perf_counter() - t0,
                   versions_checked=verifier.versions_read, points=list(POINTS))
    assert stats["killed_by_point"] == len(trials)
    ledger.entries[-1]["details"].update(stats)


def test_crash_at_random_times(tmp_path, make_lakehouse, ledger, scale) -> None:
    verifier = _fresh(make_lakehouse)
    rng = random.Random(20261123)
    trials = [(f"timer #{i}", None, rng.uniform(0.0, 0.3)) for i in range(scale.crash_timer_trials)]
    t0 = time.perf_counter()
    try:
        stats = _run_trials(tmp_path, verifier, trials)
    finally:
        ledger.add("crash", "SIGKILL after a random delay (local files)", trials=len(trials), faults=len(trials),
                   data_lost=len(verifier.problems), seconds=time.perf_counter() - t0,
                   versions_checked=verifier.versions_read)
    ledger.entries[-1]["details"].update(stats)
    assert stats["killed_by_timer"] >= len(trials) * 0.8


@pytest.mark.s3
def test_crash_at_random_times_on_s3(tmp_path, make_lakehouse, s3_bucket, s3_storage_options, ledger, scale) -> None:
    verifier = _fresh(make_lakehouse, f"{s3_bucket}/lh", storage_options=s3_storage_options)
    rng = random.Random(7)
    trials = [(f"s3 timer #{i}", None, rng.uniform(0.0, 1.5)) for i in range(scale.crash_s3_trials)]
    t0 = time.perf_counter()
    try:
        stats = _run_trials(tmp_path, verifier, trials, options=s3_storage_options, timeout_s=120)
    finally:
        ledger.add("crash", "SIGKILL after a random delay (S3, moto server)", trials=len(trials), faults=len(trials),
                   data_lost=len(verifier.problems), seconds=time.perf_counter() - t0,
                   versions_checked=verifier.versions_read)
    ledger.entries[-1]["details"].update(stats)
    # Each writer has 10,000 commits to make against the server, after it opened the lakehouse:
    # none finishes within the 1.5 s before its kill, so every trial must end by our SIGKILL (exit
    # status -9). (Whether a kill lands before the first commit's end depends on the machine's load.)
    assert stats["killed_by_timer"] == len(trials) and stats["finished_before_kill"] == 0, stats
