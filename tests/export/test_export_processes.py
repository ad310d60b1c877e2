"""A big local-to-local export copies its plan parts in worker processes (`copy_workers`): the
same files as the driver's threads, failures as typed errors naming the file or the part, and a
failed run resumes."""

from __future__ import annotations

import os
import sys

import pytest

import trinitylake.jobs.export.copy_phase as E
import trinitylake.jobs.export.planner as P
from trinitylake.errors import StorageError, TrinityLakeError
from trinitylake.storage import Storage

from .conftest import contents, latest_def, populate, root_files, target_files
from .test_export_execution import _tree


@pytest.fixture
def processes(monkeypatch):
    """Every local copy counts as big, on a machine with two cores, in parts of 4 files."""
    monkeypatch.setattr(P, "LOCAL_PART_ROWS", 4)
    monkeypatch.setattr(E, "LOCAL_PROCESS_MIN_FILES", 1)
    monkeypatch.setattr(E.os, "cpu_count", lambda: 2)


def test_worker_processes_copy_exactly_what_the_driver_threads_copy(run, make_lakehouse, tmp_path, monkeypatch):
    lh = make_lakehouse()
    v = populate(lh)
    a = run(lh, str(tmp_path / "threads"), "a", version=v, batch_size=4)
    assert "copy_processes" not in a.details
    monkeypatch.setattr(P, "LOCAL_PART_ROWS", 4)
    monkeypatch.setattr(E, "LOCAL_PROCESS_MIN_FILES", 1)
    monkeypatch.setattr(E.os, "cpu_count", lambda: 2)
    b = run(lh, str(tmp_path / "procs"), "b", version=v, batch_size=4)
    assert b.details["copy_processes"] == 2 and b.details["execution"]["export.copy"]["where"] == "local"
    ta, tb = _tree(tmp_path / "threads"), _tree(tmp_path / "procs")
    assert ta == tb and len(ta) > 5
    for k in ("planned", "copied", "verified", "rewritten", "source_reads"):
        assert a.counts[k] == b.counts[k], k
    # Every part got its result manifest (written by the workers), so a re-run reads no source.
    assert b.counts["batches"] == len(os.listdir(tmp_path / "procs" / "_export" / "b" / "copied"))
    assert contents(str(tmp_path / "procs")) == contents(lh.uri, v)
    again = run(lh, str(tmp_path / "procs"), "b")
    assert again.counts["copied"] == 0 and again.counts["source_reads"] == 0


def test_a_source_file_missing_in_a_worker_is_a_typed_error_naming_it(run, make_lakehouse, tmp_path, processes):
    lh = make_lakehouse()
    populate(lh)
    gone = lh.view().describe_table("ns0", "t3")["definition"]
    os.remove(lh.storage._fs_path(gone))
    with pytest.raises(TrinityLakeError) as e:
        run(lh, str(tmp_path / "t"), "m", batch_size=4)
    assert gone.rsplit("/", 1)[-1] in str(e.value)
    assert root_files(Storage(str(tmp_path / "t"))) == []  # nothing visible: the root is written last
    assert "m" not in latest_def(lh).exported_snapshots


def test_a_worker_killed_mid_copy_fails_the_copy_and_a_rerun_finishes_it(run, make_lakehouse, tmp_path, processes,
                                                                          monkeypatch):
    from tests.support.faults import ENV, FaultSpec, kill_pids

    lh = make_lakehouse()
    v = populate(lh)
    target = str(tmp_path / "t")
    # The copy worker processes (not this one) start with the test's fault hook: the first of
    # them to create its third target file is SIGKILLed right after it, like one the OOM
    # killer took mid-part.
    log_dir = str(tmp_path / "faults")
    kill = FaultSpec(kill_op="create_exclusive", kill_nth=3, kill_when="after", kill_paths=r"^(?!_export/)",
                     kill_token=str(tmp_path / "killed"), log_dir=log_dir)
    monkeypatch.setenv(ENV, kill.to_json())
    with pytest.raises(StorageError, match=r"copy worker \(pid \d+\) died"):
        run(lh, target, "d", batch_size=4)
    killed = kill_pids(log_dir)
    assert len(killed) == 1 and os.getpid() not in killed, "one copy worker was really killed"
    present = target_files(Storage(target))
    assert len(present) >= 3 and root_files(Storage(target)) == [] and "d" not in latest_def(lh).exported_snapshots
    monkeypatch.delenv(ENV)
    r = run(lh, target, "d")
    assert r.details["resumed"] and r.counts["copied"] + r.counts["skipped"] == r.counts["planned"]
    assert r.counts["skipped"] >= len(present)
    assert len(set(target_files(Storage(target))) - {"_latest_hint.txt"}) == r.counts["planned"]
    assert contents(target) == contents(lh.uri, v)


def test_an_exception_inside_a_worker_names_the_part(tmp_path):
    from trinitylake.jobs.export.copy_workers import CopyWorkers

    # A setup the worker cannot use (no such plan part under the export folder).
    src, tgt = Storage(str(tmp_path / "s")), Storage(str(tmp_path / "t"))
    with CopyWorkers(2) as pool, \
            pytest.raises(StorageError, match=r"plan part part-0000[01]\.parquet: FileNotFoundError"):
        pool.map(["part-00000.parquet", "part-00001.parquet"], (src, tgt, None, "_export/none", True, False))


