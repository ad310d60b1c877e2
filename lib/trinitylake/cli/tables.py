"""`tlake tables expire-snapshots | remove-orphans`: maintenance of the lakehouse's Iceberg
tables, consistent with its time travel (`trinitylake.tables_maintenance`).

    tlake --lakehouse /data/lh tables expire-snapshots --older-than 5d --retain-last 3
    tlake --lakehouse /data/lh tables remove-orphans --older-than 7d --dry-run --json

Each command runs its job (``tables_expire`` / ``tables_orphans``, as ``jobs/<job>.py`` runs it:
the options of ``--conf`` YAML, the environment ``TLAKE_TABLES_EXPIRE_<KEY>`` and the flags)
through the job runner: a ``begin`` and a final row in the control table under the job's name
(`tlake show --job tables_expire` lists the runs), the table commits as rows of their own
parented to it, and per-table counts in the result. Exit codes: 0 ok, 1 the run failed or
refused (a typed error on one line), 2 a configuration error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from trinitylake.cli.common import Ctx, console

if TYPE_CHECKING:
    from trinitylake.maintenance.results import JobResult

_Columns = list[tuple[str, Callable[[dict[str, Any]], object]]]


def register(cli: click.Group) -> None:
    cli.add_command(tables)


@click.group("tables")
def tables() -> None:
    """Maintain the lakehouse's Iceberg tables: snapshot expiry and orphan removal, consistent with
    the lakehouse's time travel (a table file any retained lakehouse version reaches stays)."""


def run_tables_job(ctx: Ctx, job: str, options: dict[str, Any], conf: str | None) -> JobResult:
    """Run the tables' job `job` through the job runner (its config from `conf`, the
    environment and `options`, as ``jobs/<job>.py`` loads it; its audit rows). Exits 2 on a
    configuration error and 1 on a failed run, naming the error in one line."""
    from trinitylake.cli.jobs import config_error, err_console
    from trinitylake.config import load_job_config
    from trinitylake.errors import ConfigError, TrinityLakeError
    from trinitylake.jobs.runner import JobFailedError, run_job
    from trinitylake.redact import redact_text

    overrides = {k: v for k, v in options.items() if v not in (None, False, "")}
    overrides["lakehouse"] = ctx.require_uri()
    if ctx.control_uri:
        overrides["control_uri"] = ctx.control_uri
    if ctx.storage_options:
        overrides["storage_options"] = dict(ctx.storage_options)
    try:
        cfg = load_job_config(job, conf, overrides=overrides)
    except ConfigError as e:
        config_error(e)
    error: BaseException
    try:
        return run_job(job, cfg, audit=ctx.audit)
    except JobFailedError as e:
        error = e.__cause__ or e
    except TrinityLakeError as e:
        error = e
    err_console.print(f"error ({type(error).__name__}): {redact_text(str(error))}", highlight=False, markup=False)
    sys.exit(2 if isinstance(error, ConfigError) else 1)


def _emit(result: JobResult, as_json: bool, columns: _Columns) -> None:
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
        return
    t = Table("table", *[c for c, _ in columns], title=f"tlake tables {result.job} {result.run_id}: {result.status}")
    for name, row in sorted((result.details.get("tables") or {}).items()):
        t.add_row(name, *[str(f(row)) for _, f in columns])
    console.print(t)
    click.echo("  ".join(f"{k}={v}" for k, v in sorted(result.counts.items())))
    if result.plan_location:
        click.echo(f"plan: {result.plan_location}")


_TABLES_HELP = "NS or NS.TABLE (repeat or comma-separate); default: every Iceberg table of the latest version"


