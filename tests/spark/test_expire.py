"""Expiration and orphan cleanup on real local Spark: every retained version reads the same,
only unreachable files go, a killed run is finished by a re-run, unsafe inputs are refused.

Every expected set (the versions to expire, the files that must go, what stays live, what each
retained version holds) comes from the independent oracle (`tests.oracle.expect`), with the
oracle's own choice of listed, retained and live versions."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pytest

from tests.maintenance.helpers import build_history, snapshot, write_minimal_export
from tests.oracle import expect as E
from tests.spark.conftest import TTL_MS, job_config, orphan_names, owned_files, plant, reach, run
from trinitylake.control import ControlTable
from trinitylake.errors import StorageError, UnsafeOperationError, VersionNotFoundError
from trinitylake.format.paths import root_name
from trinitylake.jobs.runner import JobFailedError, run_job
from trinitylake.lakehouse import Lakehouse
from trinitylake.spark.output import read_parquet_table

pytestmark = pytest.mark.spark
DAY_S = 86_400
EXPIRE = {"max_version_age": 0, "clock_skew_margin": 0}


def _expected_expiry(lh, keep: int | None = None, below: int | None = None) -> tuple[list[int], set[str]]:
    """(expired versions, files that must go), by the oracle: of the versions it lists as kept
    (committed floor to latest), all but the newest `keep`, or those below `below`; the files
    they reach that no other live root (retained version, pin, recorded export) reaches."""
    o = E.oracle_of(lh)
    versions = E.kept_versions(o)
    expired = versions[:-keep] if keep is not None else [v for v in versions if below is not None and v < below]
    return expired, E.expired_files(o, expired)


def _commit_files(lh, version: int) -> set[str]:
    """The files a commit of `version` adds, by the oracle: its root and its lakehouse definition."""
    o = E.oracle_of(lh)
    w = E.walk(o, [(version, f"{o.root}/{root_name(version)}")], sizes=False)
    return w.paths("root") | w.paths("lakehouse_def")


def _contents(lh, versions) -> dict[int, dict[str, bytes]]:
    """What each version holds by the oracle: every merged key with its definition's bytes."""
    return {v: E.version_contents(lh.uri, v) for v in versions}


def test_expire_then_orphans_keep_every_retained_version_readable(spark, tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=21, ops=45)
    pin = lh.latest_version() - 8
    export_loc = write_minimal_export(lh, pin, str(tmp_path / "exports" / "e1"), "e1")
    build_history_tail = lh.latest_version()
    assert build_history_tail > pin + 5
    time.sleep(TTL_MS / 1000 + 0.2)
    before_files = owned_files(lh.storage)
    before = snapshot(lh)
    retained_versions = [v for v in E.kept_versions(E.oracle_of(lh)) if v >= pin]
    before_contents = _contents(lh, retained_versions)
    expired, must_go = _expected_expiry(lh, below=pin)
    assert expired and must_go - {root_name(v) for v in expired}, "the history must leave exclusive files behind"

    # Dry run: the plan and its candidates, nothing committed, nothing deleted.
    dry = run(spark, "expire", lh, dry_run=True, min_versions_to_keep=2, **EXPIRE)
    assert dry.status == "dry_run" and lh.latest_version() == build_history_tail
    assert owned_files(lh.storage) == before_files
    assert dry.counts["versions_expired"] == len(expired) and "pinned by export 'e1'" in dry.details["stop_reason"]
    plan = json.loads(lh.storage.read(f"_maintenance/expire/{dry.run_id}/plan.json"))
    assert plan["plan"]["expired"] == expired and plan["new_oldest_retained"] == pin
    listed = set(read_parquet_table(dry.output_location).column("path").to_pylist())
    assert listed == must_go and dry.counts["candidates"] == len(must_go)

    # The real run commits first, then deletes exactly the files only expired versions reached.
    res = run(spark, "expire", lh, min_versions_to_keep=2, **EXPIRE)
    assert res.status == "succeeded" and res.counts["deleted"] == len(must_go) and res.counts["failed"] == 0
    assert res.version_after == build_history_tail + 1
    lh = Lakehouse.open(lh.uri, audit=False)
    o = E.oracle_of(lh)
    assert E.floor(o) == pin and E.latest_version(o) == res.version_after
    assert E.kept_versions(o) == [*retained_versions, res.version_after]
    assert not set(expired) & set(o.listed_versions())
    after_files = owned_files(lh.storage)
    assert before_files - after_files == must_go
    assert after_files - before_files == _commit_files(lh, res.version_after)
    assert _contents(lh, retained_versions) == before_contents
    assert snapshot(lh, range(pin, build_history_tail + 1)) == {v: before[v] for v in range(pin, build_history_tail + 1)}
    for v in expired:
        with pytest.raises(VersionNotFoundError):
            lh.load_root(v)
    # The export's source files survive: the export still reads through to the source.
    assert E.walk(o, [(pin, export_loc)]).missing == []
    assert E.export_contents(lh.uri, "e1") == before_contents[pin]

    # Orphans: old unreferenced format-owned files go; young, foreign and control files stay.
    names = orphan_names()
    ages = {names["node"]: 40 * DAY_S, names["def"]: 40 * DAY_S, names["ldef"]: 40 * DAY_S, names["young"]: None,
            "notes/README.txt": 40 * DAY_S, "0110/0000/1011/01111000-readme.txt": 40 * DAY_S,
            "_maintenance/manual/" + names["node"]: 40 * DAY_S}
    planted = plant(lh.storage, ages)
    orph = run(spark, "orphans", lh)
    assert orph.status == "succeeded"
    final_files = owned_files(lh.storage)
    o = E.oracle_of(lh)
    assert [u for v, u in E.live_entries(o) if u == export_loc] == [export_loc], "the export is live"
    retained = E.live_walk(o, sizes=False).paths()
    assert final_files == (retained & final_files) | {planted[names["young"]]}
    assert retained <= final_files | {export_loc}
    for key in ("node", "def", "ldef"):
        assert planted[names[key]] not in final_files
    for foreign in ("notes/README.txt", "0110/0000/1011/01111000-readme.txt", "_maintenance/manual/" + names["node"]):
        assert lh.storage.exists(planted[foreign])
    assert orph.counts["deleted"] == orph.counts["candidates"] >= 3 and orph.counts["too_young"] >= 1
    assert snapshot(lh, range(pin, build_history_tail + 1)) == {v: before[v] for v in range(pin, build_history_tail + 1)}
    assert _contents(lh, retained_versions) == before_contents


def test_an_expiration_killed_mid_delete_is_finished_by_a_rerun(spark, tmp_path):
    """The production delete on the executors (threaded `delete_task`), whose Python worker is
    SIGKILLed half-way through a delete batch: the job fails, the files deleted stay deleted,
    and a re-run finishes the work."""
    from tests.support.faults import FaultSpec, in_spark_workers, kill_pids

    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=5, ops=40)
    time.sleep(TTL_MS / 1000 + 0.2)
    expired, must_go = _expected_expiry(lh, keep=5)
    kept = E.kept_versions(E.oracle_of(lh))[-5:]
    keep_from, latest = kept[0], kept[-1]
    # (This history's versions hold a delete message, in a child's buffer, for the key that is
    # the separator above that child: a deleted separator's replacement, which the oracle reads
    # as the library does, the parent's entry winning.)
    before = _contents(lh, range(keep_from, latest + 1))
    before_files = owned_files(lh.storage)

    # The first executor worker to delete dies (SIGKILL) after the first half of its first
    # batch of two files: the deepest level is partly deleted.
    kill = FaultSpec(kill_op="delete", kill_nth=1, kill_when="half", kill_token=str(tmp_path / "killed"))
    with in_spark_workers(spark, kill, str(tmp_path / "faults")) as log_dir, pytest.raises(JobFailedError) as err:
        run(spark, "expire", lh, min_versions_to_keep=5, delete_batch_size=2, execution="distributed", **EXPIRE)
    assert isinstance(err.value.__cause__, StorageError) and "delete job" in str(err.value.__cause__)
    killed = kill_pids(log_dir)
    assert len(killed) == 1 and os.getpid() not in killed, "one executor worker was really killed"
    lh = Lakehouse.open(lh.uri, audit=False)
    assert E.floor(E.oracle_of(lh)) == keep_from, "the expiration was committed first"
    partial = before_files - owned_files(lh.storage)
    assert partial and partial < must_go, "some, not all, of the files were deleted"
    assert set(expired) <= set(E.oracle_of(lh).listed_versions()), "roots are deleted last"
    assert _contents(lh, range(keep_from, latest + 1)) == before

    # The re-run sees the leftover roots, walks them again (skipping what is gone) and finishes.
    # (One more version to keep: the first run's commit is a version too.)
    res = run(spark, "expire", lh, min_versions_to_keep=6, delete_batch_size=2, execution="distributed", **EXPIRE)
    assert res.status == "succeeded" and res.counts["versions_leftover"] == len(expired)
    assert res.counts["versions_expired"] == 0, "nothing new to commit"
    after_files = owned_files(lh.storage)
    assert before_files - after_files == must_go
    assert after_files - before_files == _commit_files(lh, latest + 1)
    assert _contents(lh, range(keep_from, latest + 1)) == before
    assert E.kept_versions(E.oracle_of(lh)) == [*kept, latest + 1]


