"""`tlake walk | expire | orphans`: the Spark maintenance jobs from the CLI.

Each command takes the lakehouse, storage options, control URI and audit switch from the
`tlake` group (``tlake --lakehouse URI expire ...``); its own parameters are the job's flags
(`trinitylake.job_flags.job_command`, from the option table), parsed once by click, so the CLI
and ``spark-submit jobs/<job>.py`` accept the same flags::

    tlake --lakehouse /data/lh expire --dry-run --max-version-age 14d
    tlake --lakehouse s3://bucket/lh orphans --older-than 5d --json

Each phase runs on the driver when it is small and on Spark executors when it is big
(``--execution auto|local|distributed``); Spark (``--master``, default ``local[*]``, or a
Connect server: ``--remote sc://host:port``, ``--spark-conf spark.api.mode=connect``) starts
only when a phase needs it. A spinner shows the phase; a summary table (or ``--json``: the result's ``to_dict()``) follows.
Exit codes: 0 ok, 1 job error, 2 configuration error.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trinitylake import progress
from trinitylake.cli.common import EXIT_USAGE, Ctx, Places, exit_code_of, explain, print_error
from trinitylake.config import JobConfig, load_from_flags
from trinitylake.errors import ConfigError
from trinitylake.job_flags import given_flags, job_command
from trinitylake.jobs.registry import JOBS, JobSpec
from trinitylake.jobs.runner import JobFailedError, run_job
from trinitylake.json_data import JsonObject
from trinitylake.redact import redact_text
from trinitylake.runs.results import JobResult
from trinitylake.spark.common import add_progress_listener
from trinitylake.storage import requests

out_console = Console()
err_console = Console(stderr=True, soft_wrap=True)


def register(cli: click.Group) -> None:
    """Add the maintenance job commands to the `tlake` group."""
    for spec in JOBS:
        if spec.command:
            cli.add_command(_job_command(spec))


# Job flags that belong to the `tlake` group (``tlake --lakehouse URI --control-uri URI <job>``):
# the command does not take them a second time (one help text, one place to give them).
_SET_BY_TLAKE = frozenset({"--lakehouse", "--control-uri"})


class _JobParams(click.Command):
    """The job's own flags (`trinitylake.job_flags.job_command`, derived from the option table)
    as a command's parameters, parsed once by click; a bad one is a configuration error told in
    one line, exit 2. Set `job` and `path` (the command as typed, named in the error line:
    click's command path is the test runner's name under CliRunner).

    The job's parameters are built when the command runs or shows its help: building them for
    every job on every `tlake` start cost ~0.4 s."""

    job: str
    path: str
    _job_params: list[click.Parameter] | None = None

    def job_params(self) -> list[click.Parameter]:
        if self._job_params is None:
            self._job_params = [p for p in job_command(self.job).params
                                if not _SET_BY_TLAKE.intersection(getattr(p, "opts", ()))]
        return self._job_params

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        help_option = self.get_help_option(ctx)
        return [*self.params, *self.job_params(), *([help_option] if help_option is not None else [])]

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """A bad flag is a configuration error, told as ``jobs/<job>.py`` tells it: one typed line."""
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            config_error(ConfigError(f"{self.path}: {e.format_message()} (see {self.path} --help)"))


class JobOptionsCommand(_JobParams):
    """A `tlake` command that runs job `job` with the job's own flags (`_JobParams`); the
    group's lakehouse, control URI and storage options join them as values, never as
    re-rendered argv."""

    def __init__(self, name: str, job: str, path: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.job, self.path = job, path


class JobOptionsGroup(_JobParams, click.Group):
    """A command group that runs job `job` when no subcommand is named (``tlake export --name
    N ...`` vs ``tlake export list``), with the job's own flags (`_JobParams`)."""

    def __init__(self, name: str, job: str, path: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.job, self.path = job, path


def config_error(error: ConfigError) -> NoReturn:
    print_error(error)
    sys.exit(EXIT_USAGE)


def _job_command(spec: JobSpec) -> click.Command:
    job = spec.name

    @click.pass_context
    def command(click_ctx: click.Context, as_json: bool, **flags: object) -> None:
        run_cli_job(job, click_ctx, flags, as_json)

    return JobOptionsCommand(
        job,
        job,
        f"tlake {job}",
        callback=command,
        params=[click.Option(["--json", "as_json"], is_flag=True, help="print the result as JSON")],
        help=spec.help + " Every job option below can be given after the command; the lakehouse and control table"
        f" are tlake's own: tlake --lakehouse URI {job} ...",
    )


def job_flags(ctx: Ctx, flags: JsonObject) -> JsonObject:
    """The job's flags as the job's parser gives them (`trinitylake.job_flags.given_flags`),
    with the group's settings: its lakehouse and control URI, and its storage options before
    the command's own ``--storage-option`` pairs (a later pair wins)."""

    given = given_flags(flags)
    given["lakehouse"] = ctx.require_uri()
    if ctx.control_uri:
        given["control_uri"] = ctx.control_uri
    group_pairs = [f"{k}={v}" for k, v in (ctx.storage_options or {}).items()]
    if group_pairs or "storage_options" in given:
        given["storage_options"] = [*group_pairs, *given.get("storage_options", [])]
    return given


def load_cli_config(job: str, ctx: Ctx, flags: JsonObject) -> JobConfig:
    """Job `job`'s config as ``jobs/<job>.py`` loads it (``--conf``, the environment, the
    flags), with the group's settings; a configuration error exits 2 in one line."""
    try:
        given = job_flags(ctx, flags)
        return load_from_flags(job, given.pop("conf", None), given)
    except ConfigError as e:
        config_error(e)


def fail_with(error: BaseException, places: Places | None = None) -> NoReturn:
    """The typed error line of a failed run (its cause, `trinitylake.cli.common.explain`, at
    the lakehouse or `places`); exit 2 for a configuration error, else 1."""
    error = explain(error, places)
    print_error(error)
    sys.exit(exit_code_of(error))


def run_cli_job(job: str, click_ctx: click.Context, flags: JsonObject, as_json: bool) -> None:
    ctx = click_ctx.obj
    cfg = load_cli_config(job, ctx, flags)
    result: JobResult | None = None
    error: BaseException | None = None
    with progress_display(f"tlake {job} {cfg.run_id}") as status:
        remove = add_progress_listener(status)
        try:
            result = run_job(job, cfg, audit=ctx.audit)
        except JobFailedError as e:
            result, error = e.result, e.__cause__ or e
        except Exception as e:  # noqa: BLE001 - one typed line (`fail_with`), never a traceback
            error = e
        finally:
            remove()
    if result is not None:
        if as_json:
            click.echo(json.dumps(result.to_dict(), indent=2, default=str))
        else:
            # The typed error line below says it; the result would say it a second time.
            render_result(dataclasses.replace(result, error=None) if error is not None else result)
    if error is not None:
        fail_with(error)


@contextmanager
def progress_display(title: str) -> Iterator[Callable[[str], None]]:
    """Progress with counts while a job runs; yields the function that shows a bare message.

    On a terminal: rich bars (done/total, rate, elapsed) on stderr. Otherwise (Airflow, cron, a
    pipe): one line per phase on stderr when it ends, so the output is a readable log."""

    if err_console.is_terminal:
        with progress.RichProgress(err_console, title) as bars:
            yield bars.status
        return
    remove = progress.add_listener(progress.LogProgress(lambda line: print(f"{title}: {line}", file=sys.stderr)))
    try:
        yield lambda what: None
    finally:
        remove()


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def outcome_lines(result: JobResult) -> list[str]:
    """Why a run did what it did, in words: above all why nothing was expired or deleted (the
    counts alone say `0` and hide the reason)."""
    c, d = result.counts, result.details
    lines: list[str] = []
    if result.job == "expire":
        # What this run expired (its own `versions_expired` counter), apart from the versions an
        # earlier or concurrent run expired whose files it finished deleting (`versions_leftover`):
        # a second concurrent run once claimed the first one's 36 versions as its own.
        n, left = int(c.get("versions_expired", 0)), int(c.get("versions_leftover", 0))
        reason = d.get("stop_reason")
        if n == 0:
            lines.append("nothing expired" + (f": {reason}" if reason else ""))
        else:
            verb = "would expire" if result.dry_run else "expired"
            lines.append(f"{verb} {n:,} versions (oldest retained now {d.get('oldest_retained_after')})"
                         + (f"; stopped because {reason}" if reason else ""))
        if left:
            verb = "would delete" if result.dry_run else "deleted"
            lines.append(f"{verb} the remaining files of {left:,} versions an earlier or concurrent run expired")
    if result.job in ("expire", "orphans") and result.status in ("succeeded", "dry_run"):
        cands = int(c.get("candidates", 0))
        if result.dry_run:
            lines.append(f"dry run: {cands:,} files would be deleted; nothing was deleted")
        elif cands == 0 and result.job == "orphans":
            young = int(c.get("too_young", 0))
            lines.append(f"nothing deleted: every format-owned file is reachable or younger than the cutoff "
                         f"{d.get('cutoff', '')} ({young:,} younger)".replace(" (0 younger)", ""))
        elif int(c.get("failed", 0)):
            lines.append(f"{int(c['failed']):,} of {cands:,} deletes failed; the next run retries them")
    return lines


# Counters of things other than files (versions, nodes, exports, tables, listing prefixes,
# batches) show under their own name; every other counter counts files: "files: <name>".
_NOT_FILE_COUNTS = ("versions", "node_", "unique_", "delete_", "exports", "pinned_versions", "self_contained_exports",
                    "table_pointers_", "list_prefixes", "batches")


def render_result(result: JobResult, console: Console | None = None) -> None:
    """A job result as a "measure / value" table of counts, bytes, seconds and requests, then
    the paths (lakehouse, plan, output) as whole lines: a table cell folds a long path
    mid-token, a line lets the terminal wrap it and keeps it copyable."""
    console = console or out_console
    colour = {"succeeded": "green", "dry_run": "cyan", "failed": "red"}.get(result.status, "yellow")
    console.print(f"tlake {result.job} {result.run_id}: [{colour}]{result.status}[/{colour}]", highlight=False)
    for line in outcome_lines(result):
        console.print(f"  {escape(redact_text(line))}", highlight=False, soft_wrap=True)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    t.add_column("measure", no_wrap=True)
    t.add_column("value", no_wrap=True)
    versions = f"{result.version_before}" + (
        f" -> {result.version_after}" if result.version_after not in (None, result.version_before) else "")
    t.add_row("version", versions)
    if result.txn_seq is not None:
        t.add_row("txn_seq", str(result.txn_seq))
    for k in sorted(result.counts):
        t.add_row(f"files: {k}" if not k.startswith(_NOT_FILE_COUNTS) else k,
                  f"{result.counts[k]:,}")
    for k in sorted(result.bytes):
        t.add_row(f"bytes: {k}", _human_bytes(result.bytes[k]))
    for k, v in result.seconds.items():
        t.add_row(f"seconds: {k}", f"{v:.2f}")
    req = result.requests or {}
    if any(req.values()):  # object-store requests: what the run cost
        kinds = [k for k in requests.KINDS if req.get(k)]
        t.add_row("requests", f"{requests.total_requests(req):,} (" + ", ".join(f"{k.upper()} {int(req[k]):,}" for k in kinds) + ")")
        t.add_row("bytes: store read / written",
                  f"{_human_bytes(int(req.get('bytes_read', 0)))} / {_human_bytes(int(req.get('bytes_written', 0)))}")
    console.print(t)
    paths = [("lakehouse", result.lakehouse), ("plan", result.plan_location), ("output", result.output_location)]
    for label, value in paths:
        if value:
            console.print(f"{label}: {escape(redact_text(value))}", highlight=False, soft_wrap=True)
    for w in result.details.get("warnings") or []:
        console.print(f"[yellow]warning[/yellow]: {escape(redact_text(str(w)))}", highlight=False, soft_wrap=True)
    if result.error:
        console.print(f"[red]error[/red]: {escape(redact_text(result.error))}", highlight=False, soft_wrap=True)
