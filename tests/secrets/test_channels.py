"""Secrets never leave the process: a unique secret is planted in every channel (storage
options, Spark conf, environment-derived options and credentials, URIs with a password) of
every `tlake` command and every job entry point, on local files and on the S3 test server;
then every file under the lakehouse, the control table, `_maintenance/`, the export targets,
the report, and every stdout/stderr/log line is scanned: zero occurrences.

The secrets must also have reached the process: the recorded options show the option names
with ``<redacted>`` values (a test that dropped the options would fail here too)."""

from __future__ import annotations

import json

import pytest

from tests.secrets.channels import assert_no_leaks, check_recorded_redacted, every_command, plant_channels

pytestmark = pytest.mark.slow


def test_every_command_and_job_on_local_files(planted, tmp_path):
    storage, spark = plant_channels(planted, s3_endpoint=None)
    lake, target = tmp_path / "lh", tmp_path / "exports"
    out = every_command(planted, str(lake), storage, spark, cwd=tmp_path, export_target=str(target),
                        log_level="DEBUG")
    check_recorded_redacted(out)
    warned = [text for label, text in planted.outputs if "(stderr)" in label and "credentials passed on the command line" in text]
    assert warned, "the CLI warns about secrets on the command line"
    assert_no_leaks(planted, planted.leaks_in_dir(tmp_path))
    assert (lake / "_control" / "_delta_log").is_dir() and (lake / "_maintenance").is_dir() and (target / "e1").is_dir()


@pytest.mark.spark
def test_spark_session_started_with_planted_conf(planted, tmp_path):
    """A run whose phases go to Spark executors: the planted Spark conf reaches a real session
    (Spark's own logs on stderr are scanned too), and nothing the run writes quotes it."""
    storage, spark = plant_channels(planted, s3_endpoint=None)
    lake = tmp_path / "lh"
    g = ["--lakehouse", str(lake), *storage]
    planted.tlake([*g, "init"], cwd=tmp_path)
    planted.tlake([*g, "namespace", "create", "s"], cwd=tmp_path)
    res = json.loads(planted.tlake([*g, "walk", *spark, "--execution", "distributed", "--master", "local[1]",
                                    "--json"], cwd=tmp_path).stdout)
    assert res["status"] == "succeeded" and res["details"]["spark"]["started"]
    assert_no_leaks(planted, planted.leaks_in_dir(tmp_path))
