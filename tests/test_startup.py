"""Start-up costs the CLI and the jobs avoid: pyarrow's import of pandas (see
`trinitylake.util.refuse_pandas_for_pyarrow`). Each case runs in its own interpreter: it
changes the import state of the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.strip()


def test_list_conversions_do_not_import_pandas_and_pandas_comes_back_for_spark():
    pytest.importorskip("pandas")
    out = _run("""
        import sys
        from trinitylake.util import pandas_back_for_pyarrow, refuse_pandas_for_pyarrow
        refuse_pandas_for_pyarrow()
        import pyarrow as pa
        pa.array(["a", None]); pa.array([1, 2], pa.int64()); pa.Table.from_pylist([{"x": 1.5}])
        print("pandas imported:", "pandas" in sys.modules)
        import pyspark  # pyspark needs pandas: from its first import on, pandas imports
        import pandas as pd
        pandas_back_for_pyarrow()
        s = pd.Series(pd.to_datetime(["2020-01-01"])).dt.tz_localize("UTC")
        print("series type:", pa.array(s).type)  # seen as a pandas object again
        print("to_pandas:", pa.table({"x": [1]}).to_pandas().shape)
    """)
    assert "pandas imported: False" in out
    assert "series type: timestamp[ns, tz=UTC]" in out
    assert "to_pandas: (1, 1)" in out


def test_tlake_command_runs_without_pandas():
    out = _run("""
        import sys, tempfile
        from trinitylake.cli.app import main
        d = tempfile.mkdtemp()
        sys.argv = ["tlake", "--lakehouse", d, "--no-audit", "init"]
        try:
            main()
        except SystemExit as e:
            assert not e.code, e.code
        sys.argv = ["tlake", "--lakehouse", d, "--no-audit", "walk", "--json"]
        try:
            main()
        except SystemExit as e:
            assert not e.code, e.code
        print("pandas imported:", "pandas" in sys.modules)
    """)
    assert "pandas imported: False" in out
