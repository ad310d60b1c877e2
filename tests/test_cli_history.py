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


# ---- tlake show -----------------------------------------------------------------------------
def test_show_gives_one_row_per_export_naming_it(tl, lh_path, tmp_path):
    _ok(tl("init"))
    _ok(tl("namespace", "create", "a"))
    _ok(tl("export", "--name", "weekly-1", "--target", str(tmp_path / "w1")))
    _ok(tl("export", "drop", "weekly-1"))
    rows = _show(tl)
    exports = [e for e in rows if e["command"].startswith("export")]
    assert [(e["label"], e["version"], e["state"]) for e in exports] == [
        ("export drop weekly-1", 3, "committed"), ("export weekly-1", 2, "committed")]
    run = exports[1]
    assert len(run["commit_seqs"]) == 1 and run["commit_seqs"][0] > run["txn_seq"]  # its recording commit, folded in
    assert [e["version"] for e in rows].count(2) == 1
    text = _ok(tl("show")).stdout
    assert re.search(r"│ export weekly-1\s+│", text) and re.search(r"│ export drop weekly-1\s+│", text), text
    assert f"(commit {run['commit_seqs'][0]})" in text


def test_show_says_how_many_rows_it_hides(tl):
    _ok(tl("init"))
    _ok(tl("namespace", "create", "a"))
    _ok(tl("walk"))
    _ok(tl("walk"))
    _ok(tl("expire", "--dry-run"))
    out = _ok(tl("show")).stdout
    assert out.rstrip().splitlines()[-1] == "3 rows hidden (2 walks, 1 dry run): --all shows them"
    assert "hidden" not in _ok(tl("show", "--all")).stdout
    assert "hidden" not in _ok(tl("show", "--job", "walk")).stdout
    assert [e["command"] for e in _show(tl)] == ["namespace create", "init"]  # --json: the rows only


# ---- tlake versions -------------------------------------------------------------------------
def test_versions_labels_a_rollback_with_its_target_and_source(tl):
    _ok(tl("init"))
    for ns in ("a", "b", "c", "d"):
        _ok(tl("namespace", "create", ns))
    _ok(tl("rollback", "--to", "2"))
    out = _ok(tl("versions")).stdout
    row5 = next(ln for ln in out.splitlines() if ln.startswith("│ 5 "))
    assert "rollback to v2 (from v4)" in row5, out
    assert "rollback of" not in out
    v5 = json.loads(_ok(tl("versions", "--json")).stdout)[5]
    assert (v5["rollback_to_version"], v5["rollback_from_version"]) == (2, 4)
    assert _show(tl, "--version", "5")[0]["rollback_to"] == 2


# ---- a corrupt old root -------------------------------------------------------------------
def _corrupt_root(lh_path: str, version: int) -> str:
    from trinitylake.format.paths import root_name

    path = os.path.join(lh_path, root_name(version))
    data = bytearray(open(path, "rb").read())
    mid = len(data) // 2
    data[mid:mid + 2] = bytes(b ^ 0xFF for b in data[mid:mid + 2])
    with open(path, "wb") as f:
        f.write(data)
    return path


def _snapshot(root: str) -> dict[str, tuple[int, int]]:
    out = {}
    for d, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def test_corrupt_old_root_is_marked_in_versions_and_report(tl, lh_path, tmp_path):
    _ok(tl("init"))
    for ns in ("a", "b", "c"):
        _ok(tl("namespace", "create", ns))
    _corrupt_root(lh_path, 1)
    before = _snapshot(lh_path)

    out = _ok(tl("versions")).stdout
    row1 = [ln for ln in out.splitlines() if ln.startswith("│ 1 ")][0]
    assert "corrupt: CorruptNodeError: node file" in row1, out
    rows = json.loads(_ok(tl("versions", "--json")).stdout)
    assert [r["version"] for r in rows] == [0, 1, 2, 3]
    assert rows[1]["corrupt"].startswith("CorruptNodeError: node file ") and "\n" not in rows[1]["corrupt"]
    assert [r["corrupt"] for r in (rows[0], rows[2], rows[3])] == [None, None, None]
    assert rows[3]["changes"] == 1

    report = tmp_path / "r.html"
    r = _ok(tl("report", "--out", str(report), "--json"))
    summary = json.loads(r.stdout)
    assert (summary["oldest_version"], summary["latest_version"]) == (0, 3)
    page = report.read_text()
    version_row = page[page.index('<tr data-version="1">'):]
    version_row = version_row[:version_row.index("</tr>")]
    assert "corrupt: CorruptNodeError: node file" in version_row
    assert "1 version root(s) cannot be read and are marked corrupt: v1." in page
    report.unlink()
    assert _snapshot(lh_path) == before  # neither wrote anything (no audit row, no reconcile)


def test_failed_job_prints_its_error_once(tl, lh_path):
    _ok(tl("init"))
    for ns in ("a", "b", "c"):
        _ok(tl("namespace", "create", ns))
    _corrupt_root(lh_path, 1)
    r = tl("expire", "--dry-run")
    assert r.exit_code == 1
    both = r.stdout + r.stderr
    assert both.count("is not a readable Arrow IPC file") == 1, both
    assert r.stderr.strip().splitlines()[-1].startswith("error (CorruptNodeError): node file ")


# ---- tlake report: job runs -------------------------------------------------------------------
def test_report_job_runs_show_non_default_arguments_export_names_and_export_drop(tl, tmp_path):
    _ok(tl("init"))
    _ok(tl("namespace", "create", "a"))
    target = tmp_path / "w1"
    _ok(tl("export", "--name", "weekly-1", "--target", str(target), "--threads", "3"))
    _ok(tl("export", "drop", "weekly-1"))
    _ok(tl("walk"))
    report = tmp_path / "r.html"
    _ok(tl("report", "--out", str(report)))
    page = report.read_text()

    def job_cell(label: str) -> str:
        i = page.index(f"<td class=\"job\"><b>{label}</b>")
        return page[i:page.index("</td>", i)]

    export = job_cell("export weekly-1")
    args = re.search(r'<div class="args mono"[^>]*>([^<]*)</div>', export).group(1)
    assert args == f"name=weekly-1 target=file://{target} threads=3"  # only what differs from the defaults
    drop = job_cell("export drop weekly-1")
    assert re.search(r'<div class="args mono"[^>]*>name=weekly-1</div>', drop)
    assert '<tr data-job="export drop"' in page
    assert '<div class="args mono"' not in job_cell("walk")  # a walk with every default shows none
