"""The oracle (and the tables' oracle, `tests.iceberg.table_oracle`) shares nothing with the
library: importing it (in a fresh interpreter, so that nothing another test imported counts)
loads no `trinitylake` module."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = """
import importlib, json, sys
for m in sys.argv[1:]:
    importlib.import_module(m)
print(json.dumps(sorted(m for m in sys.modules if m == "trinitylake" or m.startswith("trinitylake."))))
"""


def _loaded_by(*modules: str) -> list[str]:
    """The library modules a fresh interpreter has loaded after importing `modules`."""
    p = subprocess.run(
        [sys.executable, "-c", PROBE, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_importing_the_oracle_loads_no_library_module():
    assert _loaded_by("tests.oracle") == []
    # Every module of the oracle, the expected-value rules included.
    assert _loaded_by("tests.oracle.reader", "tests.oracle.expect", "tests.oracle.defs", "tests.oracle.wire",
                      "tests.oracle.tables") == []
    # The tables' oracle, with the lakehouse side it reads through tests.oracle.tables.
    assert _loaded_by("tests.iceberg.table_oracle") == []


def test_the_probe_sees_a_library_import():
    """The probe is not blind: the harness that runs the jobs (which must import the library)
    shows up."""
    assert "trinitylake.jobs.runner" in _loaded_by("tests.support.jobs")
