"""A job started on an interpreter without its packages stops with one line naming them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("job", ["walk", "expire", "orphans", "export"])
def test_missing_packages_are_named_in_one_line(job, tmp_path):
    # -S: no site-packages, as a cluster's bare Python without the packed environment.
    proc = subprocess.run([sys.executable, "-S", str(ROOT / "jobs" / f"{job}.py"), "--lakehouse", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"tlake {job}: missing Python packages on ")
    for dist in ("trinitylake", "pyyaml", "pyarrow", "deltalake", "mmh3"):
        assert dist in lines[0]
    assert "--archives" in lines[0]


def test_nothing_is_missing_in_the_project_venv():
    proc = subprocess.run([sys.executable, "-c", "import _preflight; print(_preflight.missing())"],
                          capture_output=True, text=True, cwd=ROOT / "jobs", timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr
