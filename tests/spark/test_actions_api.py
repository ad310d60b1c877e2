"""The DataFrame API (`trinitylake.jobs.actions`): each job run through an action on a real
session, its DataFrames checked against the files on disk and the independent oracle
(`tests.oracle`), and the history against the control table and `tlake show`.

One audited lakehouse is shared by the module, and the runs happen in a fixed order (walk,
orphans dry run, orphans, export, expire), each fixture module-scoped and depending on the
previous one, so that every test sees the lakehouse in a known state.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest
from click.testing import CliRunner

from tests.maintenance.helpers import build_history
from tests.oracle import expect as E
from tests.spark.conftest import TTL_MS, orphan_names, owned_files, plant
from trinitylake.cli.app import cli
from trinitylake.control import ControlTable
from trinitylake.errors import ConfigError
from trinitylake.jobs.actions import ExportResult, TrinityLakeActions, history
from trinitylake.lakehouse import Lakehouse

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tmp_path_factory.mktemp("actions")


@pytest.fixture(scope="module")
def lake(base):
    """An audited lakehouse with a history, planted orphans (an hour old, and a young one)."""
    lh = Lakehouse.create(str(base / "lh"), order=4, node_max_bytes=4096, audit=True, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=11, ops=24)
    names = orphan_names()
    planted = plant(lh.storage, {n: (None if k == "young" else 3600.0) for k, n in names.items()})
    time.sleep(TTL_MS / 1000 + 0.2)
    return lh, planted


@pytest.fixture(scope="module")
def actions(spark, lake):
    return TrinityLakeActions(spark, lake[0].uri, env={})


@pytest.fixture(scope="module")
def walked(actions, lake):
    lh, _ = lake
    expected = _kinds(E.live_walk(E.oracle_of(lh), sizes=False))  # before anything changes
    return actions.walk().execute(), expected


@pytest.fixture(scope="module")
def orphans_dry(actions, lake, walked):
    lh, _ = lake
    before = owned_files(lh.storage)
    live = E.live_walk(E.oracle_of(lh), sizes=False).paths()
    res = actions.orphans(dry_run=True, older_than="10m").execute()
    return res, before, live, owned_files(lh.storage)


@pytest.fixture(scope="module")
def orphans_real(actions, lake, orphans_dry):
    lh, _ = lake
    before = owned_files(lh.storage)
    res = actions.orphans(older_than="10m").execute()
    return res, before, owned_files(lh.storage)


@pytest.fixture(scope="module")
def exported(actions, lake, base, orphans_real):
    target = str(base / "export")
    return actions.export(name="weekly-1", target=target, mode="full").execute(), target


@pytest.fixture(scope="module")
def expired(actions, lake, exported):
    lh, _ = lake
    o = E.oracle_of(lh)
    versions = E.kept_versions(o)
    expected = E.expired_files(o, versions[:-3])  # read before they go
    before = owned_files(lh.storage)
    res = (actions.expire(dry_run=False).option("min_versions_to_keep", 3)
           .options(max_version_age=0, clock_skew_margin=0, compact_control_table=False).execute())
    return res, versions, expected, before, owned_files(lh.storage)


def _kinds(walk: E.Walk) -> dict[str, str]:
    return {k: r.kind for k, r in walk.rows.items()}


def _rows(df, *cols):
    return [tuple(r[c] for c in cols) for r in df.select(*cols).collect()]


def test_walk_reachable_files_df_equals_the_oracle(walked):
    res, expected = walked
    assert res.status == "succeeded"
    df = res.reachable_files_df()
    assert df.columns == ["path", "kind", "size", "depth", "first_version"]
    got = dict(_rows(df, "path", "kind"))
    assert got == expected
    assert df.count() == len(expected) == res.counts["reachable"]
    root = res.config.lakehouse.removeprefix("file://")
    sizes = _rows(df.where("kind = 'node'"), "path", "size")
    assert sizes and all(os.path.getsize(f"{root}/{p}") == s for p, s in sizes)


def test_orphans_dry_run_lists_the_planted_orphans_and_deletes_nothing(orphans_dry, lake):
    res, before, live, after = orphans_dry
    _, planted = lake
    assert res.status == "dry_run" and res.dry_run
    assert after == before, "a dry run deletes nothing"
    cands = {p for (p,) in _rows(res.candidate_files_df(), "path")}
    old_planted = {rel for name, rel in planted.items() if "young" not in name}
    assert old_planted <= cands
    # Files the history wrote and never referenced are younger than older_than, as is the
    # young planted one: the candidates are exactly the old planted files.
    assert cands == old_planted == {p for p in before - live if "young" not in p and "0000-4000-8000" in p}
    assert before - live - cands, "unreferenced but too young: kept"
    assert res.counts["candidates"] == len(cands)
    assert res.deleted_files_df().count() == 0


def test_orphans_run_deleted_files_df_matches_the_files_gone(orphans_real, orphans_dry):
    res, before, after = orphans_real
    dry_cands = {p for (p,) in _rows(orphans_dry[0].candidate_files_df(), "path")}
    assert res.status == "succeeded" and not res.dry_run
    deleted = {p for (p,) in _rows(res.deleted_files_df(), "path")}
    assert deleted == before - after
    assert deleted == dry_cands
    assert res.counts["deleted"] == len(deleted) > 0


def test_export_copied_files_df_lists_the_files_at_the_target(exported, lake):
    res, target = exported
    lh, _ = lake
    files = {os.path.relpath(os.path.join(d, f), target) for d, _, fs in os.walk(target) for f in fs}
    data = {f for f in files if not f.startswith("_export/") and f != "_latest_hint.txt"}
    df = res.copied_files_df()
    rows = {r["path"]: r for r in df.collect()}
    assert set(rows) == data
    assert len(rows) == df.count() == res.counts["planned"]
    version = res.job_result.details["version"]
    assert set(rows) == E.version_files(E.oracle_of(lh), [version]), "a full export copies the version's tree"
    assert E.version_contents(target) == E.version_contents(lh.uri, version), "it reads as its source"
    assert sum(r["kind"] == "root" for r in rows.values()) == 1
    for path, r in rows.items():
        with open(os.path.join(target, path), "rb") as f:
            content = f.read()
        assert (r["size"], r["md5"]) == (len(content), hashlib.md5(content).hexdigest()), path
        assert r["source"].startswith(lh.uri + "/")
        if r["action"] == "copy":
            with open(r["source"].removeprefix("file://"), "rb") as f:
                assert f.read() == content, path


def test_expire_dataframes_match_the_versions_and_files_gone(expired):
    res, versions, expected, before, after = expired
    gone_versions = versions[:-3]
    assert res.status == "succeeded"
    assert _rows(res.expired_versions_df(), "version", "status") == [(v, "expired") for v in gone_versions]
    assert expected
    deleted = {p for (p,) in _rows(res.deleted_files_df(), "path")}
    assert deleted == before - after == expected
    assert {p for (p,) in _rows(res.candidate_files_df(), "path")} == expected
    assert res.counts["deleted"] == len(expected)


def _show(lh) -> list[dict]:
    out = CliRunner().invoke(cli, ["--lakehouse", lh.uri, "show", "--all", "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def _check_history(df, lh, runs) -> None:
    rows = [r.asDict() for r in df.collect()]
    seqs = [r["txn_seq"] for r in rows]
    assert seqs == sorted(seqs)
    records = ControlTable(lh.auditor.control_uri, engine="delta-rs").records()
    assert [(r["txn_seq"], r["record_type"], r["txn_id"]) for r in rows] == \
        [(r.txn_seq, r.record_type, r.txn_id) for r in records]
    by_seq: dict[int, list[dict]] = {}
    for r in rows:
        by_seq.setdefault(r["txn_seq"], []).append(r)
    show = [e for e in _show(lh) if e["txn_seq"] is not None]
    # A job's commit of its own version (an export recording itself) is folded into the run's
    # entry of `show` (its `commit_seqs`): every txn_seq of the table appears once either way.
    assert sorted(by_seq) == sorted(s for e in show for s in [e["txn_seq"], *(e.get("commit_seqs") or [])])
    for e in show:
        group = by_seq[e["txn_seq"]]
        assert (group[0]["command"], group[-1]["record_type"], group[0]["txn_id"]) == \
            (e["command"], e["record_type"], e["txn_id"]), e
    for res in runs:  # every action's run: a begin row, then its final row
        jr = res.job_result
        final = "completed" if jr.version_after not in (None, jr.version_before) else "read"
        assert [(r["command"], r["record_type"], r["txn_id"]) for r in by_seq[res.txn_seq]] == \
            [(jr.job, "begin", res.run_id), (jr.job, final, res.run_id)]
    assert {res.job_result.job for res in runs if res.job_result.version_after != res.job_result.version_before} \
        <= {"export", "expire"}


def test_history_is_the_control_table_by_txn_seq(spark, lake, walked, orphans_dry, orphans_real, exported, expired):
    lh, _ = lake
    df = history(spark, lh)
    _check_history(df, lh, [walked[0], orphans_dry[0], orphans_real[0], exported[0], expired[0]])
    newest = [r["txn_seq"] for r in history(spark, lh.uri, newest_first=True).select("txn_seq").collect()]
    assert newest == sorted(newest, reverse=True)


def test_history_of_a_lakehouse_without_control_table_is_empty(spark, base):
    lh = Lakehouse.create(str(base / "quiet"), audit=False)
    df = history(spark, lh.uri)
    assert df.count() == 0 and "txn_seq" in df.columns


def test_unknown_option_is_refused_before_anything_runs(actions):
    with pytest.raises(ConfigError, match="older_than"):
        actions.walk(older_than="1d")


def test_under_spark_connect(connect_spark, lake, exported, expired):
    """A walk run with a Connect session, its listing, an export's files and the history read
    through it (the jobs' own placement on a Connect server's executors is `test_modes.py`'s)."""
    lh, _ = lake
    done = exported[0]
    via_connect = ExportResult(connect_spark, done.job_result, done.config).copied_files_df()
    assert sorted(map(tuple, via_connect.collect())) == sorted(map(tuple, done.copied_files_df().collect()))
    res = TrinityLakeActions(connect_spark, lh, env={}).walk().execute()
    o = E.oracle_of(lh)
    # The full export is self-contained: neither walked (nothing of it among the paths below)
    # nor read, and the result says so.
    full = E.self_contained_exports(o)
    assert set(full) == {"weekly-1"} and not E.export_roots(o)
    assert res.job_result.details["exports"]["weekly-1"] == {"root": full["weekly-1"], "walked": False,
                                                             "pinned_version": None,
                                                             "reason": "self-contained, not walked"}
    assert res.counts["self_contained_exports"] == 1 and res.counts["exports"] == 0
    expected = _kinds(E.live_walk(o, sizes=False))
    assert not any(p.startswith(full["weekly-1"].rsplit("/", 1)[0] + "/") for p in expected)
    assert dict(_rows(res.reachable_files_df(), "path", "kind")) == expected
    _check_history(history(connect_spark, lh.uri), lh, [expired[0], res])


def test_expire_deleted_files_df_leaves_out_what_a_version_committed_meanwhile_reaches(spark, base):
    """A rollback to an expiring version lands between the expire's plan and its commit: the
    files it reaches again leave the candidates, and `deleted_files_df` is what was deleted."""
    from trinitylake import seams

    lh = Lakehouse.create(str(base / "raced"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=3, ops=12)
    time.sleep(TTL_MS / 1000 + 0.2)
    o = E.oracle_of(lh)
    versions = E.kept_versions(o)
    kept = E.version_files(o, versions[-3:])
    back = max(versions[:-3], key=lambda v: len(E.version_files(o, [v]) - kept))
    revived = E.version_files(o, [back]) - kept
    assert revived
    before = owned_files(lh.storage)
    armed = [True]

    def rollback_after_plan(name: str) -> None:
        if name == "expire_after_plan" and armed:
            armed.pop()
            lh.rollback(to=back)

    seams.on_crash_point(rollback_after_plan)
    try:
        res = (TrinityLakeActions(spark, lh, env={})
               .expire(min_versions_to_keep=3, max_version_age=0, clock_skew_margin=0).execute())
    finally:
        seams._crash_handlers.remove(rollback_after_plan)
    assert not armed, "the rollback ran inside the expire"
    after = owned_files(lh.storage)
    cands = {p for (p,) in _rows(res.candidate_files_df(), "path")}
    deleted = {p for (p,) in _rows(res.deleted_files_df(), "path")}
    assert deleted == before - after
    assert res.job_result.details["delete_location"].endswith("/to_delete")
    assert deleted < cands and cands - deleted <= revived
    assert res.counts["deleted"] == len(deleted)
