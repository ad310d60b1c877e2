"""Maintenance survives a damaged table (issue 53 item 2): a table whose metadata JSON, manifest
list or manifest cannot be read (missing, truncated, not JSON or Avro) is reported with the file
and the lakehouse versions that need it, none of its files is deleted by either job, every other
table is maintained, and the run ends ``partial``: exit status 3, an audit row whose state is
``partial`` naming the table, the same in ``--json``. Plus the retention floor of
``tables expire-snapshots`` (issue 54 item 1): below the transaction TTL it needs
``--unsafe-min-age``.

Real PyIceberg tables in a real lakehouse on local files; the damage is done to the files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.iceberg import table_oracle as O
from tests.iceberg.conftest import SCHEMA, ids, rows
from tests.iceberg.tables_setup import expire_lakehouse, open_catalog, plant
from trinitylake.cli.app import cli
from trinitylake.lakehouse import Lakehouse

REPO = Path(__file__).resolve().parents[2]
DAMAGE = ["metadata-missing", "metadata-truncated", "list-missing", "list-not-avro", "manifest-truncated"]


def files_under(folder: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs}


def _manifests(list_path: str) -> list[str]:
    return [O.local(r["manifest_path"]) for r in O.avro_records(list_path)]


def damage(table, kind: str) -> str:
    """Damage `table` (a PyIceberg table) as `kind` says; returns the local path damaged."""
    meta = table.metadata
    if kind.startswith("metadata"):
        path = O.local(table.metadata_location)
    else:
        cur = meta.current_snapshot()
        path = O.local(cur.manifest_list)
        if kind.startswith("manifest"):  # the manifest the current snapshot added itself
            parent = meta.snapshot_by_id(cur.parent_snapshot_id)
            older = set(_manifests(O.local(parent.manifest_list)))
            path = next(m for m in _manifests(path) if m not in older)
    if kind.endswith("missing"):
        os.remove(path)
    elif kind.endswith("truncated"):
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[: len(data) // 2])
    else:
        Path(path).write_bytes(b"this is not an Avro file\n")
    return path


def build(tmp_path: Path, kind: str) -> dict:
    """s.good and s.bad, the lakehouse expired down to its latest version, old orphans planted
    under both, and s.bad damaged. s.bad's first snapshot adds a data file of s.good's (shared),
    which s.good's own current snapshot no longer reaches."""
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, txn_ttl_millis=1000)
    cat = open_catalog(uri, audit="true")
    cat.create_namespace("s")
    good = cat.create_table("s.good", schema=SCHEMA)
    good.append(rows([1, 2]))
    good = cat.load_table("s.good")
    shared_uris = [t.file.file_path for t in good.scan().plan_files()]
    shared = [O.local(u) for u in shared_uris]
    good.append(rows([3]))
    good = cat.load_table("s.good")
    only_good = sorted({O.local(t.file.file_path) for t in good.scan().plan_files()} - set(shared))
    bad = cat.create_table("s.bad", schema=SCHEMA)
    bad.add_files(shared_uris)  # the same parquet file, added to the second table
    cat.load_table("s.bad").append(rows([5]))
    bad = cat.load_table("s.bad")
    before = {t.file.file_path for t in bad.scan().plan_files()}
    bad.append(rows([6]))
    bad = cat.load_table("s.bad")
    # A data file of s.bad's that only its newest snapshot (the damaged part) names, added to
    # s.good too: s.good's expiry makes it a candidate; under s.bad's location, it must stay.
    held = [u for u in (t.file.file_path for t in bad.scan().plan_files()) if u not in before]
    cat.load_table("s.good").add_files(held)
    cat.load_table("s.good").overwrite(rows([4]))
    expire_lakehouse(uri)
    good_loc, bad_loc = O.local(cat.load_table("s.good").metadata.location), O.local(bad.metadata.location)
    orphan_good = plant(os.path.join(good_loc, "data"), "orphan-old.parquet", 40)
    orphan_bad = plant(os.path.join(bad_loc, "data"), "orphan-old.parquet", 40)
    bad_pointer = bad.metadata_location
    damaged = damage(bad, kind)
    time.sleep(1.2)  # every snapshot older than --older-than 1s (the transaction TTL: the floor)
    return {
        "uri": uri,
        "cat": cat,
        "shared": shared,
        "held": [O.local(u) for u in held],
        "only_good": only_good,
        "orphan_good": orphan_good,
        "orphan_bad": orphan_bad,
        "bad_files": files_under(bad_loc),
        "bad_pointer": bad_pointer,
        "damaged": damaged,
        "latest": Lakehouse.open(uri, audit=False).latest_version(),
    }