def test_an_unreadable_retained_node_stops_the_expiration_before_it_commits(spark, tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=8, ops=16)
    time.sleep(TTL_MS / 1000 + 0.2)
    latest = E.latest_version(E.oracle_of(lh))
    node = sorted(reach(lh, [latest]).paths("node"))[0]
    path = os.path.join(lh.storage.root[len("file://"):], node)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    files = owned_files(lh.storage)
    with pytest.raises(JobFailedError) as err:
        run(spark, "expire", lh, min_versions_to_keep=1, **EXPIRE)
    assert isinstance(err.value.__cause__, UnsafeOperationError)
    assert "nothing was committed or deleted" in str(err.value) and node.rsplit("/", 1)[-1] in str(err.value)
    assert E.latest_version(E.oracle_of(lh)) == latest and owned_files(lh.storage) == files


def test_nothing_to_expire_is_audited_and_compacts_the_control_table(spark, tmp_path):
    uri = str(tmp_path / "lh")
    lh = Lakehouse.create(uri, order=4, node_max_bytes=4096)
    lh.create_namespace("a")
    cfg = job_config("expire", uri, run_id="expire-audit-1")
    res = run_job("expire", cfg, spark=spark)
    assert res.status == "succeeded" and res.counts["versions_expired"] == 0 and res.counts["deleted"] == 0
    assert isinstance(res.details["control_compaction"], dict)
    rows = [r for r in ControlTable(uri + "/_control").records() if r.txn_id == "expire-audit-1"]
    assert [r.record_type for r in rows] == ["begin", "read"]
    assert rows[0].txn_seq == rows[1].txn_seq == res.txn_seq


def _copy_lakehouse(src: str, dst: str) -> str:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_local_and_distributed_expire_delete_the_same_files_as_the_reference(spark, tmp_path):
    """The same lakehouse (two byte-identical copies) expired with every phase on the driver
    and with every phase on the executors: the same files go, exactly what the oracle says only
    the expired versions reach, and nothing a retained version reaches. The local run never
    starts Spark."""
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=34, ops=40)
    time.sleep(TTL_MS / 1000 + 0.2)
    expired, must_go = _expected_expiry(lh, keep=6)
    kept = E.kept_versions(E.oracle_of(lh))[-6:]
    keep_from, latest = kept[0], kept[-1]
    retained_reach = E.version_files(E.oracle_of(lh), kept)
    assert expired and must_go - {root_name(v) for v in expired}, "the history must leave exclusive files behind"
    before = snapshot(lh, range(keep_from, latest + 1))
    before_contents = _contents(lh, kept)
    files = owned_files(lh.storage)

    deleted = {}
    # "handover": auto with a tiny threshold, so the walks start on the driver and hand their
    # deeper levels to the executors (candidates then live in DataFrames).
    modes = {"local": {"execution": "local"}, "distributed": {"execution": "distributed"},
             "handover": {"execution": "auto", "local_max_items": 6}}
    for mode, opts in modes.items():
        uri = _copy_lakehouse(lh.storage.root[len("file://"):], str(tmp_path / f"lh-{mode}"))
        cfg = job_config("expire", uri, min_versions_to_keep=6, **opts, **EXPIRE)
        # Local: no session handed in, so any use of Spark would start one (and show below).
        res = run_job("expire", cfg, spark=None if mode == "local" else spark, audit=False)
        assert res.status == "succeeded" and res.counts["failed"] == 0, res.error
        assert res.counts["versions_expired"] == len(expired)
        placement = res.details["execution"]
        if mode == "local":
            assert res.details["spark"]["started"] is False
            assert res.details["candidates_where"] == "local"
            assert {e["where"] for e in placement.values()} == {"local"}, placement
        elif mode == "handover":
            assert res.details["candidates_where"] == "distributed"
            walks = {e["where"] for k, e in placement.items() if k.endswith(".read_nodes")}
            assert walks - {"local"} and walks & {"local", "mixed"}, placement
        else:
            assert res.details["candidates_where"] == "distributed"
            assert placement["walk_retained.read_nodes"]["where"] == "distributed"
            assert placement["walk_expired.read_nodes"]["where"] == "distributed"
            assert placement["delete"]["where"] == "distributed"
        for phase in ("plan", "walk_retained", "walk_expired", "write_plan", "commit", "walk_new", "delete"):
            assert phase in res.seconds, (phase, res.seconds)
        lh_m = Lakehouse.open(uri, audit=False)
        after = owned_files(lh_m.storage)
        deleted[mode] = files - after
        assert after - files == _commit_files(lh_m, latest + 1)
        assert res.counts["deleted"] == len(must_go)
        listed = set(read_parquet_table(res.output_location).column("path").to_pylist())
        assert listed == must_go
        assert snapshot(lh_m, range(keep_from, latest + 1)) == before
        assert _contents(lh_m, kept) == before_contents
        o_m = E.oracle_of(lh_m)
        assert E.kept_versions(o_m) == [*kept, latest + 1]
        assert E.live_walk(o_m).missing == [], "every retained version's files are still there"
    assert deleted["local"] == deleted["distributed"] == deleted["handover"] == must_go
    assert not must_go & retained_reach, "nothing reachable from a retained version is deleted"


