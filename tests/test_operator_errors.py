"""Errors an operator can act on, and job output that explains itself (issue "The operator's
path"): every OS error is one typed line naming the path, through the `tlake` commands and
the jobs, with nothing changed on disk; delta-rs errors are translated, not quoted.

The read-only lakehouse is a real read-only mount where this machine allows one (a bind mount
as root, or a user namespace otherwise); where it does not, EROFS is injected at the OS calls.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from trinitylake.cli.app import cli
from trinitylake.cli.jobs import render_result
from trinitylake.runs.results import JobResult

TLAKE = str(Path(sys.executable).with_name("tlake"))


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` with a hash of its bytes: "nothing changed on disk"."""
    if root.is_file():
        return {"": hashlib.sha256(root.read_bytes()).hexdigest()}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.output


@pytest.mark.parametrize("command", [["namespace", "list"], ["walk"], ["show"], ["versions"], ["init"],
                                     ["expire", "--dry-run"], ["orphans", "--dry-run"]])
def test_a_file_as_the_lakehouse_is_one_typed_line(tmp_path, command):
    f = tmp_path / "afile"
    f.write_text("x\n")
    before = _tree(tmp_path)
    code, out = _run("--lakehouse", str(f), *command)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert code == 1, out
    assert len(lines) == 1, out
    assert lines[0].startswith("error (StorageNotADirectoryError): ")
    assert "it is a file, not a folder" in lines[0] and str(f) in lines[0]
    assert "Traceback" not in out and "Os {" not in out
    assert _tree(tmp_path) == before


def test_delta_rs_errors_are_translated(tmp_path):
    """A control table under a file: delta-rs's own error (Rust's io::Error debug form) comes
    back as its message, with the path."""
    (tmp_path / "ctl").write_text("x\n")
    before = _tree(tmp_path)
    code, out = _run("--lakehouse", str(tmp_path / "lh"), "--control-uri", str(tmp_path / "ctl" / "t"), "init")
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert code == 1 and len(lines) == 1, out
    assert lines[0].startswith("error (ControlTableError): cannot create control table")
    assert "Not a directory" in lines[0] and str(tmp_path / "ctl" / "t") in lines[0]
    assert "Os {" not in out and "kind: NotADirectory" not in out
    assert _tree(tmp_path) == before


def _mount_read_only(path: Path) -> list[str] | None:
    """A prefix that runs a command with `path` mounted read-only in a mount namespace of its
    own (gone with the command), or None where the machine allows none: `unshare -m` as root,
    `unshare -rm` (a user namespace too) otherwise."""
    if shutil.which("unshare") is None:
        return None
    script = f'mount --bind "{path}" "{path}" && mount -o remount,ro,bind "{path}" && exec "$@"'
    prefix = ["unshare", "-m" if os.geteuid() == 0 else "-rm", "sh", "-c", script, "sh"]
    probe = subprocess.run([*prefix, "sh", "-c", f'! touch "{path}/.ro-probe" 2>/dev/null'], capture_output=True)
    return prefix if probe.returncode == 0 and not (path / ".ro-probe").exists() else None


