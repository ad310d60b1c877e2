"""Storage faults inside the Spark maintenance jobs (walk, expire, orphans, export).

Faults are injected into every process: the driver and the executors' Python workers (see
`tests.reliability._jobs.ExecutorFaults`).

* Transient faults: every job succeeds with the result it has without faults (the walk finds
  the same files, expire and orphans delete exactly what they should, the export reads back
  equal to its source), and every retained version still reads and walks.
* Permanent faults: the job fails with a typed error, deletes nothing that a retained version
  reaches, publishes nothing half-done (no export root), and a re-run without faults completes.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from tests.oracle import Oracle
from tests.oracle import expect as E
from tests.reliability._jobs import ExecutorFaults, run
from tests.reliability._verify import Ack, Verifier
from tests.support.faults import FaultSpec
from trinitylake.errors import TrinityLakeError
from trinitylake.format.paths import hashed_path
from trinitylake.jobs.runner import JobFailedError
from trinitylake.lakehouse import Lakehouse

pytestmark = pytest.mark.spark


@pytest.fixture
def faults(spark, tmp_path):
    f = ExecutorFaults(spark, str(tmp_path / "faults"))
    yield f
    f.close()


def build(make_lakehouse, tables: int = 14) -> tuple[Lakehouse, list[Ack]]:
    """A lakehouse of a few tree levels with drops and alters; versions old enough to expire
    (transaction TTL 1 s)."""
    lh = make_lakehouse(txn_ttl_millis=1000)
    lh.create_namespace("ns")
    acks = []
    for i in range(tables):
        acks.append(Ack(lh.create_table("ns", f"t{i}"), "ns", f"t{i}"))
    txn = lh.begin()
    txn.alter_table("ns", "t1", set_properties={"x": "1"})
    txn.commit()
    lh.drop_table("ns", "t2")
    time.sleep(1.2)
    return lh, acks


def plant_orphans(lh: Lakehouse, old: int, young: int) -> tuple[list[str], list[str]]:
    """Unreferenced, format-owned files: `old` ones an hour old, `young` ones just written."""
    olds, youngs = [], []
    for i in range(old + young):
        p = hashed_path(f"node-{uuid.uuid4()}.arrow")
        lh.storage.write(p, b"orphan")
        if i < old:
            fp = lh.storage._fs_path(p)
            os.utime(fp, (time.time() - 3600, time.time() - 3600))
            olds.append(p)
        else:
            youngs.append(p)
    return olds, youngs


def healthy(lh: Lakehouse, acks: list[Ack]) -> list[str]:
    """Problems of the lakehouse as a fresh reader sees it (no cached knowledge)."""
    v = Verifier(lh.uri, lh.storage.options or None)
    problems = v.check(acks)
    return problems + v.recheck_acks()


def test_jobs_succeed_under_transient_faults(spark, make_lakehouse, faults, ledger, scale) -> None:
    lh, acks = build(make_lakehouse)
    o = Oracle(lh.uri)  # the expected sets come from the independent oracle
    expected_reach = o.live_files()
    spec = FaultSpec(transient_rate=scale.job_fault_rate, after_share=0.3, max_consecutive=2, seed=3)
    figures: dict[str, dict] = {}
    lost = 0
    t_all = time.perf_counter()

    def phase(job: str, **overrides):
        log = faults.on(spec)
        try:
            # On the executors: this test injects faults into their processes too (auto would
            # keep a lakehouse this small on the driver).
            result, seconds = run(spark, job, lh.uri, execution="distributed", **overrides)
        finally:
            faults.off()
        counted = faults.counted(log)
        figures[job] = {"faults": counted["total"], "processes": faults.processes(log), "seconds": round(seconds, 1),
                        "status": result.status}
        return result

    walk = phase("walk")
    assert walk.status == "succeeded"
    assert walk.counts["reachable"] == len(expected_reach), "the walk under faults found other files"

    latest, d = o.latest()
    floor, new_floor = d.oldest_retained_version, latest - 2  # min_versions_to_keep=3, all old
    expired_files = o.version_files(range(floor, new_floor))
    owned, snap = o.owned_files(), o.snapshot()
    expire = phase("expire")
    assert expire.status == "succeeded" and expire.counts["failed"] == 0
    assert o.latest()[1].oldest_retained_version == new_floor
    assert expire.counts["versions_expired"] == new_floor - floor > 0
    assert owned - o.owned_files() == expired_files - o.live_files(), "exactly the oracle's expired-only files"
    assert o.problems(snap) == []
    problems = healthy(lh, acks)
    lost += len(problems)
    assert not problems, problems

    olds, youngs = plant_orphans(lh, old=5, young=2)
    owned, live, now = o.owned_files(), o.live_files(), time.time()
    garbage = {p for p in owned - live if os.stat(lh.storage._fs_path(p)).st_mtime < now - 1}
    orphans = phase("orphans", older_than="1s")
    assert orphans.status == "succeeded" and orphans.counts["failed"] == 0
    assert owned - o.owned_files() == garbage and set(olds) <= garbage, "exactly the old unreachable files"
    assert orphans.counts["deleted"] == len(garbage), orphans.counts
    assert not any(lh.storage.exists(p) for p in olds) and all(lh.storage.exists(p) for p in youngs)
    problems = healthy(lh, acks)
    lost += len(problems)
    assert not problems, problems

    target = os.path.join(os.path.dirname(lh.storage._fs_path("")), f"export-{uuid.uuid4().hex[:8]}")
    version = E.latest_version(o)
    export = phase("export", name="snap", target=target, version=version)
    assert export.status == "succeeded"
    # The target, read on its own by the oracle: its latest version is `version` and every key
    # with its definition's bytes equals the source's at `version`.
    assert E.latest_version(E.oracle_for(target)) == version
    assert E.version_contents(target) == E.version_contents(lh.uri, version), "the target reads as its source"
    assert o.snapshot().exports["snap"] == o.snapshot().versions[version], "the export reads as its source"
    problems = healthy(lh, acks)
    lost += len(problems)

    total = sum(f["faults"] for f in figures.values())
    ledger.add("faults", "Spark jobs under transient faults (driver and executors)", trials=len(figures),
               faults=total, data_lost=lost, seconds=time.perf_counter() - t_all, jobs=figures)
    assert not problems, problems
    # Faults reached the executors' Python workers, not only the driver. Counted over all four
    # jobs: which worker gets a job's few tasks, and so draws its few faults, is up to Spark.
    injecting = set().union(*(faults.pids(d) for d in faults.log_dirs))
    assert total > 0 and injecting - {os.getpid()}, (figures, injecting)


def _expect_failure(fn) -> TrinityLakeError:
    with pytest.raises(TrinityLakeError) as e:
        fn()
    return e.value


def test_jobs_fail_cleanly_under_permanent_faults(spark, make_lakehouse, faults, ledger, scale) -> None:
    lh, acks = build(make_lakehouse)
    o = Oracle(lh.uri)
    latest, _ = o.latest()
    files_of = {v: o.version_files([v]) for v in range(latest + 1)}
    owned, snap = o.owned_files(), o.snapshot()
    figures: dict[str, dict] = {}
    lost = 0
    t_all = time.perf_counter()

    def failing(label: str, spec: FaultSpec, job: str, **overrides) -> TrinityLakeError:
        log = faults.on(spec)
        try:
            err = _expect_failure(lambda: run(spark, job, lh.uri, **overrides))
        finally:
            faults.off()
        figures[label] = {"faults": faults.counted(log)["total"], "error": f"{type(err).__name__}: {str(err)[:200]}"}
        assert isinstance(err, JobFailedError) and err.result.status == "failed"
        return err

    # expire: node deletes refused. The expiration is committed, nothing a retained version
    # reaches is deleted, the expired roots stay for the re-run, which completes the job.
    failing("expire: node deletes denied", FaultSpec(permanent_paths=r"node-[^/]*\.arrow$", permanent_ops=("delete",)),
            "expire", max_retries=1)
    problems = healthy(lh, acks)
    lost += len(problems)
    assert not problems, problems
    rerun, _ = run(spark, "expire", lh.uri)
    assert rerun.status == "succeeded" and rerun.counts["failed"] == 0
    assert rerun.counts["versions_leftover"] > 0, "the re-run should finish the interrupted expiration"
    # The failed run committed latest-2; the re-run keeps 3 of the versions after that commit.
    floor = o.latest()[1].oldest_retained_version
    assert floor in (latest - 2, latest - 1)
    expired_files = set().union(*(files_of[v] for v in range(floor)))
    assert owned - o.owned_files() == expired_files - o.live_files(), "the re-run left no expired-only file"
    assert o.problems(snap) == []
    problems = healthy(lh, acks)
    lost += len(problems)
    assert not problems, problems

    # orphans: node reads refused, so the live set cannot be computed: nothing is deleted.
    olds, youngs = plant_orphans(lh, old=3, young=0)
    failing("orphans: node reads denied", FaultSpec(permanent_paths=r"node-[^/]*\.arrow$", permanent_ops=("read",)),
            "orphans", older_than="1s")
    assert all(lh.storage.exists(p) for p in olds), "orphans deleted files although its walk failed"
    problems = healthy(lh, acks)
    lost += len(problems)
    assert not problems, problems

    if scale.name == "full":  # the same refusal fails the walk job with a typed error
        failing("walk: node reads denied", FaultSpec(permanent_paths=r"node-[^/]*\.arrow$", permanent_ops=("read",)),
                "walk")

    # export: copies to the target refused. No export root appears, the source records no
    # export; the re-run resumes from the persisted plan and completes.
    target = os.path.join(os.path.dirname(lh.storage._fs_path("")), f"export-{uuid.uuid4().hex[:8]}")
    failing("export: target node creates denied",
            FaultSpec(permanent_paths=r"node-[^/]*\.arrow$", permanent_ops=("create_exclusive",)),
            "export", name="snap", target=target)
    assert E.root_files(E.oracle_for(target)) == [], "a failed export published its root"
    assert "snap" not in o.latest()[1].exported_snapshots
    exported_version = E.latest_version(o)
    done, _ = run(spark, "export", lh.uri, name="snap", target=target)
    assert done.status == "succeeded"
    assert E.latest_version(E.oracle_for(target)) == exported_version
    assert E.version_contents(target) == E.version_contents(lh.uri, exported_version), "the target reads as its source"
    now = o.snapshot()
    assert now.exports["snap"] == now.versions[exported_version], "the resumed export reads as its source"
    problems = healthy(lh, acks)
    lost += len(problems)
    ledger.add("faults", "Spark jobs under permanent faults (typed failure, clean re-run)", trials=len(figures),
               faults=sum(f["faults"] for f in figures.values()), data_lost=lost, seconds=time.perf_counter() - t_all,
               jobs=figures)
    assert not problems, problems
