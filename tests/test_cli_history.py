"""Issue #28 "The operator's path", the history views: `tlake show`, `versions`, `txn`,
`report`, each asserted through the CLI on a real lakehouse with its audit log."""

from __future__ import annotations

import json
import os
import re

import pytest
from click.testing import CliRunner

from trinitylake.cli import cli


@pytest.fixture
def lh_path(tmp_path):
    return str(tmp_path / "lh")


@pytest.fixture
def tl(lh_path):
    """Run `tlake --lakehouse <lh> ARGS` (audited); returns the click Result."""
    runner = CliRunner()

    def run(*args, input=None):
        return runner.invoke(cli, ["--lakehouse", lh_path, *args], input=input, catch_exceptions=False)

    return run


def _ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def _files(root: str) -> set[str]:
    """Every file of the lakehouse outside its control table (relative paths)."""
    out = set()
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x != "_control"]
        out |= {os.path.relpath(os.path.join(d, n), root) for n in names}
    return out


def _show(tl, *args):
    return json.loads(_ok(tl("show", "--json", *args)).stdout)


# ---- tlake txn ----------------------------------------------------------------------------
def test_failed_txn_prints_one_line_and_leaves_no_file(tl, lh_path):
    _ok(tl("init"))
    _ok(tl("namespace", "create", "a"))
    before = _files(lh_path)
    r = tl("txn", input="namespace create fresh\nnamespace create a\n")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines() == [
        "error (AlreadyExistsError): line 2 ('namespace create a'): namespace 'a' already exists; nothing was committed"
    ]
    assert _files(lh_path) == before  # the definition file of `fresh` is gone again
    # A line click refuses: one line too, nothing left.
    r = tl("txn", input="namespace create fresh\nnamespace alter a --bogus x\n")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines() == [
        "error (ValidationError): line 2: No such option '--bogus'; nothing was committed"
    ]
    assert _files(lh_path) == before


# ---- every txn_seq taken has an audit row -----------------------------------------------------
def test_failed_export_drop_writes_a_failed_row_at_its_seq(tl, lh_path):
    _ok(tl("init"))
    r = tl("export", "drop", "nope")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines() == ["error (SnapshotNotFoundError): no export named 'nope' (known: none)"]
    taken = sorted(int(n) for n in os.listdir(os.path.join(lh_path, "_control", "_seq")) if n.isdigit())
    rows = _show(tl, "--all")
    assert sorted(e["txn_seq"] for e in rows) == taken == [1, 2]
    failed = rows[0]
    assert (failed["txn_seq"], failed["state"], failed["command"], failed["version"]) == (2, "failed", "export drop", None)
    assert failed["error"] == "SnapshotNotFoundError: no export named 'nope' (known: none)"
    assert failed["arguments"] == {"name": "nope"}


# ---- ISO-8601 times -----------------------------------------------------------------------
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def test_txn_show_and_list_print_iso_times(tl):
    _ok(tl("init"))
    txn_id = _ok(tl("txn", "begin", "--distributed", "--ttl", "5m")).stdout.strip().splitlines()[-1]
    shown = _ok(tl("txn", "show", txn_id)).stdout
    assert re.search(rf"expire_at\s+│\s+{ISO}", shown), shown
    assert re.search(rf"began_at\s+│\s+{ISO}", shown), shown
    assert "millis" not in shown and not re.search(r"\b1\d{12}\b", shown), shown  # no epoch milliseconds
    listed = _ok(tl("txn", "list")).stdout
    assert "expires at (UTC)" in listed and re.search(ISO, listed) and not re.search(r"\b1\d{12}\b", listed), listed
    info = json.loads(_ok(tl("txn", "show", txn_id, "--json")).stdout)
    assert re.fullmatch(ISO, info["expire_at"]) and isinstance(info["expire_at_millis"], int)
