"""`tlake export` (group with subcommands) and the spark-submit entry point."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trinitylake.cli import cli
from trinitylake.format.paths import root_name

from .conftest import populate

pytestmark = pytest.mark.spark


def _tlake(lh, *args):
    res = CliRunner().invoke(cli, ["--lakehouse", lh.uri, "--no-audit", *args], catch_exceptions=False)
    # --json: the document alone (the export's progress lines go to stderr, as in a shell)
    return res.exit_code, res.stdout if "--json" in args else res.output


def test_cli_export_list_read_drop(spark, make_lakehouse, tmp_path):
    lh = make_lakehouse()
    v = populate(lh, namespaces=1, tables=5, drops=0)
    tables = sorted(lh.view().list_tables("ns0"))

    code, out = _tlake(lh, "export", "--name", "m1", "--target", str(tmp_path / "m"), "--minimal", "--json")
    assert code == 0, out
    r = json.loads(out[out.index("{"):])
    assert r["status"] == "succeeded" and r["details"]["mode"] == "minimal" and r["details"]["version"] == v
    assert r["counts"]["planned"] == 2 and set(r["seconds"]) >= {"plan", "copy", "verify", "commit"}

    code, out = _tlake(lh, "table", "list", "ns0", "--snapshot", "m1", "--json")
    assert code == 0 and json.loads(out)["tables"] == tables

    code, out = _tlake(lh, "export", "--name", "p1", "--target", str(tmp_path / "p"), "--depth", "0")
    assert code == 0, out
    assert "partial, depth 0" in out and f"pins source version {v + 1}" in out

    code, out = _tlake(lh, "export", "list", "--json")
    rows = {e["name"]: e for e in json.loads(out)["exports"]}
    assert code == 0 and set(rows) == {"m1", "p1"}
    assert rows["m1"]["pinned_version"] == v and rows["m1"]["root"].endswith(root_name(v))

    code, out = _tlake(lh, "--log-level", "ERROR", "export", "--name", "m1", "--target", str(tmp_path / "other"))
    assert code == 1 and "AlreadyExistsError" in out
    assert not (tmp_path / "other").exists()

    code, out = _tlake(lh, "export", "drop", "m1")
    assert code == 0 and f"dropped export m1 of version {v}, pin on version {v} released" in out, out
    assert f"(recorded in lakehouse version {lh.latest_version()})" in out, out
    assert "m1" not in lh.definition().exported_snapshot_pins
    code, out = _tlake(lh, "export", "drop", "m1")
    assert code == 1 and "SnapshotNotFoundError" in out


def test_cli_usage_errors(make_lakehouse, tmp_path):
    lh = make_lakehouse()
    assert _tlake(lh, "export")[0] == 2
    assert _tlake(lh, "export", "--name", "x")[0] == 2
    code, out = _tlake(lh, "export", "--name", "x", "--target", str(tmp_path / "t"), "--minimal", "--depth", "1")
    assert code == 2 and "--depth goes with --partial" in out


def test_spark_submit_entry_point(spark, make_lakehouse, tmp_path, capsys):
    from trinitylake.jobs.runner import main

    lh = make_lakehouse(audit=True)
    populate(lh, namespaces=1, tables=3, alters=0, drops=0)
    code = main("export", ["--lakehouse", lh.uri, "--name", "nightly", "--target", str(tmp_path / "x"),
                           "--mode", "partial", "--depth", "0"], spark=spark)
    assert code == 0
    out = capsys.readouterr().out
    r = json.loads(out.strip().splitlines()[-1])
    assert r["job"] == "export" and r["status"] == "succeeded" and r["details"]["mode"] == "partial"
    assert "nightly" in lh.definition().exported_snapshots
    # The run (begin and completed rows, with the result's metrics) and the export's commit
    # (a child of the run) are in the control table.
    from trinitylake.control import ControlTable

    rows = [r for r in ControlTable(lh.uri + "/_control").records() if r.command == "export"]
    kinds = sorted(r.record_type for r in rows)
    assert kinds == ["begin", "committed", "completed"], kinds
    done = next(r for r in rows if r.record_type == "completed")
    assert done.metrics["files_planned"] >= 2 and "seconds_copy" in done.metrics
    committed = next(r for r in rows if r.record_type == "committed")
    assert committed.parent_seq == done.txn_seq and committed.version_after == r["version_after"]
    # A name clash is a TrinityLake error: exit code 1.
    assert main("export", ["--lakehouse", lh.uri, "--name", "nightly", "--target", str(tmp_path / "y")],
                spark=spark) == 1


def test_cli_local_threads_reaches_the_job(make_lakehouse, tmp_path):
    lh = make_lakehouse()
    populate(lh, namespaces=1, tables=3, drops=0)
    code, out = _tlake(lh, "--log-level", "ERROR", "export", "--name", "t0", "--target", str(tmp_path / "t0"),
                       "--local-threads", "0")
    assert code == 2 and "ConfigError" in out and "local_threads" in out
    assert not (tmp_path / "t0").exists()
    code, out = _tlake(lh, "export", "--name", "t2", "--target", str(tmp_path / "t2"), "--local-threads", "2", "--json")
    assert code == 0, out
    assert json.loads(out[out.index("{"):])["status"] == "succeeded"
