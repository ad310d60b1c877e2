"""trinitylake.jobs.outcome: the outcome file the Airflow operator reads ($TLAKE_RESULT_FILE), and
which errors are permanent (fail without retries) or transient (retried)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trinitylake import errors
from trinitylake.jobs.outcome import is_permanent

ROOT = Path(__file__).resolve().parents[1]

PERMANENT = [
    errors.LakehouseNotFoundError("no lakehouse at s3://b/lh"),
    errors.AlreadyExistsError("an export named 'weekly-20261126' already exists"),
    errors.ConfigError("unknown option"),
    errors.UnsafeOperationError("more orphan candidates than max_candidates"),
    errors.CorruptNodeError("truncated"),
    errors.VersionNotFoundError("version 9 is in the future"),
    errors.ControlTableError("not a Delta table"),
    errors.StoragePermissionError("403 AccessDenied"),
]
TRANSIENT = [
    errors.StorageError("storage read of s3://b/k failed after 5 attempts: ConnectionResetError"),
    errors.UnknownOutcomeError("cannot read back"),
    errors.CommitConflictError("root of version 8 exists"),
    errors.TransactionConflictError("rebase failed"),
    RuntimeError("Py4JJavaError: the JVM died"),
    MemoryError(),
]


@pytest.mark.parametrize("exc", PERMANENT, ids=lambda e: type(e).__name__)
def test_typed_errors_about_the_input_are_permanent(exc):
    assert is_permanent(exc, 1) is True


@pytest.mark.parametrize("exc", TRANSIENT, ids=lambda e: type(e).__name__)
def test_storage_conflicts_and_untyped_failures_are_transient(exc):
    assert is_permanent(exc, 1) is False


def test_a_configuration_exit_without_an_exception_is_permanent():
    assert is_permanent(None, 2) is True
    assert is_permanent(None, 1) is False


def _run(job: str, args: list[str], tmp_path: Path) -> tuple[int, dict]:
    out = tmp_path / f"{job}.json"
    env = {"PATH": "/usr/bin:/bin", "TLAKE_RESULT_FILE": str(out), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(ROOT / "jobs" / f"{job}.py"), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, json.loads(out.read_text())


def test_the_job_writes_its_outcome_file(tmp_path):
    code, outcome = _run("expire", ["--lakehouse", str(tmp_path / "none"), "--conf", str(ROOT / "conf/expire.yaml")],
                         tmp_path)
    assert code == 1
    assert (outcome["error_type"], outcome["permanent"], outcome["exit_code"]) == ("LakehouseNotFoundError", True, 1)
    code, outcome = _run("export", ["--bogus"], tmp_path)
    assert code == 2
    assert (outcome["error_type"], outcome["permanent"]) == ("ConfigError", True)
    assert "--bogus" in outcome["error"]


def test_a_successful_job_writes_its_result(tmp_path):
    tlake = Path(sys.executable).with_name("tlake")
    lh = tmp_path / "lh"
    subprocess.run([str(tlake), "--lakehouse", str(lh), "init"], check=True, capture_output=True, timeout=120)
    code, outcome = _run("expire", ["--lakehouse", str(lh), "--conf", str(ROOT / "conf/expire.yaml")], tmp_path)
    assert code == 0, outcome
    assert outcome["permanent"] is False and outcome["error_type"] is None
    assert outcome["result"]["job"] == "expire" and outcome["result"]["status"] == "succeeded"
