"""Export placement (driver threads vs Spark executors), single reads of source files, and resume
after an injected failure copying only what is missing."""

from __future__ import annotations

import hashlib
import os

import pytest

from tests.support.faults import FaultSpec, injected
from trinitylake.jobs.export.job import run_export
from trinitylake.runs.results import JobResult
from trinitylake.spark.execution import Execution
from trinitylake.storage import Storage

from .conftest import contents, export_cfg, latest_def, populate, reachable, root_files, target_files


def _tree(path) -> dict[str, str]:
    """Every file under `path` except the export's bookkeeping: relative path -> MD5."""
    out = {}
    for dirpath, _, files in os.walk(path):
        for f in files:
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, path)
            if not rel.startswith("_export"):
                with open(full, "rb") as fh:
                    out[rel] = hashlib.md5(fh.read()).hexdigest()
    return out


@pytest.mark.spark
@pytest.mark.parametrize(("mode", "depth"), [("full", None), ("partial", 1)])
def test_local_and_distributed_exports_write_identical_trees(run, make_lakehouse, tmp_path, mode, depth):
    lh = make_lakehouse()
    v = populate(lh)
    kw = {"mode": mode, "depth": depth} if depth is not None else {"mode": mode}

    a = run(lh, str(tmp_path / "local"), "a", version=v, execution="local", **kw)
    b = run(lh, str(tmp_path / "dist"), "b", version=v, execution="distributed", batch_size=4, **kw)

    assert {p["where"] for k, p in a.details["execution"].items() if k != "export.validate"} == {"local"}
    assert b.details["execution"]["export.copy"]["where"] == "distributed"
    assert b.details["execution"]["export.plan_nodes"]["where"] == "distributed"
    assert b.details["execution"]["export.write_plan"]["where"] == "distributed"
    ta, tb = _tree(tmp_path / "local"), _tree(tmp_path / "dist")
    assert ta == tb and len(ta) > 5
    for k in ("planned", "copied", "verified", "rewritten", "external_refs", "source_reads"):
        assert a.counts[k] == b.counts[k], k
    assert a.bytes["copied"] == b.bytes["copied"]
    assert contents(str(tmp_path / "dist")) == contents(lh.uri, v)


def test_small_export_in_auto_mode_never_starts_spark(make_lakehouse, tmp_path):
    from trinitylake.config import load_job_config
    from trinitylake.jobs.runner import run_job

    lh = make_lakehouse()
    populate(lh, namespaces=1, tables=3, alters=0, drops=0)
    cfg = load_job_config("export", overrides={"lakehouse": lh.uri, "name": "auto1", "target": str(tmp_path / "t"),
                                               "master": "no-such-master"}, env={})
    r = run_job("export", cfg, audit=False)
    assert r.status == "succeeded" and r.details["spark"]["started"] is False
    assert {p["where"] for p in r.details["execution"].values()} == {"local"}
    assert set(r.seconds) >= {"validate", "plan", "copy", "verify", "commit", "total"}


def test_an_export_reads_each_source_file_once(make_lakehouse, tmp_path, monkeypatch):
    from trinitylake.storage import storage as storage_mod
    from trinitylake.storage.uri import parse_uri

    lh = make_lakehouse()
    v = populate(lh)
    walked = reachable(lh, v)
    reach = walked.paths()
    src_root = parse_uri(lh.storage.root).fs_path
    reads: dict[str, int] = {}
    original = storage_mod.Storage._io

    def counting(self, op, path, fn, *args):
        if op == "read" and args and isinstance(args[0], str) and args[0].startswith(src_root + "/"):
            rel = args[0][len(src_root) + 1:]
            reads[rel] = reads.get(rel, 0) + 1
        return original(self, op, path, fn, *args)

    monkeypatch.setattr(storage_mod.Storage, "_io", counting)

    cfg = export_cfg(lh, str(tmp_path / "t"), "once", version=v)
    r = run_export(Execution("local"), lh, cfg, JobResult("export", cfg.run_id, lh.uri))

    assert r.counts["copied"] == len(reach)
    # The root and the lakehouse definition are also read by validation (through the Lakehouse
    # API: the latest version, the definition); every other file exactly once: node files when
    # planned (the plan carries their exported bytes), definition files when copied.
    others = walked.paths("node") | walked.paths("definition")
    assert others and {p: reads.get(p, 0) for p in others} == dict.fromkeys(others, 1)
    assert r.counts["source_reads"] == sum(1 for p in others if p.endswith(".binpb")) + 1  # + the definition