@tables.command("expire-snapshots")
@click.option(
    "--older-than",
    default=None,
    help="expire snapshots older than this age (7d, 36h, 90s); default: each table's "
    "history.expire.max-snapshot-age-ms (5 days)",
)
@click.option(
    "--retain-last",
    type=click.IntRange(min=1),
    default=None,
    help="keep at least N snapshots of each branch; default: each table's history.expire.min-snapshots-to-keep (1)",
)
@click.option("--tables", "names", multiple=True, help=_TABLES_HELP)
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=None, help="tables committed per lakehouse version (100)"
)
@click.option("--dry-run", is_flag=True, help="plan only: commit and delete nothing")
@click.option("--reference-time", default=None, help="the instant treated as now (ISO-8601 or epoch ms)")
@click.option("--run-id", default=None, help="run id (default: generated)")
@click.option("--conf", "conf", default=None, help="YAML of job options (conf/tables_expire.yaml)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.pass_obj
def expire_snapshots_command(
    ctx: Ctx,
    older_than: str | None,
    retain_last: int | None,
    names: tuple[str, ...],
    batch_size: int | None,
    dry_run: bool,
    reference_time: str | None,
    run_id: str | None,
    conf: str | None,
    as_json: bool,
) -> None:
    """Expire old snapshots of every Iceberg table, many tables per lakehouse version, and delete the
    files only they reached. A file a retained lakehouse version still reaches is deferred: the first
    run after that version expires deletes it."""
    result = run_tables_job(
        ctx,
        "tables_expire",
        {
            "older_than": older_than,
            "retain_last": retain_last,
            "tables": ",".join(names),
            "batch_size": batch_size,
            "dry_run": dry_run,
            "reference_time": reference_time,
            "run_id": run_id,
        },
        conf,
    )
    _emit(
        result,
        as_json,
        [
            ("expired", lambda r: len(r.get("expired_snapshots") or [])),
            ("version", lambda r: "" if r.get("version") is None else r["version"]),
            ("to delete", lambda r: sum((r.get("to_delete") or {}).values())),
            ("deleted", lambda r: r.get("deleted", 0)),
            ("deferred", lambda r: r.get("deferred", 0)),
        ],
    )


@tables.command("remove-orphans")
@click.option("--older-than", default=None, help="only files modified longer ago than this (3d, also the floor)")
@click.option("--unsafe-min-age", is_flag=True, help="allow --older-than below 3 days (in-flight writes may be lost)")
@click.option("--tables", "names", multiple=True, help=_TABLES_HELP)
@click.option(
    "--prefix-mismatch",
    type=click.Choice(["error", "ignore", "delete"]),
    default=None,
    help="a listed file whose path a live file names through another scheme or authority (error)",
)
@click.option("--equal-schemes", default=None, help="from=to,... scheme equivalences (s3a and s3n are s3 always)")
@click.option("--equal-authorities", default=None, help="from=to,... authority (bucket) equivalences")
@click.option("--dry-run", is_flag=True, help="plan only: delete nothing")
@click.option("--reference-time", default=None, help="the instant treated as now (ISO-8601 or epoch ms)")
@click.option("--run-id", default=None, help="run id (default: generated)")
@click.option("--conf", "conf", default=None, help="YAML of job options (conf/tables_orphans.yaml)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.pass_obj
def remove_orphans_command(
    ctx: Ctx,
    older_than: str | None,
    unsafe_min_age: bool,
    names: tuple[str, ...],
    prefix_mismatch: str | None,
    equal_schemes: str | None,
    equal_authorities: str | None,
    dry_run: bool,
    reference_time: str | None,
    run_id: str | None,
    conf: str | None,
    as_json: bool,
) -> None:
    """Delete the files under each Iceberg table's location that no live metadata reaches (the
    tables' own, and every retained lakehouse version's), older than --older-than."""
    result = run_tables_job(
        ctx,
        "tables_orphans",
        {
            "older_than": older_than,
            "unsafe_min_age": unsafe_min_age,
            "tables": ",".join(names),
            "prefix_mismatch": prefix_mismatch,
            "equal_schemes": equal_schemes,
            "equal_authorities": equal_authorities,
            "dry_run": dry_run,
            "reference_time": reference_time,
            "run_id": run_id,
        },
        conf,
    )
    _emit(
        result,
        as_json,
        [
            ("listed", lambda r: r.get("listed", 0)),
            ("live", lambda r: r.get("live", 0)),
            ("young", lambda r: r.get("young", 0)),
            ("orphans", lambda r: r.get("orphans", 0)),
            ("deleted", lambda r: r.get("deleted", 0)),
        ],
    )
