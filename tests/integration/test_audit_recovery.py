"""The control table never loses or hides a committed version.

A writer killed between the tree commit and its audit row leaves a version with no
`committed` row; `tlake show` (and the next writer) reconcile it from the tree as `recovered`,
at the txn_seq the root carries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from trinitylake.cli import cli
from trinitylake.control import ControlTable
from trinitylake.lakehouse import Lakehouse

TLAKE = [sys.executable, "-m", "trinitylake"]


def _run(args, env=None):
    return subprocess.run([*TLAKE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120)


def test_killed_after_commit_before_audit_is_shown_as_recovered(tmp_path):
    uri = str(tmp_path / "lh")
    assert _run(["--lakehouse", uri, "init"]).returncode == 0
    assert _run(["--lakehouse", uri, "namespace", "create", "a"]).returncode == 0
    killed = _run(["--lakehouse", uri, "table", "create", "a.t1"], env={"TLAKE_TEST_CRASH_AT": "after_hint"})
    assert killed.returncode == -9, killed.stderr
    lh = Lakehouse.open(uri)
    assert lh.latest_version() == 2
    rows = ControlTable(uri + "/_control").records()
    assert not [r for r in rows if r.version_after == 2], "the killed writer cannot have written its row"

    res = CliRunner().invoke(cli, ["--lakehouse", uri, "show", "--json"])
    assert res.exit_code == 0, res.output
    entries = json.loads(res.output)
    by_version = {e["version"]: e for e in entries if e["version"] is not None}
    assert set(by_version) == {0, 1, 2}
    assert by_version[2]["record_type"] == "recovered"
    assert by_version[2]["txn_seq"] == lh.load_root(2).txn_seq
    assert any("create table a.t1" in c for c in by_version[2]["changes"])
    seqs = [e["txn_seq"] for e in entries]
    assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == len(seqs)
    # show persisted the reconciliation exactly once
    CliRunner().invoke(cli, ["--lakehouse", uri, "show", "--json"])
    rec = [r for r in ControlTable(uri + "/_control").records() if r.record_type == "recovered"]
    assert [r.version_after for r in rec] == [2]


def test_next_writer_reconciles_old_unaudited_version(tmp_path, monkeypatch):
    from trinitylake.lakehouse.audit import Auditor

    uri = str(tmp_path / "lh")
    lh = Lakehouse.create(uri)
    lh.create_namespace("a")
    # Simulate a lost audit row: the control append fails for this one commit.
    real = ControlTable.append
    monkeypatch.setattr(ControlTable, "append", lambda self, rows: (_ for _ in ()).throw(OSError("disk full")))
    assert lh.create_namespace("b") == 2  # committed despite the audit failure
    monkeypatch.setattr(ControlTable, "append", real)
    monkeypatch.setattr(Auditor, "RECONCILE_AFTER_SECONDS", 0.0)
    lh.create_namespace("c")
    rows = ControlTable(uri + "/_control").records()
    assert [r.record_type for r in rows if r.version_after == 2] == ["recovered"]
    assert [r.record_type for r in rows if r.version_after == 3] == ["committed"]


@pytest.mark.parametrize("content", ["not delta", None])
def test_bad_control_location_refuses_before_writing(tmp_path, content):
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False)
    ctl = tmp_path / "lh" / "_control"
    ctl.mkdir()
    if content:
        (ctl / "foreign.csv").write_text(content)
    else:
        import pyarrow as pa
        from deltalake import write_deltalake

        write_deltalake(str(ctl), pa.table({"txn_seq": ["x"], "other": [1]}))
    before = sorted(p.name for p in (tmp_path / "lh").iterdir())
    res = CliRunner().invoke(cli, ["--lakehouse", uri, "namespace", "create", "x"])
    assert res.exit_code == 1
    assert "ControlTableError" in res.output or "control" in res.output.lower()
    assert sorted(p.name for p in (tmp_path / "lh").iterdir()) == before
    assert Lakehouse.open(uri, audit=False).latest_version() == 0