def test_resume_after_an_injected_copy_failure_copies_only_what_is_missing(run, make_lakehouse, tmp_path):
    lh = make_lakehouse()
    v = populate(lh)
    target = str(tmp_path / "t")
    spec = FaultSpec(permanent_paths=r"-[^/]*\.binpb$", permanent_ops=("create_exclusive",), seed=1)

    # Definition-file creates are refused: the nodes land, the export fails with a typed error
    # and publishes nothing.
    from trinitylake.errors import StorageError

    with injected(spec), pytest.raises(StorageError, match="failed"):
        run(lh, target, "r1", batch_size=4)
    tgt = Storage(target)
    assert root_files(tgt) == [] and "r1" not in latest_def(lh).exported_snapshots
    before = {p: os.stat(os.path.join(target, p)).st_mtime_ns for p in target_files(tgt)}
    assert before and all(p.endswith(".arrow") for p in before)

    r = run(lh, target, "r1", batch_size=4)

    assert r.details["resumed"] is True and r.details["version"] == v
    reach = reachable(lh, v).paths()
    assert r.counts["planned"] == len(reach)
    assert r.counts["copied"] == len(reach) - len(before)  # only what was missing
    assert r.counts["skipped"] == len(before)
    assert all(os.stat(os.path.join(target, p)).st_mtime_ns == t for p, t in before.items())
    assert contents(target) == contents(lh.uri, v)
    # Every part is manifested now: a third run verifies at the target and reads no source file.
    r3 = run(lh, target, "r1", batch_size=4)
    assert r3.counts["copied"] == 0 and r3.counts["source_reads"] == 0 and r3.counts["skipped"] == len(reach)


