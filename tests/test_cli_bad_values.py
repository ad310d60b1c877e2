"""Every `tlake` command, a bad value for each kind of option it has: one line on stderr, the
documented exit code (2: a usage or configuration error, found before any work; 1: the
operation failed), never a traceback.

The commands are found by walking the click tree (`trinitylake.cli.cli`), and each option's
kind by its click type or, for the job commands, the option table (`trinitylake.options`): a
command or option added later is covered without editing this file.
"""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from trinitylake.cli import cli
from trinitylake.cli.common import DurationType, TimeType
from trinitylake.cli.jobs import _JobParams
from trinitylake.config import job_options

#: A bad value of each kind of option, and what the error line must name besides the flag.
BAD: dict[str, tuple[str, str]] = {
    "duration": ("5", "no unit"),
    "int": ("many", "many"),
    "choice": ("bogus", "bogus"),
    "timestamp": ("not-a-time", "not-a-time"),
    "uri": ("s3://", "s3://"),
    "storage_options": ("endpointurl=http://x", "endpointurl"),
    "spark_conf": ("novalue", "novalue"),
    "versions": ("one,two", "one,two"),
    "id": ("bad id!", "bad id!"),
    "export_name": ("123", "123"),
    "path": ("/nonexistent-dir/none.yaml", "none.yaml"),
    "dir_path": ("/", "/"),
}
#: Values for a command's required arguments (a bad option is refused before they are used).
ARGS = {"name": "ns1", "full_name": "ns1.t", "namespace_name": "ns1", "txn_id": "t1"}
#: Server-side and start-up behaviour of `catalog serve` is another suite's (tests/rest_catalog);
#: its options are still walked here.


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    out: list[tuple[tuple[str, ...], click.Command]] = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            if cmd.invoke_without_command:
                out.append(((*path, name), cmd))
            out += _commands(cmd, (*path, name))
        else:
            out.append(((*path, name), cmd))
    return out


COMMANDS = _commands(cli)


def _kind(cmd: click.Command, param: click.Option) -> str | None:
    if isinstance(cmd, _JobParams) and param.name in job_options(cmd.job):
        kind = job_options(cmd.job)[param.name].kind
        return None if kind in ("bool", "text") else kind
    if param.name == "conf":
        return "path"
    t = param.type
    if isinstance(t, DurationType):
        return "duration"
    if isinstance(t, TimeType):
        return "timestamp"
    if isinstance(t, click.Choice):
        return "choice"
    if isinstance(t, click.types.IntParamType):
        return "int"
    if isinstance(t, click.Path) and not t.dir_okay:
        return "dir_path"
    if isinstance(t, click.File):
        return "path"
    return None


def _cases() -> list[Any]:
    cases = []
    for path, cmd in COMMANDS:
        params = cmd.get_params(click.Context(cmd))
        args = [ARGS.get(p.name or "", "x") for p in params if isinstance(p, click.Argument) and p.required]
        for p in params:
            if not isinstance(p, click.Option) or p.is_flag or p.hidden:
                continue
            kind = _kind(cmd, p)
            if kind is not None:
                flag = max(p.opts, key=len)
                cases.append(pytest.param(path, args, flag, kind, id=f"{' '.join(path)} {flag} ({kind})"))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def lakehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("bad-values") / "lh")
    result = CliRunner().invoke(cli, ["--lakehouse", uri, "--no-audit", "init"])
    assert result.exit_code == 0, result.stderr
    return uri


def _one_line(result: Any) -> str:
    text = result.stdout + result.stderr
    assert "Traceback" not in text, text
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_the_walk_finds_every_command_and_every_kind() -> None:
    """The tree walk is not vacuous: it reaches the nested and the job commands, and the option
    kinds the issue names."""
    paths = {" ".join(p) for p, _ in COMMANDS}
    assert {"init", "namespace create", "table list", "export", "export drop", "expire", "walk", "orphans",
            "tables expire-snapshots", "tables remove-orphans", "show", "txn begin", "report", "catalog serve",
            "control redact", "versions", "rollback"} <= paths
    kinds = {c.values[3] for c in CASES}
    assert {"duration", "int", "choice", "uri", "storage_options", "timestamp", "versions", "path"} <= kinds
    assert len(CASES) > 120


@pytest.mark.parametrize(("path", "args", "flag", "kind"), CASES)
def test_a_bad_value_is_one_line_and_exit_2(lakehouse: str, path: tuple[str, ...], args: list[str], flag: str,
                                            kind: str) -> None:
    bad, named = BAD[kind]
    if kind == "storage_options":
        # S3's keys are known (another fsspec store takes its own); the export's target is given.
        lakehouse = "s3://bucket/lh"
        args = [*args, "--name", "x", "--target", "s3://other/x"] if path == ("export",) else args
    result = CliRunner().invoke(cli, ["--lakehouse", lakehouse, "--no-audit", *path, *args, f"{flag}={bad}"])
    line = _one_line(result)
    assert result.exit_code == 2, (result.exit_code, line)
    assert named in line, line


@pytest.mark.parametrize("path", [pytest.param(p, id=" ".join(p)) for p, _ in COMMANDS])
def test_an_unknown_storage_option_is_one_line_naming_it_before_any_command(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, ["--lakehouse", "s3://bucket/lh", "--storage-option", "endpointurl=http://x", *path])
    line = _one_line(result)
    assert result.exit_code == 2 and "endpointurl" in line and "endpoint_url" in line, line


@pytest.mark.parametrize("path", [pytest.param(p, id=" ".join(p)) for p, _ in COMMANDS])
def test_an_unknown_flag_is_one_line_and_exit_2(lakehouse: str, path: tuple[str, ...]) -> None:
    """click's usage errors (4 lines of its own) in one line, exit 2, for every command."""
    result = CliRunner().invoke(cli, ["--lakehouse", lakehouse, *path, "--no-such-flag"])
    line = _one_line(result)
    assert result.exit_code == 2 and "--no-such-flag" in line, line


#: Commands that fail on a lakehouse that does not exist, with the arguments they need: an
#: error of the operation, exit 1, one line.
FAILING = [
    ("namespace", "list"), ("namespace", "create", "ns1"), ("namespace", "describe", "ns1"), ("table", "list", "ns1"),
    ("table", "create", "ns1.t"), ("table", "describe", "ns1.t"), ("versions",), ("rollback", "--to", "0"),
    ("show",), ("export", "list"), ("export", "drop", "x"), ("txn", "list"), ("control", "redact"),
    ("walk",), ("expire", "--dry-run"), ("orphans", "--dry-run"), ("tables", "expire-snapshots", "--dry-run"),
    ("tables", "remove-orphans", "--dry-run"),
]


@pytest.mark.parametrize("args", [pytest.param(a, id=" ".join(a)) for a in FAILING])
def test_an_operation_error_is_one_line_and_exit_1(tmp_path: Any, args: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, ["--lakehouse", str(tmp_path / "none"), "--no-audit", *args])
    line = _one_line(result)
    assert result.exit_code == 1, (result.exit_code, line)
    assert "none" in line, line  # names the lakehouse


def test_init_in_a_folder_that_is_a_file_names_the_file(tmp_path: Any) -> None:
    (tmp_path / "afile").write_text("x")
    result = CliRunner().invoke(cli, ["--lakehouse", str(tmp_path / "afile" / "lh"), "init"])
    line = _one_line(result)
    assert result.exit_code == 1 and "afile" in line and "\x1b[" not in line, line
