"""Stress: concurrent writer processes while the expire and orphans jobs run again and again.

Writers (processes) commit table creations into their own namespaces and now and then alter a
shared table (write-write conflicts, retried with a new transaction), under light transient
storage faults. Meanwhile the test process runs the Spark expire and orphans jobs in turn
(transaction TTL 5 s, clock-skew margin 2 s: versions expire once older than 7 s), and after
every job checks:

* every retained version reads and walks: no file a retained version reaches was deleted;
* versions are contiguous from the oldest retained one to the latest;
* every acknowledged commit that is still retained holds its table.

At the end: exactly one version per acknowledged commit and per expire commit (nothing lost,
nothing committed twice), and the acknowledged commits below the oldest retained version
were expired by the policy, not lost.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.oracle import expect as E
from tests.reliability import _workers
from tests.reliability._jobs import run
from tests.reliability._verify import Verifier, missing_reachable, parse_acks
from tests.support.faults import FaultSpec, count_logged

pytestmark = pytest.mark.spark

TTL_MS = 5000


def test_concurrent_writers_with_expire_and_orphans(spark, make_lakehouse, tmp_path, ledger, scale) -> None:
    lh = make_lakehouse(txn_ttl_millis=TTL_MS)
    for w in range(scale.stress_writers):
        lh.create_namespace(f"w{w}")
    lh.create_namespace("shared")
    lh.create_table("shared", "t")
    start_version = lh.latest_version()
    log_dir = str(tmp_path / "fault-log")
    spec = FaultSpec(transient_rate=0.02, after_share=0.3, max_consecutive=2, seed=9, log_dir=log_dir).to_json()
    pause = 1.0 if scale.name == "ci" else 0.3
    ctx = _workers.context()
    outs = [str(tmp_path / f"writer-{w}.log") for w in range(scale.stress_writers)]
    procs = [ctx.Process(target=_workers.stress_writer, args=(lh.uri, None, w, scale.stress_commits, pause, 100 + w,
                                                              outs[w], spec))
             for w in range(scale.stress_writers)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()

    runs: list[dict] = []
    problems: list[str] = []
    deleted_reachable = 0
    expire_commits = 0

    def one(job: str, **overrides) -> None:
        nonlocal deleted_reachable, expire_commits
        writers_alive = sum(p.is_alive() for p in procs)
        result, seconds = run(spark, job, lh.uri, **overrides)
        if job == "expire" and result.details.get("commit_version") is not None:
            expire_commits += 1
        missing, reach = missing_reachable(lh.uri)
        deleted_reachable += missing
        found = Verifier(lh.uri).check()
        problems.extend(found)
        runs.append({"job": job, "status": result.status, "seconds": round(seconds, 1), "writers_alive": writers_alive,
                     "deleted": result.counts.get("deleted", 0), "versions_expired": result.counts.get("versions_expired"),
                     "reachable_after": reach, "reachable_missing": missing})
        assert result.status == "succeeded", result
        assert missing == 0, f"{job} deleted {missing} files that retained versions reach"
        assert not found, found

    # Alternate the jobs while the writers run (at least one run of each). At CI scale the
    # writers are only busy long enough for one job, so expire (the riskier one) goes first; at
    # full scale they outlast several, and orphans goes first so that both overlap them.
    jobs = [("expire", {"clock_skew_margin": "2s"}), ("orphans", {})]
    if scale.name == "full":
        jobs.reverse()
    try:
        time.sleep(2.0 + TTL_MS / 1000)  # the first versions and files age past TTL (+ margin)
        i = 0
        while any(p.is_alive() for p in procs) or i < 2:
            job, kw = jobs[i % 2]
            one(job, **kw)
            i += 1
        for p in procs:
            p.join(120)
        wall = time.perf_counter() - t0
        if scale.name == "full" or runs[-1]["writers_alive"]:
            one("expire", clock_skew_margin="2s")  # once more over the final state
            one("orphans")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()

    acks = [a for o in outs for a in parse_acks(o)]
    done = [open(o).read().splitlines()[-1] for o in outs]
    verifier = Verifier(lh.uri)
    problems += verifier.check(acks)
    problems += verifier.recheck_acks()
    oracle = E.oracle_for(lh.uri)
    latest, floor = E.latest_version(oracle), E.floor(oracle)
    expired_acks = sum(1 for a in acks if a.version < floor)
    n_faults = count_logged(log_dir)["total"]
    ledger.add("stress", f"{scale.stress_writers} writers x {scale.stress_commits} commits with concurrent expire "
               "and orphans", trials=len(acks), faults=n_faults, data_lost=len(problems) + deleted_reachable,
               seconds=time.perf_counter() - t0, writers_wall_seconds=round(wall, 1), job_runs=runs,
               versions=latest - start_version, expire_commits=expire_commits, acked_expired=expired_acks,
               oldest_retained=floor, latest=latest, writer_summaries=done, reachable_deleted=deleted_reachable)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    assert len(acks) == scale.stress_writers * scale.stress_commits
    assert not problems, problems[:5]
    assert len({a.version for a in acks}) == len(acks), "two commits acknowledged the same version"
    assert latest - start_version == len(acks) + expire_commits, (
        f"{latest - start_version} versions for {len(acks)} commits and {expire_commits} expirations")
    assert sum(r["job"] == jobs[0][0] and r["writers_alive"] > 0 for r in runs) >= 1, json.dumps(runs)
    if scale.name == "full":
        assert sum(r["job"] == jobs[1][0] and r["writers_alive"] > 0 for r in runs) >= 1, json.dumps(runs)
    assert sum(r["versions_expired"] or 0 for r in runs) > 0 and floor > 0, "nothing expired"
    assert os.path.isdir(log_dir) and n_faults > 0