def test_local_crash_mid_part_is_invisible_and_resumable(run, make_lakehouse, tmp_path):
    """The export's own process (the driver's copy threads) SIGKILLed right after its third
    target file: the files copied stay, nothing is visible, a re-run finishes."""
    import subprocess
    import sys

    lh = make_lakehouse()
    v = populate(lh)
    target = str(tmp_path / "t")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((root, os.environ.get("PYTHONPATH", "")))}
    proc = subprocess.run([sys.executable, "-m", "tests.support.killer", "--op", "create_exclusive", "--nth", "3",
                           "--when", "after", "--root", Storage(target).root, "export", "--lakehouse", lh.uri,
                           "--execution", "local", "--name", "c1", "--target", target, "--version", str(v),
                           "--control-uri", str(tmp_path / "control")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, f"the export was not killed (rc {proc.returncode}): {proc.stderr[-3000:]}"
    tgt = Storage(target)
    half = target_files(tgt)
    assert half and root_files(tgt) == [] and "c1" not in latest_def(lh).exported_snapshots
    r = run(lh, target, "c1")
    assert r.details["resumed"] and r.counts["skipped"] == len(half)
    assert r.counts["copied"] == r.counts["planned"] - len(half)
    assert contents(target) == contents(lh.uri, v)


@pytest.mark.slow  # starts a local Spark Connect server (~20-60 s on a loaded 2-core machine)
@pytest.mark.spark
def test_distributed_export_under_spark_connect_matches_a_local_one(make_lakehouse, tmp_path):
    import json
    import subprocess
    import sys

    pytest.importorskip("grpc")
    lh = make_lakehouse()
    v = populate(lh, namespaces=1, tables=5, alters=1, drops=0)
    tlake = os.path.join(os.path.dirname(sys.executable), "tlake")
    base = [tlake, "--lakehouse", lh.uri, "--no-audit", "export", "--version", str(v), "--json"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    local = subprocess.run([*base, "--name", "l", "--target", str(tmp_path / "l"), "--execution", "local"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert local.returncode == 0, local.stderr[-2000:]
    conn = subprocess.run([*base, "--name", "c", "--target", str(tmp_path / "c"), "--execution", "distributed",
                           "--master", "local[2]", "--spark-conf", "spark.api.mode=connect",
                           "--spark-conf", "spark.ui.enabled=false"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert conn.returncode == 0, conn.stderr[-2000:]
    r = json.loads(conn.stdout[conn.stdout.index("{"):])
    assert r["details"]["spark"]["mode"] == "connect"
    assert {p["where"] for k, p in r["details"]["execution"].items() if k != "export.validate"} == {"distributed"}
    assert _tree(tmp_path / "l") == _tree(tmp_path / "c")


@pytest.mark.spark
def test_node_bytes_held_by_the_plan_count_against_the_driver_bound(make_lakehouse, tmp_path, monkeypatch, request):
    # The plan keeps node files' bytes (the copy writes them without reading them again): in
    # auto mode they weigh on the driver bound as rows of ROW_BYTES each, so a plan of few rows
    # but many node bytes hands its remaining levels to the executors.
    from trinitylake.jobs.export import planner as export_planner
    from trinitylake.spark.execution import Limits

    lh = make_lakehouse()
    v = populate(lh)

    def go(name: str, row_bytes: int) -> dict:
        monkeypatch.setattr(export_planner, "ROW_BYTES", row_bytes)
        cfg = export_cfg(lh, str(tmp_path / name), name, version=v)
        result = JobResult(job="export", run_id=cfg.run_id, lakehouse=lh.uri)
        record: dict = {}
        result.details["execution"] = record
        ex = Execution("auto", session_factory=lambda: request.getfixturevalue("spark"), record=record,
                       limits=Limits(driver_max_rows=2000))
        run_export(ex, lh, cfg, result)
        assert result.status != "failed"
        return record

    light = go("light", 10**9)
    assert light["export.plan_nodes"]["where"] == "local"
    heavy = go("heavy", 1)
    assert heavy["export.plan_nodes"]["where"] != "local"
    assert _tree(tmp_path / "light") == _tree(tmp_path / "heavy")


def test_a_new_local_target_is_marked_to_spread_its_prefix_folders(run, make_lakehouse, tmp_path, monkeypatch):
    from trinitylake.storage import dir_spread

    marked: list[str] = []
    real = dir_spread.spread_subdirectories
    flags = _has_flags(tmp_path)  # probed before the spy is in place

    def spy(path):
        marked.append(path)
        return real(path)

    monkeypatch.setattr(dir_spread, "spread_subdirectories", spy)
    lh = make_lakehouse()
    v = populate(lh, namespaces=1, tables=3, alters=0, drops=0)
    target = tmp_path / "new"
    run(lh, str(target), "a", version=v)
    assert marked == [str(target)]
    # The mark is on the folder itself, before any subfolder was made in it (where the
    # filesystem has such flags: ext2/3/4; elsewhere the export is the same without it).
    assert dir_spread.topdir_flag(str(target)) is (True if flags else None)
    assert _tree(target)
    # A target that already holds exports (a resume, a second export) is left as it is.
    run(lh, str(target), "b", version=v)
    assert marked == [str(target)]


def _has_flags(path) -> bool:
    from trinitylake.storage import dir_spread

    probe = path / "probe"
    return dir_spread.spread_subdirectories(str(probe))


@pytest.mark.spark
def test_the_executors_plan_writer_merges_duplicates_across_its_inputs(spark, tmp_path):
    """Rows of one file arriving from several inputs (the driver's rows, node levels, definition
    files referenced by several nodes) end as one row of one part: the parts are cut by target."""
    import pyarrow as pa

    from trinitylake import rowsets
    from trinitylake.jobs.export import plan as XP
    from trinitylake.jobs.export import rules as X
    from trinitylake.jobs.export.planner import LEVEL_SCHEMA, Planner
    from trinitylake.spark.execution import ddl

    src, tgt = Storage(str(tmp_path / "src")), Storage(str(tmp_path / "tgt"))
    spec = X.ExportSpec.make(name="dups", version=1, mode="full", depth=None, source_uri=src.root,
                             target_uri=tgt.root, source_id="id", order=4)
    planner = Planner(Execution("distributed", spark=spark), src, tgt, spec, "plan", batch=3, io_threads=1)

    held = [("odf", f"d{i}.binpb", X.KIND_ODF, 1, X.ACTION_COPY, -1, "", 0, None, None) for i in range(6)]
    level = [("odf", f"d{i}.binpb", X.KIND_ODF, 2 + i % 2, X.ACTION_COPY, -1, "", 0, None, None) for i in range(6)]
    level += [("odf", "e.binpb", X.KIND_ODF, d, X.ACTION_COPY, -1, "", 0, None, None) for d in (5, 3, 4)]
    level += [("node", "e.binpb", X.KIND_NODE, 7, X.ACTION_COPY, 4, "0" * 32, 0, b"abcd", None)]
    table = pa.table([list(c) for c in zip(*held, *level, strict=True)], schema=LEVEL_SCHEMA)
    upper = len(held) + len(level)
    # The same write wherever the rows are: on the executors (a driver part and a level's part,
    # as the levels leave them), and the same rows on the driver.
    on_executors = rowsets.chain([rowsets.driver(planner.ex, table.slice(0, len(held))),
                                  rowsets.executors(planner.ex, spark.createDataFrame(table.slice(len(held)),
                                                                                     schema=ddl(LEVEL_SCHEMA)))])
    for rows_in, plan_dir in ((on_executors, "plan"), (rowsets.driver(planner.ex, table), "plan-driver")):
        planner.plan_dir = plan_dir
        index = planner._write(rows_in, upper)
        rows = [r for p in index["parts"] for r in XP.read_plan_part(tgt.read(f"{plan_dir}/{p['name']}"))]
        assert sorted((r.target, r.kind, r.depth) for r in rows) == sorted(
            [(f"d{i}.binpb", X.KIND_ODF, 1) for i in range(6)] + [("e.binpb", X.KIND_NODE, 7)])
        assert {r.source for r in rows} == {src.uri(r.target) for r in rows}
        assert index["files"] == 8 and sum(p["rows"] for p in index["parts"]) == 7
        assert len({p["name"] for p in index["parts"]}) == len(index["parts"])