def test_auto_expire_of_a_small_lakehouse_never_starts_spark(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=3, ops=20)
    latest = E.latest_version(E.oracle_of(lh))
    time.sleep(TTL_MS / 1000 + 0.2)
    expired, must_go = _expected_expiry(lh, keep=3)
    files = owned_files(lh.storage)
    dry = run_job("expire", job_config("expire", lh.uri, dry_run=True, min_versions_to_keep=3, **EXPIRE), audit=False)
    assert dry.status == "dry_run" and dry.details["spark"]["started"] is False
    assert owned_files(lh.storage) == files and lh.latest_version() == latest
    res = run_job("expire", job_config("expire", lh.uri, min_versions_to_keep=3, **EXPIRE), audit=False)
    assert res.status == "succeeded" and res.details["spark"]["started"] is False
    assert res.counts["versions_expired"] == len(expired) and res.counts["deleted"] == len(must_go)
    assert files - owned_files(lh.storage) == must_go


def test_local_candidates_continue_on_the_executors_when_a_new_walk_went_distributed(spark):
    from trinitylake import rowsets
    from trinitylake.jobs.expire.job import _Candidates
    from trinitylake.spark.execution import Execution
    from trinitylake.treewalk.walk_rows import OUTPUT_SCHEMA, Reached, WalkStats

    rows = [("_" + "0" * 63 + "1.arrow", "root", 10, 0, 1),
            ("0000/0000/0000/00000000-node-a.arrow", "node", 20, 1, 1),
            ("0000/0000/0000/00000001-node-b.arrow", "node", 30, 2, 1),
            ("0000/0000/0000/00000010-m-x.binpb", "definition", -1, 3, 1),
            ("notes/readme.txt", "definition", 5, 3, 1)]
    table = pa.Table.from_pylist([dict(zip(OUTPUT_SCHEMA.names, r, strict=True)) for r in rows], schema=OUTPUT_SCHEMA)
    ex = Execution("auto", spark=spark)
    empty = Reached(WalkStats(), rowsets.driver(ex, table.slice(0, 0)))
    c = _Candidates(ex, Reached(WalkStats(), rowsets.driver(ex, table)), empty)
    assert c.rows.where == "local"
    assert (c.files, c.bytes, c.not_owned, c.already_gone) == (3, 60, 1, 1)
    assert c.levels() == {1: 1, 2: 1} and c.root_paths() == {rows[0][0]}
    extra = Reached(WalkStats(), rowsets.executors(ex, ex.to_df(table.slice(2, 1))))
    c.drop_reached(extra)
    assert c.rows.where == "distributed"
    assert c.count() == 2 and c.levels() == {1: 1} and c.root_paths() == {rows[0][0]}
    assert [r["path"] for r in c.level(1).native.collect()] == [rows[1][0]]
    c.release()
