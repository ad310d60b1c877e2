"""`tlake walk | expire | orphans`: the Spark maintenance jobs from the CLI.

Each command takes the lakehouse, storage options, control URI and audit switch from the
`tlake` group (``tlake --lakehouse URI expire ...``) and passes every other argument through
to the job's own argument parser (`trinitylake.job_flags.job_command`), so the CLI and
``spark-submit jobs/<job>.py`` accept the same flags::

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
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trinitylake.errors import ConfigError, TrinityLakeError
from trinitylake.jobs.registry import JOBS, JobSpec
from trinitylake.maintenance.results import JobResult
from trinitylake.redact import redact_text

out_console = Console()
err_console = Console(stderr=True, soft_wrap=True)


def register(cli: click.Group) -> None:
    """Add the maintenance job commands to the `tlake` group."""
    for spec in JOBS:
        if spec.command:
            cli.add_command(_job_command(spec))


# Job flags that `tlake` itself sets: the group's --lakehouse/--control-uri/--storage-option and
# the command's own --master. Listing them again would give the same option two help texts.
_SET_BY_TLAKE = frozenset({"--lakehouse", "--control-uri", "--storage-option", "--master", "-h", "--help"})


def job_option_rows(job: str) -> list[tuple[str, str]]:
    """(flags, help) of every job option the user may add after ``tlake <job>``, taken from
    the job's own argument parser (`trinitylake.job_flags.job_command`), which is therefore the
    one place a job option's help is written, for both ``tlake <job> --help`` and
    ``spark-submit jobs/<job>.py --help``."""
    from trinitylake.job_flags import job_command

    rows = []
    for param in job_command(job).params:
        flags = [*param.opts, *param.secondary_opts]
        if not isinstance(param, click.Option) or _SET_BY_TLAKE.intersection(flags):
            continue
        metavar = param.metavar if isinstance(param.metavar, str) else None
        name = "/".join(flags) + (f" {metavar}" if metavar else "")
        rows.append((name, param.help or ""))
    return rows


class _JobCommand(click.Command):
    """A job command whose help lists the job's options in click's format, in one block.

    The rows are built only when help is shown: building the parser for every job on every
    `tlake` start cost ~0.4 s."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_options(ctx, formatter)
        with formatter.section("Job options (also in --conf YAML and TLAKE_<JOB>_<KEY> variables)"):
            formatter.write_dl(job_option_rows(self.name or ""))


def _job_command(spec: JobSpec) -> click.Command:
    job = spec.name

    @click.command(
        job,
        cls=_JobCommand,
        help=spec.help + " Every job option below can be given after the command; the lakehouse, control table and"
        f" storage options are tlake's own: tlake --lakehouse URI {job} ...",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    @click.option("--master", default="local[*]", show_default=True, help="Spark master, when a phase goes to Spark")
    @click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
    @click.pass_context
    def command(click_ctx: click.Context, master: str, as_json: bool) -> None:
        run_cli_job(job, click_ctx, master, as_json)

    return command


def job_argv(ctx: Any, master: str, extra: list[str]) -> list[str]:
    """The job's argument list: the group's settings first, then the user's flags."""
    argv = ["--lakehouse", ctx.require_uri(), "--master", master]
    for k, v in (ctx.storage_options or {}).items():
        argv += ["--storage-option", f"{k}={v}"]
    if ctx.control_uri:
        argv += ["--control-uri", ctx.control_uri]
    return argv + list(extra)


def run_cli_job(job: str, click_ctx: click.Context, master: str, as_json: bool) -> None:
    from trinitylake.job_flags import parse_job_args
    from trinitylake.spark.common import add_progress_listener
    from trinitylake.spark.runner import JobFailedError, run_job

    ctx = click_ctx.obj
    try:
        cfg = parse_job_args(job, job_argv(ctx, master, click_ctx.args), prog=f"tlake {job}")
    except ConfigError as e:
        err_console.print(f"[red]error[/red] (ConfigError): {escape(redact_text(str(e)))}", highlight=False)
        sys.exit(2)
    result: JobResult | None = None
    error: BaseException | None = None
    with progress_display(f"tlake {job} {cfg.run_id}") as status:
        remove = add_progress_listener(status)
        try:
            result = run_job(job, cfg, audit=ctx.audit)
        except JobFailedError as e:
            result, error = e.result, e.__cause__ or e
        except TrinityLakeError as e:
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
        err_console.print(f"[red]error[/red] ({type(error).__name__}): {escape(redact_text(str(error)))}", highlight=False)
        sys.exit(2 if isinstance(error, ConfigError) else 1)


@contextmanager
def progress_display(title: str) -> Iterator[Callable[[str], None]]:
    """Progress with counts while a job runs; yields the function that shows a bare message.

    On a terminal: rich bars (done/total, rate, elapsed) on stderr. Otherwise (Airflow, cron, a
    pipe): one line per phase on stderr when it ends, so the output is a readable log."""
    from trinitylake import progress

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
        n = int(c.get("versions_expired", 0)) + int(c.get("versions_leftover", 0))
        reason = d.get("stop_reason")
        if n == 0:
            lines.append("nothing expired" + (f": {reason}" if reason else ""))
        else:
            verb = "would expire" if result.dry_run else "expired"
            lines.append(f"{verb} {n:,} versions (oldest retained now {d.get('oldest_retained_after')})"
                         + (f"; stopped because {reason}" if reason else ""))
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
        t.add_row(f"files: {k}" if not k.startswith(("versions", "node_", "unique_", "delete_")) else k,
                  f"{result.counts[k]:,}")
    for k in sorted(result.bytes):
        t.add_row(f"bytes: {k}", _human_bytes(result.bytes[k]))
    for k, v in result.seconds.items():
        t.add_row(f"seconds: {k}", f"{v:.2f}")
    req = result.requests or {}
    if any(req.values()):  # object-store requests: what the run cost
        from trinitylake.storage import requests  # not at import: `tlake --help` skips storage

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