def tlake(uri: str, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["--lakehouse", uri, *args])
    return res.exit_code, res.output


def check_bad_untouched(w: dict) -> None:
    gone = sorted(w["bad_files"] - files_under(os.path.dirname(os.path.dirname(w["orphan_bad"]))))
    assert not gone, f"files of the damaged table were deleted: {gone[:3]}"
    assert os.path.exists(w["orphan_bad"]), "an old file under the damaged table's location was deleted"
    assert all(os.path.exists(p) for p in w["shared"]), "a data file the damaged table reads was deleted"
    assert all(os.path.exists(p) for p in w["held"]), "a file under the damaged table's location was deleted"
    lh = Lakehouse.open(w["uri"], audit=False)
    d = lh.load_root(lh.latest_version())
    from trinitylake.lakehouse.view import LakehouseView

    pointer = LakehouseView(lh, d).load_table("s", "bad").format_properties["metadata_location"]
    assert pointer == w["bad_pointer"], "the damaged table was committed to"


def check_report(out: dict, w: dict) -> None:
    assert out["status"] == "partial", out["status"]
    assert out["counts"]["tables_damaged"] == 1
    bad = out["details"]["damaged_tables"]["s.bad"]
    assert any(f.endswith(os.path.basename(w["damaged"])) for f in bad["files"]), bad
    # The versions that point at the damaged metadata: the one current when it was damaged, and
    # the latest (the expiry of s.good commits one more, s.bad's pointer unchanged in it).
    assert any(v.endswith("(latest)") for v in bad["versions"]), bad
    assert any(v.split(" (")[0] == f"version {w['latest']}" for v in bad["versions"]), bad
    assert out["details"]["tables"]["s.bad"]["skipped"] == "damaged"
    assert "s.good" not in out["details"]["damaged_tables"]
    assert any("s.bad" in line and os.path.basename(w["damaged"]) in line for line in out["details"]["partial"])


@pytest.mark.parametrize("kind", DAMAGE)
def test_both_table_jobs_skip_a_damaged_table_and_maintain_the_others(tmp_path, kind):
    w = build(tmp_path, kind)
    # Expire: s.good's old snapshots (two appends, an add, the overwrite's delete) go, with the
    # data only they reached; s.bad is not touched, nor is what s.good shares with it.
    rc, output = tlake(w["uri"], "tables", "expire-snapshots", "--older-than", "1s", "--retain-last", "1", "--json")
    assert rc == 3, output
    out = json.loads(output)
    check_report(out, w)
    assert out["details"]["tables"]["s.good"]["snapshots_expired"] == 4, out["details"]["tables"]
    assert out["counts"]["held"] >= 1 and out["details"]["tables"]["s.good"]["files_held"] >= 1, out["counts"]
    assert not any(os.path.exists(p) for p in w["only_good"]), "s.good's expired data stayed"
    assert ids(w["cat"].load_table("s.good")) == [4]
    check_bad_untouched(w)
    # Orphans: s.good's old orphan goes; nothing under s.bad's location is listed or deleted.
    rc, output = tlake(w["uri"], "tables", "remove-orphans", "--json")
    assert rc == 3, output
    out = json.loads(output)
    check_report(out, w)
    assert not os.path.exists(w["orphan_good"]), "the old orphan of the healthy table stayed"
    assert out["details"]["tables"]["s.good"]["files_deleted"] == 1, out["details"]["tables"]
    check_bad_untouched(w)
    assert ids(w["cat"].load_table("s.good")) == [4]
    # The audit rows say partial, and name the table and the file.
    rc, output = tlake(w["uri"], "show", "--all", "--json")
    assert rc == 0, output
    runs = [e for e in json.loads(output) if e["command"] in ("tables_expire", "tables_orphans")]
    assert [(e["command"], e["state"]) for e in runs] == [("tables_orphans", "partial"), ("tables_expire", "partial")]
    for e in runs:
        assert any("s.bad" in c and os.path.basename(w["damaged"]) in c for c in e["changes"]), e["changes"]
    # The text output says it too, on one line per damaged table.
    rc, output = tlake(w["uri"], "tables", "remove-orphans", "--dry-run")
    assert rc == 3 and "partial: table s.bad skipped:" in output, output


