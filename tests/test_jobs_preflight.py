"""A job started on an interpreter without its packages stops with one line naming them:
``trinitylake`` itself (the entry file's own check: the package cannot report its absence), or
every missing dependency of a present ``trinitylake`` (`trinitylake.jobs.preflight`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trinitylake.jobs.registry import JOB_NAMES

ROOT = Path(__file__).resolve().parents[1]


def _one_line(proc: subprocess.CompletedProcess[str], job: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"tlake {job}: missing Python packages on {sys.executable}: ")
    assert "--archives dist/trinitylake-env.tar.gz#env" in lines[0]
    return lines[0]


@pytest.mark.parametrize("job", JOB_NAMES)
def test_a_missing_trinitylake_is_named_in_one_line(job, tmp_path):
    # -S: no site-packages, as a cluster's bare Python without the packed environment.
    proc = subprocess.run(
        [sys.executable, "-S", str(ROOT / "jobs" / f"{job}.py"), "--lakehouse", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    line = _one_line(proc, job)
    assert ": trinitylake and its dependencies (" in line


@pytest.mark.parametrize("job", ["walk", "export"])
def test_missing_dependencies_of_the_package_are_named_in_one_line(job, tmp_path):
    # The package on the path, its dependencies not: every one of them is named, not the first.
    proc = subprocess.run(
        [sys.executable, "-S", str(ROOT / "jobs" / f"{job}.py"), "--lakehouse", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "lib")},
    )
    line = _one_line(proc, job)
    for dist in ("pyyaml", "pyarrow", "deltalake", "mmh3", "fsspec", "click", "protobuf"):
        assert dist in line
    assert "trinitylake" not in line.split(": ", 2)[2].split(" (")[0]


def test_nothing_is_missing_in_the_project_venv():
    from trinitylake.jobs.preflight import missing

    assert missing() == []
