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


#: What `tlake --help` must not import (issue 54): the data stack and the storage clients.
DATA_STACK = ("pyarrow", "s3fs", "botocore", "deltalake", "pyspark", "pyiceberg", "fsspec", "obstore", "numpy", "pandas")
#: What a command on a local lakehouse must not import: storage clients, delta-rs, Spark, PyIceberg.
NOT_FOR_LOCAL = ("s3fs", "botocore", "aiobotocore", "deltalake", "pyspark", "pyiceberg", "fsspec", "obstore", "pandas")


def _loaded_after(args: list[str], extra: str = "") -> set[str]:
    out = _run(f"""
        import sys
        from trinitylake.cli.app import cli
        {extra}
        try:
            cli({args!r}, prog_name="tlake", standalone_mode=False)
        except SystemExit as e:
            assert not e.code, e.code
        print("MODULES", " ".join(sorted({{m.split(".")[0] for m in sys.modules}})))
    """)
    return set(out.rpartition("MODULES ")[2].split())


def test_tlake_help_imports_no_data_stack():
    loaded = _loaded_after(["--help"])
    assert not loaded & set(DATA_STACK), sorted(loaded & set(DATA_STACK))
    assert "rich" not in loaded and "yaml" not in loaded  # the group's help is click's text alone
    assert "click" in loaded  # the check looks at the process that printed the help


def test_a_local_namespace_list_loads_no_storage_client_delta_or_spark(tmp_path):
    from trinitylake.lakehouse import Lakehouse

    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False).uri
    loaded = _loaded_after(["--lakehouse", lh, "namespace", "list", "--json"])
    assert "pyarrow" in loaded  # it did read the lakehouse's nodes
    assert not loaded & set(NOT_FOR_LOCAL), sorted(loaded & set(NOT_FOR_LOCAL))


def test_the_help_lists_each_command_as_its_module_defines_it():
    # `tlake --help` lists the commands of their own modules by `_SUMMARIES`, without importing
    # them; with every module loaded the list must read the same.
    out = _run("""
        import click, json
        from trinitylake.cli import app
        def listing():
            with click.Context(app.cli, info_name="tlake") as ctx:
                f = ctx.make_formatter()
                app.cli.format_commands(ctx, f)
                return f.getvalue()
        before, base = listing(), set(app.cli.commands)
        with click.Context(app.cli, info_name="tlake") as ctx:
            names = app.cli.list_commands(ctx)  # imports every command module
        own = {n: " ".join((c.short_help or c.help or "").split("\\n\\n")[0].split())
               for n, c in app.cli.commands.items() if n in names and not c.hidden and n not in base}
        print(json.dumps({"before": before, "after": listing(), "own": own, "summaries": app._SUMMARIES}))
    """)
    import json

    got = json.loads(out.splitlines()[-1])
    assert got["summaries"] == got["own"], (
        "cli/app.py's _SUMMARIES is out of date; paste:\n_SUMMARIES = " + json.dumps(got["own"], indent=4))
    assert got["before"] == got["after"]


def test_deferred_names_import_once_and_rebind_to_the_real_object():
    out = _run("""
        import sys
        from trinitylake import lazy
        ns = {}
        ns["m"] = lazy.module("colorsys", ns, "m")
        ns["f"] = lazy.attr("fractions", "Fraction", ns, "f")
        made = []
        ns["v"] = lazy.value(lambda: made.append(1) or {"k": 1}, ns, "v")
        held = ns["v"]  # a name imported elsewhere keeps the stand-in
        print("before", "colorsys" in sys.modules, "fractions" in sys.modules)
        print("use", ns["m"].rgb_to_hsv(1, 0, 0)[0], ns["f"](1, 2), held.get("k"), held.get("k"), len(made))
        print("rebound", ns["m"] is sys.modules["colorsys"], ns["f"] is sys.modules["fractions"].Fraction,
              ns["v"] == {"k": 1})
    """)
    assert "before False False" in out
    assert "use 0.0 1/2 1 1 1" in out
    assert "rebound True True True" in out