def test_small_copies_stay_on_the_driver_threads(tmp_path, monkeypatch):
    monkeypatch.setattr(E.os, "cpu_count", lambda: 2)
    src, tgt = Storage(str(tmp_path / "s")), Storage(str(tmp_path / "t"))
    assert E.copy_processes(E.LOCAL_PROCESS_MIN_FILES - 1, 10, src, tgt) == 0
    assert E.copy_processes(E.LOCAL_PROCESS_MIN_FILES, 10, src, tgt) == 2
    assert E.copy_processes(E.LOCAL_PROCESS_MIN_FILES, 1, src, tgt) == 0
    monkeypatch.setattr(E.os, "cpu_count", lambda: 1)
    assert E.copy_processes(E.LOCAL_PROCESS_MIN_FILES, 10, src, tgt) == 0
    monkeypatch.setattr(E.os, "cpu_count", lambda: 64)
    assert E.copy_processes(10**6, 1000, src, tgt) == E.LOCAL_PROCESSES_MAX
    # Started early, during planning, once the plan is expected to be big; never for a small one.
    monkeypatch.setattr(E.os, "cpu_count", lambda: 2)
    early = E._Workers(src, tgt, allowed=True)
    try:
        early.expect(E.LOCAL_PROCESS_MIN_FILES - 1)
        assert early.pool is None
        early.expect(E.LOCAL_PROCESS_MIN_FILES)
        assert early.pool is not None and early.pool.size == 2
    finally:
        early.close()
    assert early.pool is None
    never = E._Workers(src, tgt, allowed=False)
    never.expect(10**6)
    assert never.pool is None


def test_storage_faults_reach_the_copy_workers(run, make_lakehouse, tmp_path, processes):
    """Faults injected at the storage (transient, some after the create took effect) reach the
    worker processes, whose storage retries them: the export is exact."""
    from tests.support.faults import FaultSpec, count_logged, injected

    lh = make_lakehouse()
    v = populate(lh)
    log_dir = str(tmp_path / "faults")
    spec = FaultSpec(transient_rate=0.2, after_share=0.3, max_consecutive=2, ops=("read", "create_exclusive", "info"),
                     seed=4, log_dir=log_dir)
    with injected(spec):
        r = run(lh, str(tmp_path / "t"), "f", version=v, batch_size=4)
    assert r.details["copy_processes"] == 2
    pids = {int(n[len("faults-"):-len(".log")]) for n in os.listdir(log_dir)}
    assert pids - {os.getpid()}, "faults were injected in the copy worker processes"
    assert count_logged(log_dir)["total"] > 0
    assert contents(str(tmp_path / "t")) == contents(lh.uri, v)


@pytest.mark.parametrize("executable", ["", "/nonexistent/bin/python"])
def test_no_worker_process_can_start_so_the_driver_threads_copy(run, make_lakehouse, tmp_path, processes,
                                                               monkeypatch, executable):
    # An embedded interpreter (no sys.executable) or a missing one: the copy stays on threads.
    lh = make_lakehouse()
    v = populate(lh)
    monkeypatch.setattr(sys, "executable", executable)
    r = run(lh, str(tmp_path / "t"), "n", batch_size=4)
    assert r.status != "failed" and "copy_processes" not in r.details
    assert r.counts["copied"] == r.counts["planned"]
    assert contents(str(tmp_path / "t")) == contents(lh.uri, v)


@pytest.mark.spark
def test_auto_copies_a_big_plan_in_worker_processes_when_the_executors_share_the_driver(
    run, make_lakehouse, tmp_path, processes
):
    """Big enough for the executors by size, but a ``local[N]`` master has no other cores: the
    plan is written by Spark, the copy by the driver machine's worker processes."""
    from trinitylake.spark.execution import Limits

    lh = make_lakehouse()
    v = populate(lh)
    r = run(lh, str(tmp_path / "t"), "a", version=v, batch_size=4, execution="auto",
            limits=Limits(local_max_items=2))
    assert r.details["execution"]["export.write_plan"]["where"] == "distributed"  # Spark did start
    assert r.details["execution"]["export.copy"]["where"] == "local" and r.details["copy_processes"] == 2
    assert contents(str(tmp_path / "t")) == contents(lh.uri, v)
    # `distributed` means what it says: the executors copy.
    d = run(lh, str(tmp_path / "d"), "d", version=v, batch_size=4, execution="distributed")
    assert d.details["execution"]["export.copy"]["where"] == "distributed" and "copy_processes" not in d.details
    assert _tree(tmp_path / "t") == _tree(tmp_path / "d")


@pytest.mark.spark
def test_only_a_started_classic_local_session_shares_the_driver(spark):
    from trinitylake.spark.execution import Execution

    assert Execution("auto", session_factory=lambda: spark).executors_share_the_driver() is False  # not started
    assert Execution("auto", spark=spark).executors_share_the_driver() is True  # the tests' local[2]

    class Cluster:  # a classic session on a cluster master answers like this
        class conf:  # noqa: N801
            @staticmethod
            def get(key, default=None):
                return "yarn" if key == "spark.master" else default

    assert Execution("auto", spark=Cluster()).executors_share_the_driver() is False


@pytest.mark.spark
def test_a_spark_connect_session_keeps_the_copy_on_its_executors(connect_spark):
    from trinitylake.spark.execution import Execution

    # Its server (and so its executors) may run anywhere, whatever master it reports.
    assert Execution("auto", spark=connect_spark).executors_share_the_driver() is False