def test_the_spark_submit_entry_exits_3_and_its_outcome_file_says_partial(tmp_path):
    w = build(tmp_path, "list-missing")
    for job in ("tables_expire", "tables_orphans"):
        outcome = tmp_path / f"{job}.json"
        env = {**os.environ, "TLAKE_RESULT_FILE": str(outcome), "PYTHONPATH": str(REPO)}
        args = [sys.executable, str(REPO / "jobs" / f"{job}.py"), "--lakehouse", w["uri"], "--execution", "local"]
        if job == "tables_expire":
            args += ["--older-than", "1s", "--retain-last", "1"]
        p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 3, p.stderr[-2000:]
        doc = json.loads(outcome.read_text())
        assert doc["exit_code"] == 3 and doc["status"] == "partial" and doc["permanent"] is True, doc
        assert doc["error_type"] == "PartialRun" and doc["error"].startswith("partial: table s.bad skipped:"), doc
        check_report(doc["result"], w)
    assert not os.path.exists(w["orphan_good"]) and not any(os.path.exists(p) for p in w["only_good"])
    check_bad_untouched(w)


def test_a_healthy_lakehouse_still_exits_0(tmp_path):
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, txn_ttl_millis=1000)
    cat = open_catalog(uri, audit="true")
    cat.create_namespace("s")
    cat.create_table("s.a", schema=SCHEMA).append(rows([1]))
    cat.load_table("s.a").append(rows([2]))
    time.sleep(1.2)
    rc, output = tlake(uri, "tables", "expire-snapshots", "--older-than", "1s", "--retain-last", "1", "--json")
    assert rc == 0, output
    out = json.loads(output)
    assert out["status"] == "succeeded" and out["counts"]["tables_damaged"] == 0 and "damaged_tables" not in out["details"]


def test_expire_snapshots_refuses_a_retention_below_the_transaction_ttl(tmp_path):
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, txn_ttl_millis=3600 * 1000)
    cat = open_catalog(uri, audit="true")
    cat.create_namespace("s")
    cat.create_table("s.a", schema=SCHEMA).append(rows([1]))
    cat.load_table("s.a").append(rows([2]))
    rc, output = tlake(uri, "tables", "expire-snapshots", "--older-than", "5m")
    assert rc == 1, output
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "below the lakehouse transaction TTL 1h" in lines[0] and "--unsafe-min-age" in lines[0], output
    assert len(cat.load_table("s.a").metadata.snapshots) == 2  # refused before anything was done
    # At the TTL, or with the unsafe flag, it runs; without --older-than, the tables' own properties rule.
    rc, output = tlake(uri, "tables", "expire-snapshots", "--older-than", "1h", "--dry-run")
    assert rc == 0, output
    rc, output = tlake(uri, "tables", "expire-snapshots", "--dry-run")
    assert rc == 0, output
    rc, output = tlake(uri, "tables", "expire-snapshots", "--older-than", "0s", "--unsafe-min-age", "--retain-last", "1",
                       "--json")
    assert rc == 0, output
    assert json.loads(output)["counts"]["snapshots_expired"] == 1
    assert ids(cat.load_table("s.a")) == [1, 2]


@pytest.mark.parametrize("kind", ["metadata-missing", "metadata-truncated"])
def test_a_damaged_table_nested_in_another_tables_location_keeps_its_files(tmp_path, kind):
    """s.child lies inside s.parent's location; with its metadata lost its location is known
    only from where its metadata files lie. Listing s.parent meets s.child's files, all made
    old: none of them is an orphan, while s.parent's own old orphan goes."""
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, txn_ttl_millis=1000)
    cat = open_catalog(uri, audit="true")
    cat.create_namespace("s")
    parent = cat.create_table("s.parent", schema=SCHEMA)
    parent.append(rows([1]))
    loc = O.local(cat.load_table("s.parent").metadata.location)
    child = cat.create_table("s.child", schema=SCHEMA, location="file://" + os.path.join(loc, "child"))
    child.append(rows([2]))
    child.append(rows([3]))
    child = cat.load_table("s.child")
    expire_lakehouse(uri)
    damage(child, kind)
    child_files = files_under(os.path.join(loc, "child"))
    old = time.time() - 40 * 86400
    for p in child_files:
        os.utime(p, (old, old))
    orphan = plant(os.path.join(loc, "data"), "orphan-old.parquet", 40)
    rc, output = tlake(uri, "tables", "remove-orphans", "--json")
    assert rc == 3, output
    out = json.loads(output)
    assert out["status"] == "partial" and list(out["details"]["damaged_tables"]) == ["s.child"], out["details"]
    # What the child's older metadata files still reach is live; the rest is held.
    assert out["details"]["tables"]["s.parent"]["files_held"] >= 1, out["details"]["tables"]
    assert not os.path.exists(orphan), "the healthy table's old orphan stayed"
    gone = sorted(child_files - files_under(os.path.join(loc, "child")))
    assert not gone, f"files of the damaged nested table were deleted: {gone[:3]}"
    assert ids(cat.load_table("s.parent")) == [1]


