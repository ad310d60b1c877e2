"""`tlake` CLI: every format command through click's CliRunner, plus the real console script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from trinitylake.cli import cli

ROOT_FILE = "_" + "0" * 64 + ".arrow"


def _roots(path: str) -> int:
    return sum(1 for f in os.listdir(path) if f.startswith("_") and f.endswith(".arrow"))


@pytest.fixture
def lh_path(tmp_path):
    return str(tmp_path / "lh")


@pytest.fixture
def tl(lh_path):
    """Run `tlake --lakehouse <lh> --no-audit ARGS`; returns the click Result."""
    runner = CliRunner()

    def run(*args, input=None, audit=False, env=None):
        base = ["--lakehouse", lh_path] + ([] if audit else ["--no-audit"])
        return runner.invoke(cli, base + list(args), input=input, env=env, catch_exceptions=False)

    return run


def _ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def _fails(result, *needles):
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    for n in needles:
        assert n in result.stderr, result.stderr
    return result


def _json(result):
    return json.loads(_ok(result).stdout)


@pytest.fixture
def populated(tl, lh_path):
    _ok(tl("init", "--order", "4", "--node-max-bytes", "4096"))
    _ok(tl("namespace", "create", "sales", "--property", "owner=me"))
    for i in range(1, 6):
        _ok(tl("table", "create", f"sales.t{i}", "--property", f"i={i}"))
    return tl


def test_init_and_namespaces(tl, lh_path):
    r = _ok(tl("init", "--order", "4", "--node-max-bytes", "4096", "--txn-ttl", "1h", "--isolation", "serializable"))
    assert "version 0" in r.stdout
    assert os.path.exists(os.path.join(lh_path, ROOT_FILE))
    _fails(tl("init"), "AlreadyExistsError")
    assert "version 1" in _ok(tl("namespace", "create", "a", "--property", "k=v")).stdout
    _ok(tl("namespace", "create", "b"))
    assert _json(tl("namespace", "list", "--json")) == {"version": 2, "namespaces": ["a", "b"]}
    d = _json(tl("namespace", "describe", "a", "--json"))
    assert d["name"] == "a" and d["properties"] == {"k": "v"} and d["version"] == 2
    _ok(tl("namespace", "alter", "a", "--set", "x=1", "--unset", "k"))
    assert _json(tl("namespace", "describe", "a", "--json"))["properties"] == {"x": "1"}
    _ok(tl("namespace", "drop", "b"))
    assert _json(tl("namespace", "list", "--json"))["namespaces"] == ["a"]
    # human-readable output lists the names too
    assert "a" in _ok(tl("namespace", "list")).stdout


def test_tables(populated):
    tl = populated
    assert _json(tl("table", "list", "sales", "--json"))["tables"] == ["t1", "t2", "t3", "t4", "t5"]
    d = _json(tl("table", "describe", "sales.t2", "--json"))
    assert d["namespace"] == "sales" and d["name"] == "t2" and d["properties"] == {"i": "2"}
    assert d["table_type"] == "managed" and d["table_format"] == "iceberg"
    _ok(tl("table", "alter", "sales.t2", "--set", "a=b", "--unset", "i", "--metadata-location", "s3://m/1.json"))
    d = _json(tl("table", "describe", "sales.t2", "--json"))
    assert d["properties"] == {"a": "b"} and d["metadata_location"] == "s3://m/1.json"
    _ok(tl("table", "create", "sales.ext", "--metadata-location", "s3://m/ext.json"))
    assert _json(tl("table", "describe", "sales.ext", "--json"))["table_type"] == "external"
    _ok(tl("table", "drop", "sales.t1"))
    assert _json(tl("table", "list", "sales", "--json"))["tables"] == ["ext", "t2", "t3", "t4", "t5"]
    out = _ok(tl("table", "describe", "sales.t3")).stdout
    assert "t3" in out and "iceberg" in out


def test_versions_time_travel_and_rollback(populated, lh_path):
    tl = populated
    rows = _json(tl("versions", "--json"))
    assert [r["version"] for r in rows] == list(range(7))
    assert all(r["rollback_from_version"] is None for r in rows)
    assert _json(tl("table", "list", "sales", "--version", "3", "--json")) == {
        "namespace": "sales", "version": 3, "tables": ["t1", "t2"]}
    as_of = rows[4]["created_at_millis"]
    assert _json(tl("table", "list", "sales", "--as-of", str(as_of), "--json"))["version"] == 4
    assert _json(tl("table", "list", "sales", "--as-of", rows[4]["created_at"], "--json"))["version"] == 4
    assert "version 7" in _ok(tl("rollback", "--to", "3")).stdout
    assert _json(tl("table", "list", "sales", "--json"))["tables"] == ["t1", "t2"]
    rows = _json(tl("versions", "--json"))
    assert rows[-1]["version"] == 7 and rows[-1]["rollback_from_version"] == 6 and rows[-1]["previous_version"] == 6
    assert "rollback to v3 (from v6)" in _ok(tl("versions")).stdout
    _fails(tl("table", "list", "sales", "--version", "99"), "VersionNotFoundError", "latest version is 7")
    bad_time = tl("table", "list", "sales", "--as-of", "not-a-time")  # a usage error: exit 2, one line
    assert bad_time.exit_code == 2 and bad_time.stderr.count("\n") == 1 and "'--as-of'" in bad_time.stderr
    _fails(tl("rollback", "--to", "7"), "older version")
    assert _roots(lh_path) == 8


def test_txn_from_stdin(populated, lh_path):
    tl = populated
    before = _roots(lh_path)
    ops = "# a comment\nnamespace create multi\n\ntable create multi.a --property k=v\ntable create multi.b\n"
    r = _ok(tl("txn", input=ops))
    assert "committed 3 operations as version 7" in r.stdout
    assert _roots(lh_path) == before + 1
    assert _json(tl("table", "list", "multi", "--json"))["tables"] == ["a", "b"]
    # A failing line commits nothing.
    bad = "table create multi.c\ntable create multi.a\ntable drop sales.t1\n"
    r = _fails(tl("txn", input=bad), "line 2", "nothing was committed")
    assert "AlreadyExistsError" in r.stderr
    assert _roots(lh_path) == before + 1
    assert _json(tl("table", "list", "multi", "--json"))["tables"] == ["a", "b"]
    # Verbs other than create/drop/alter are refused; so are unknown options.
    _fails(tl("txn", input="table list multi\n"), "only namespace/table create|drop|alter")
    _fails(tl("txn", input="namespace create x --bogus\n"), "line 1")
    _fails(tl("txn", input="rollback --to 1\n"))
    # Regression: an unbalanced quote made shlex raise ValueError, printed as a traceback.
    _fails(tl("txn", input="namespace create ok\nnamespace create \"abc\n"), "line 2", "No closing quotation")
    assert _roots(lh_path) == before + 1
    # Empty input: nothing to commit, no version.
    assert "nothing to commit" in _ok(tl("txn", input="\n# only comments\n")).stdout
    # --isolation and --file
    _ok(tl("txn", "--isolation", "serializable", input="table drop sales.t1\ntable alter sales.t2 --set z=1\n"))
    assert _roots(lh_path) == before + 2
    assert _json(tl("table", "describe", "sales.t2", "--json"))["properties"] == {"i": "2", "z": "1"}


def test_errors_are_one_line_exit_1(populated, lh_path, tmp_path):
    tl = populated
    before = _roots(lh_path)
    _fails(tl("table", "create", "sales.bad name"), "InvalidNameError")
    _fails(tl("table", "create", "sales.t1"), "AlreadyExistsError", "sales.t1")
    _fails(tl("table", "create", "nope.t1"), "ObjectNotFoundError", "nope")
    _fails(tl("table", "drop", "sales.zz"), "ObjectNotFoundError")
    _fails(tl("table", "create", "noDot"), "NAMESPACE.NAME")
    _fails(tl("namespace", "create", "x" * 101), "InvalidNameError")
    _fails(tl("namespace", "drop", "sales"), "not empty")
    _fails(tl("table", "describe", "sales.zz"), "does not exist")
    assert _roots(lh_path) == before
    r = CliRunner().invoke(cli, ["--lakehouse", str(tmp_path / "missing"), "--no-audit", "namespace", "list"])
    _fails(r, "LakehouseNotFoundError")
    # No lakehouse given at all: a usage error (exit 2), still without a traceback.
    r = CliRunner().invoke(cli, ["--no-audit", "namespace", "list"], env={"TLAKE_LAKEHOUSE": None})
    assert r.exit_code == 2 and "TLAKE_LAKEHOUSE" in r.output and "Traceback" not in r.output


def test_lakehouse_from_environment(lh_path):
    runner = CliRunner()
    env = {"TLAKE_LAKEHOUSE": lh_path}
    _ok(runner.invoke(cli, ["--no-audit", "init", "--order", "4"], env=env))
    _ok(runner.invoke(cli, ["--no-audit", "namespace", "create", "envns"], env=env))
    r = runner.invoke(cli, ["--no-audit", "namespace", "list", "--json"], env=env)
    assert json.loads(_ok(r).stdout)["namespaces"] == ["envns"]


def test_real_console_script(lh_path, tmp_path):
    tlake = os.path.join(os.path.dirname(sys.executable), "tlake")
    assert os.path.exists(tlake), tlake
    env = {**os.environ, "TLAKE_LAKEHOUSE": lh_path}

    def run(*args, input=None):
        return subprocess.run([tlake, "--no-audit", *args], env=env, input=input, capture_output=True, text=True,
                              timeout=120)

    assert run("init", "--order", "4", "--node-max-bytes", "4096").returncode == 0
    p = run("txn", input="namespace create s\ntable create s.a\ntable create s.b\n")
    assert p.returncode == 0, p.stderr
    p = run("table", "list", "s", "--json")
    assert json.loads(p.stdout)["tables"] == ["a", "b"]
    p = run("table", "create", "s.a")
    assert p.returncode == 1 and "AlreadyExistsError" in p.stderr and "Traceback" not in p.stderr


@pytest.fixture
def control_available():
    try:
        import trinitylake.control  # noqa: F401
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"control table not importable: {e}")  # a broken install fails, never skips


def test_audited_commands(control_available, tl, lh_path):
    # Auditing on: commits also append to the control table at <lakehouse>/_control.
    _ok(tl("init", "--order", "4", audit=True))
    _ok(tl("namespace", "create", "audited", audit=True))
    _ok(tl("txn", input="table create audited.a\ntable create audited.b\n", audit=True))
    assert os.path.isdir(os.path.join(lh_path, "_control"))
    assert _json(tl("table", "list", "audited", "--json", audit=True))["tables"] == ["a", "b"]
    rows = _json(tl("versions", "--json", audit=True))
    seqs = [r["txn_seq"] for r in rows]
    assert all(s is not None for s in seqs) and seqs == sorted(seqs)
    _fails(tl("table", "create", "audited.a", audit=True), "AlreadyExistsError")
    hist = _json(tl("show", "--json", audit=True))
    assert any(e["version"] == 2 for e in hist)


def test_as_of_naive_iso_is_utc(populated):
    tl = populated
    rows = _json(tl("versions", "--json"))
    t = rows[2]["created_at"]  # "...+00:00"
    naive = t.split("+")[0]
    assert _json(tl("namespace", "list", "--as-of", naive, "--json"))["version"] == 2


def test_ambiguous_dotted_table_name_is_refused_and_changes_nothing(populated, lh_path):
    """`sales.my.orders` reads as table `my.orders` to us and as table `orders` of namespace
    `sales.my` to PyIceberg and Spark: the CLI refuses it in one line instead of guessing."""
    tl = populated
    before = _roots(lh_path)
    for verb in (("table", "create", "sales.my.orders"), ("table", "describe", "sales.my.orders"),
                 ("table", "drop", "sales.my.orders")):
        r = _fails(tl(*verb), "ValidationError", "ambiguous", "tuple")
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert _roots(lh_path) == before
    assert _json(tl("table", "list", "sales", "--json"))["tables"] == [f"t{i}" for i in range(1, 6)]


def test_walk_labels_only_file_counters_as_files(populated):
    out = _ok(populated("walk", "--execution", "local")).stdout
    assert re.search(r"files: reachable\s+\d", out), out
    for not_files in ("exports", "pinned_versions", "self_contained_exports", "table_pointers_none", "node_reads"):
        assert re.search(rf"^\s*{not_files}\s+\d", out, re.M), (not_files, out)
        assert f"files: {not_files}" not in out, out
