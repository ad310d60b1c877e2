"""`tlake walk|expire|orphans` and the jobs' exit codes."""

from __future__ import annotations

import json
import runpy
import sys

import pytest
from click.testing import CliRunner

from trinitylake.cli import cli
from trinitylake.jobs import runner
from trinitylake.jobs.registry import JOB_NAMES

pytestmark = pytest.mark.spark


def test_walk_from_the_cli_prints_the_result_as_json(spark, make_lakehouse):
    lh = make_lakehouse()
    lh.create_namespace("a")
    r = CliRunner().invoke(cli, ["--lakehouse", lh.uri, "--no-audit", "walk", "--json", "--batch-size", "16"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["status"] == "succeeded"
    assert res["counts"]["reachable"] == 4  # two roots, the lakehouse definition, the namespace
    assert res["counts"]["node_reads"] == res["counts"]["unique_nodes"] == 2


def test_expire_dry_run_renders_a_summary_table(spark, make_lakehouse):
    lh = make_lakehouse()
    lh.create_namespace("a")
    r = CliRunner().invoke(cli, ["--lakehouse", lh.uri, "--no-audit", "expire", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "dry_run" in r.stdout and "versions_expired" in r.stdout and "plan.json" in r.stdout.replace("\n", "")


def test_cli_exit_codes(spark, make_lakehouse, tmp_path):
    lh = make_lakehouse()
    r = CliRunner().invoke(cli, ["--lakehouse", lh.uri, "orphans", "--delete-batch-size", "5000"])
    assert r.exit_code == 2 and "delete_batch_size" in r.stderr
    r = CliRunner().invoke(cli, ["--lakehouse", str(tmp_path / "nothing"), "--no-audit", "expire"])
    assert r.exit_code == 1 and "LakehouseNotFoundError" in r.stderr
    r = CliRunner().invoke(cli, ["walk"])
    assert r.exit_code != 0 and "--lakehouse" in r.output + r.stderr


def test_job_entry_points(spark, tmp_path, monkeypatch, capsys):
    assert runner.main("walk", ["--bogus"]) == 2
    assert runner.main("walk", ["--lakehouse", str(tmp_path / "none")], spark=spark) == 1
    monkeypatch.setattr(sys, "argv", ["jobs/walk.py", "--batch-size", "0", "--lakehouse", str(tmp_path)])
    with pytest.raises(SystemExit) as e:
        runpy.run_path("jobs/walk.py", run_name="__main__")
    assert e.value.code == 2
    assert runner.job_function("walk").__name__ == "run_walk"
    assert "export" in JOB_NAMES
