"""The object-store benchmark's ratios compare timings of one run only (bench/bench_objstore.py)."""

from __future__ import annotations

import pytest

from bench.bench_objstore import MixedRunsError, Timing, placement_ratios, same_run_ratio


def _row(run_id: str, execution: str, wall: float, ok: bool = True, job: str = "export") -> dict:
    return {"run_id": run_id, "delay_ms": 100.0, "job": job, "execution": execution, "ok": ok, "wall_s": wall}


def test_same_run_ratio_refuses_timings_of_two_runs() -> None:
    assert same_run_ratio(Timing("r1", "a", 30.0), Timing("r1", "b", 10.0)) == 3.0
    with pytest.raises(MixedRunsError, match="r1.*r2"):
        same_run_ratio(Timing("r1", "a", 30.0), Timing("r2", "b", 10.0))


def test_placement_ratios_of_one_run() -> None:
    rows = [_row("r1", "local", 300.0), _row("r1", "distributed", 100.0), _row("r1", "auto", 120.0)]
    ratios, refused = placement_ratios(rows)
    assert refused == []
    assert ratios == {
        "100 ms, export: wall time local / distributed (>1: executors faster)": 3.0,
        "100 ms, export: wall time auto / faster placement (distributed)": 1.2,
    }


def test_placement_ratios_refuse_rows_merged_from_another_run() -> None:
    # --merge kept the earlier run's local row; the new run measured distributed and auto.
    rows = [_row("old", "local", 300.0), _row("new", "distributed", 100.0), _row("new", "auto", 90.0),
            _row("new", "local", 5.0, job="walk"), _row("new", "distributed", 50.0, job="walk")]
    ratios, refused = placement_ratios(rows)
    assert list(ratios) == ["100 ms, walk: wall time local / distributed (>1: executors faster)"]
    assert ratios["100 ms, walk: wall time local / distributed (>1: executors faster)"] == 0.1
    assert len(refused) == 1 and "export" in refused[0] and "old" in refused[0] and "new" in refused[0]


def test_failed_runs_give_no_ratio() -> None:
    rows = [_row("r1", "local", 300.0), _row("r1", "distributed", 100.0, ok=False)]
    assert placement_ratios(rows) == ({}, [])


def test_the_acceptance_build_of_s3s_fs_counts_with_both_patches(tmp_path, monkeypatch) -> None:
    from bench import objstore

    cache = tmp_path / "s3s"
    (cache / "bin").mkdir(parents=True)
    exe = cache / "bin" / "s3s-fs"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.delenv("TLAKE_S3S_FS", raising=False)
    monkeypatch.setattr(objstore, "SHARED_CACHE", cache)
    (cache / "patched").write_text("")  # objstore.sh after the empty-delimiter patch
    assert objstore.find_s3s(tmp_path / "none") is None
    assert objstore.find_s3s(tmp_path / "none", need=frozenset({"empty-delimiter"})) == exe
    (cache / "patched2").write_text("")  # ... and after the prefix-listing one
    assert objstore.find_s3s(tmp_path / "none") == exe


def test_go_tools_come_from_one_cache(tmp_path, monkeypatch) -> None:
    import os

    from bench import objstore

    shared, own = tmp_path / "shared", tmp_path / "own"
    monkeypatch.setattr(objstore, "SHARED_GOTOOLS", shared)
    for cache, names in ((shared, ("s5cmd", "latproxy")), (own, ("s5cmd",))):
        (cache / "bin").mkdir(parents=True)
        for n in names:
            (cache / "bin" / n).write_text("")
            (cache / "bin" / n).chmod(0o755)
    assert objstore.find_gotools(own) == {n: shared / "bin" / n for n in ("s5cmd", "latproxy")}
    (own / "bin" / "latproxy").write_text("")
    (own / "bin" / "latproxy").chmod(0o755)
    assert objstore.find_gotools(own)["latproxy"] == own / "bin" / "latproxy"
    assert objstore.process_cpu_seconds(os.getpid()) > 0
    assert objstore.process_cpu_seconds(None) is None


def test_store_files_go_to_tmpfs_when_the_machine_has_one(tmp_path, monkeypatch) -> None:
    """The latency store's objects on tmpfs: a folder of its own there, removed after; on a
    machine without one (or asked for disk), the fallback folder, kept."""
    import bench.objstore as objstore

    shm = tmp_path / "shm"
    shm.mkdir()
    mounts = tmp_path / "mounts"
    mounts.write_text(f"tmpfs {shm} tmpfs rw,nosuid 0 0\n/dev/vda / ext4 rw 0 0\n")
    real_open = open
    monkeypatch.setattr(objstore, "MEMORY_MOUNT", shm)
    monkeypatch.setattr("builtins.open", lambda f, *a, **k: real_open(mounts if f == "/proc/mounts" else f, *a, **k))
    assert objstore.memory_backed(shm)
    assert not objstore.memory_backed(tmp_path)
    with objstore.store_files_dir(tmp_path / "fallback") as (where, kind):
        assert (kind, where.parent) == ("tmpfs", shm)
        (where / "bucket").mkdir()
    assert not where.exists()
    with objstore.store_files_dir(tmp_path / "fallback", "disk") as (where, kind):
        assert (kind, where) == ("disk", tmp_path / "fallback")
    mounts.write_text("/dev/vda / ext4 rw 0 0\n")
    with objstore.store_files_dir(tmp_path / "fallback") as (where, kind):
        assert (kind, where) == ("disk", tmp_path / "fallback")