@pytest.mark.parametrize("kind", ["list-missing", "manifest-truncated"])
def test_damage_read_on_the_executors_is_judged_as_on_the_driver(tmp_path, spark, kind):
    """The manifest lists and manifests read in Spark tasks: a missing or unreadable one comes
    back as a row, and the driver judges it as it judges its own reads."""
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import DISTRIBUTED, Execution
    from trinitylake.tables_maintenance.expire import ExpireOptions, expire_snapshots
    from trinitylake.tables_maintenance.orphans import OrphanOptions, remove_orphans

    w = build(tmp_path, kind)
    lh = Lakehouse.open(w["uri"], audit=False)
    ex = Execution(DISTRIBUTED, spark=spark)
    r = expire_snapshots(lh, ExpireOptions(older_than_ms=1000, retain_last=1), JobResult("tables_expire", "e1", lh.uri), ex)
    assert ex.record["tables.manifests"]["where"] == DISTRIBUTED
    check_report(r.to_dict(), w)
    assert r.details["tables"]["s.good"]["snapshots_expired"] == 4 and r.counts["held"] >= 1
    assert not any(os.path.exists(p) for p in w["only_good"])
    check_bad_untouched(w)
    o = remove_orphans(Lakehouse.open(w["uri"], audit=False), OrphanOptions(), JobResult("tables_orphans", "o1", lh.uri),
                       Execution(DISTRIBUTED, spark=spark))
    check_report(o.to_dict(), w)
    assert not os.path.exists(w["orphan_good"])
    check_bad_untouched(w)


def test_damage_only_a_retained_version_points_at_names_that_version(tmp_path):
    """s.bad's current metadata reads; the older metadata file a retained lakehouse version
    points at is truncated. The report names that version (not the latest), and neither job
    deletes any file of s.bad; s.good is maintained."""
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, txn_ttl_millis=1000)
    cat = open_catalog(uri, audit="true")
    cat.create_namespace("s")
    cat.create_table("s.good", schema=SCHEMA).append(rows([1]))
    cat.load_table("s.good").append(rows([2]))
    bad = cat.create_table("s.bad", schema=SCHEMA)
    bad.append(rows([1]))
    old_metadata = cat.load_table("s.bad").metadata_location
    v_old = Lakehouse.open(uri, audit=False).latest_version()
    cat.load_table("s.bad").append(rows([2]))
    data = Path(O.local(old_metadata)).read_bytes()
    Path(O.local(old_metadata)).write_bytes(data[: len(data) // 2])  # the metadata file version v_old points at
    bad_loc = O.local(cat.load_table("s.bad").metadata.location)
    orphan_good = plant(os.path.join(O.local(cat.load_table("s.good").metadata.location), "data"), "o.parquet", 40)
    orphan_bad = plant(os.path.join(bad_loc, "data"), "o.parquet", 40)
    bad_files = files_under(bad_loc)
    time.sleep(1.2)
    for args in (["expire-snapshots", "--older-than", "1s", "--retain-last", "1"], ["remove-orphans"]):
        rc, output = tlake(uri, "tables", *args, "--json")
        assert rc == 3, output
        out = json.loads(output)
        d = out["details"]["damaged_tables"]["s.bad"]
        assert [f"version {v_old}"] == [v for v in d["versions"] if v == f"version {v_old}"], d
        assert not any(v.endswith("(latest)") for v in d["versions"]), d
        assert [os.path.basename(f) for f in d["files"]] == [os.path.basename(old_metadata)], d
        assert not bad_files - files_under(bad_loc), f"{args[0]} deleted files of the damaged table"
        if args[0] == "expire-snapshots":  # found after its commit (the live set's read): its files held
            assert out["details"]["tables"]["s.bad"]["damaged"].startswith("found after its expiry committed")
            assert out["details"]["tables"]["s.bad"]["files_to_delete"] == 0  # salvage and held: nothing of it goes
            assert out["details"]["tables"]["s.good"]["snapshots_expired"] == 1
    assert not os.path.exists(orphan_good) and os.path.exists(orphan_bad)
    assert ids(cat.load_table("s.good")) == [1, 2] and ids(cat.load_table("s.bad")) == [1, 2]