def _inject_erofs(monkeypatch, root: Path) -> None:
    """EROFS from every OS call that would write under `root` (this machine mounts nothing)."""
    import builtins

    real_open, real_os_open, real_link, real_makedirs = builtins.open, os.open, os.link, os.makedirs
    under = str(root)

    def refuse(p: object) -> None:
        if str(p).startswith(under):
            raise OSError(errno.EROFS, "Read-only file system", str(p))

    def fake_open(file, mode="r", *a, **k):
        if any(c in mode for c in "wxa+"):
            refuse(file)
        return real_open(file, mode, *a, **k)

    def fake_os_open(p, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            refuse(p)
        return real_os_open(p, flags, *a, **k)

    def fake_link(src, dst, *a, **k):
        refuse(dst)
        return real_link(src, dst, *a, **k)

    def fake_makedirs(p, *a, **k):
        if not os.path.isdir(p):
            refuse(p)
        return real_makedirs(p, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(os, "open", fake_os_open)
    monkeypatch.setattr(os, "link", fake_link)
    monkeypatch.setattr(os, "makedirs", fake_makedirs)


@pytest.mark.parametrize("command", [["namespace", "create", "b"], ["expire", "--max-version-age", "0s"]])
def test_a_read_only_lakehouse_is_one_typed_line(tmp_path, monkeypatch, command):
    lh = tmp_path / "lh"
    assert _run("--lakehouse", str(lh), "--no-audit", "init")[0] == 0
    assert _run("--lakehouse", str(lh), "--no-audit", "namespace", "create", "a")[0] == 0
    before = _tree(lh)
    argv = ["--lakehouse", str(lh), "--no-audit", *command]
    prefix = _mount_read_only(lh)
    if prefix is not None:
        r = subprocess.run([*prefix, TLAKE, *argv], capture_output=True, text=True)
        code, out = r.returncode, r.stdout + r.stderr
    else:
        _inject_erofs(monkeypatch, lh)
        code, out = _run(*argv)
    errors = [ln for ln in out.splitlines() if ln.startswith("error")]
    assert code == 1, out
    assert len(errors) == 1 and "Traceback" not in out, out
    assert errors[0].startswith("error (StorageReadOnlyError): cannot ")
    assert "the file system is read-only" in errors[0] and str(lh) in errors[0]
    assert _tree(lh) == before


def test_typed_storage_errors_by_errno():
    from trinitylake.errors import StorageFullError, StoragePermissionError, StorageReadOnlyError
    from trinitylake.storage.retry import typed_error

    cases = [(errno.ENOSPC, StorageFullError, "no space left on the device"),
             (errno.EROFS, StorageReadOnlyError, "the file system is read-only"),
             (errno.EACCES, StoragePermissionError, "permission denied")]
    for code, cls, reason in cases:
        err = typed_error("create_exclusive", "file:///d/x.binpb", OSError(code, os.strerror(code), "/d/x.binpb"), 1)
        assert isinstance(err, cls) and isinstance(err, OSError) and err.errno == code
        assert str(err) == f"cannot create file:///d/x.binpb: {reason}"


def test_unknown_job_flag_names_the_command_typed(tmp_path):
    code, out = _run("--lakehouse", str(tmp_path), "orphans", "--bogus-flag")
    assert code == 2
    assert "tlake orphans: No such option '--bogus-flag'" in out and "jobs/orphans.py" not in out


def _render(result: JobResult, width: int = 60) -> str:
    console = Console(width=width, force_terminal=False, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    render_result(result, console)
    return console.export_text()


def test_result_layout_keeps_paths_whole_and_says_why_nothing_expired():
    plan = "file:///data/a-long-lakehouse-path/_maintenance/expire/expire-20261126T133325Z-e8555cd1/plan.json"
    r = JobResult(job="expire", run_id="expire-1", lakehouse="file:///data/a-long-lakehouse-path", status="succeeded",
                  version_before=22, version_after=22, plan_location=plan,
                  counts={"versions": 23, "versions_expired": 0, "versions_leftover": 0, "candidates": 0, "deleted": 0},
                  details={"stop_reason": "the newest 10 versions are kept"})
    out = _render(r)
    assert "nothing expired: the newest 10 versions are kept" in out
    assert "measure" in out.splitlines()[2] and "value" in out.splitlines()[2]
    assert f"plan: {plan}" in out  # one line, never folded mid-token by the table
    assert "lakehouse: file:///data/a-long-lakehouse-path" in out


def test_result_of_orphans_says_why_nothing_was_deleted():
    r = JobResult(job="orphans", run_id="orphans-1", lakehouse="file:///lh", status="succeeded",
                  counts={"candidates": 0, "deleted": 0, "too_young": 373, "listed_owned": 373},
                  details={"cutoff": "2026-11-23T13:33:30.508Z"})
    out = _render(r, width=200)
    assert ("nothing deleted: every format-owned file is reachable or younger than the cutoff "
            "2026-11-23T13:33:30.508Z (373 younger)") in out
