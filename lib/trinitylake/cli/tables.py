"""`tlake tables expire-snapshots | remove-orphans`: maintenance of the lakehouse's Iceberg
tables, consistent with its time travel (`trinitylake.tables_maintenance`).

    tlake --lakehouse /data/lh tables expire-snapshots --older-than 5d --retain-last 3
    tlake --lakehouse /data/lh tables remove-orphans --older-than 7d --dry-run --json

Each run writes a ``begin`` and a final row to the control table under its own command
(``tables expire-snapshots`` / ``tables remove-orphans``: `tlake show --job "tables expire-snapshots"`
lists them), with its counts as metrics; its table commits are rows of their own, parented to
it. Exit codes: 0 ok, 1 the run failed or refused (a typed error on one line).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from trinitylake.cli.common import Ctx, _kv, console, handle_errors

if TYPE_CHECKING:
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.maintenance.results import JobResult


def register(cli: click.Group) -> None:
    cli.add_command(tables)


@click.group("tables")
def tables() -> None:
    """Maintain the lakehouse's Iceberg tables: snapshot expiry and orphan removal, consistent with
    the lakehouse's time travel (a table file any retained lakehouse version reaches stays)."""


def _run_id(job: str) -> str:
    return f"{job}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def run_audited(
    lakehouse: Lakehouse,
    command: str,
    job: str,
    arguments: dict[str, Any],
    run_id: str | None,
    fn: Callable[[JobResult], JobResult],
) -> JobResult:
    """Run `fn` between the run's ``begin`` and final control-table rows (as the job runner
    does for the lakehouse's jobs); returns its result, status set."""
    from trinitylake.lakehouse.audit import job_begin, job_end
    from trinitylake.maintenance.results import JobResult
    from trinitylake.redact import redact_text, redact_value

    arguments = redact_value(arguments, learn=True)
    rid = run_id or _run_id(job)
    result = JobResult(job=command, run_id=rid, lakehouse=lakehouse.uri, dry_run=bool(arguments.get("dry_run")))
    result.version_before = lakehouse.latest_version()
    started = datetime.now(UTC)
    result.txn_seq = job_begin(lakehouse.auditor, command, rid, arguments, result.version_before)
    error: BaseException | None = None
    try:
        result = fn(result)
        result.status = "dry_run" if result.dry_run else "succeeded"
    except BaseException as e:
        error = e
        result.status = "failed"
        result.error = redact_text(f"{type(e).__name__}: {e}")
    try:
        result.version_after = lakehouse.latest_version()
    except Exception:  # noqa: BLE001 - keep what we know
        pass
    try:
        job_end(
            lakehouse.auditor,
            result.txn_seq,
            command,
            rid,
            arguments,
            started,
            status=result.status,
            metrics=result.metrics(),
            version_before=result.version_before,
            version_after=result.version_after,
            error=error,
        )
    except Exception as e:  # noqa: BLE001 - the audit row never hides the run's own outcome
        click.echo(f"warning: could not write the final control-table row: {redact_text(str(e))}", err=True)
    if error is not None:
        raise error
    return result


def _summary(result: JobResult, columns: list[tuple[str, Callable[[dict[str, Any]], object]]]) -> None:
    t = Table("table", *[c for c, _ in columns], title=f"{result.job} {result.run_id}: {result.status}")
    for name, row in sorted((result.details.get("tables") or {}).items()):
        t.add_row(name, *[str(f(row)) for _, f in columns])
    console.print(t)
    click.echo("  ".join(f"{k}={v}" for k, v in sorted(result.counts.items())))
    if result.plan_location:
        click.echo(f"plan: {result.plan_location}")


def _emit(result: JobResult, as_json: bool, columns: list[tuple[str, Callable[[dict[str, Any]], object]]]) -> None:
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        _summary(result, columns)


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
@click.option(
    "--tables",
    "names",
    multiple=True,
    help="NS or NS.TABLE (repeat or comma-separate); default: every Iceberg table of the latest version",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="tables committed per lakehouse version",
)
@click.option(
    "--catalog-property",
    "catalog_properties",
    multiple=True,
    help="PyIceberg catalog or FileIO property key=value (for the metadata files it writes)",
)
@click.option("--dry-run", is_flag=True, help="plan only: commit and delete nothing")
@click.option("--run-id", default=None, help="run id (default: generated)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.pass_obj
@handle_errors
def expire_snapshots_command(
    ctx: Ctx,
    older_than: str | None,
    retain_last: int | None,
    names: tuple[str, ...],
    batch_size: int,
    catalog_properties: tuple[str, ...],
    dry_run: bool,
    run_id: str | None,
    as_json: bool,
) -> None:
    """Expire old snapshots of every Iceberg table, many tables per lakehouse version, and delete the
    files only they reached. A file a retained lakehouse version still reaches is deferred: the first
    run after that version expires deletes it."""
    from trinitylake.tables_maintenance.common import EXPIRE_COMMAND, EXPIRE_JOB
    from trinitylake.tables_maintenance.expire import ExpireOptions, expire_snapshots
    from trinitylake.util import parse_duration_ms

    opts = ExpireOptions(
        older_than_ms=parse_duration_ms(older_than) if older_than else None,
        retain_last=retain_last,
        tables=list(names),
        dry_run=dry_run,
        batch_size=batch_size,
        catalog_properties=_kv(catalog_properties, "--catalog-property"),
    )
    arguments = {
        "older_than": older_than,
        "retain_last": retain_last,
        "tables": list(names),
        "dry_run": dry_run,
        "batch_size": batch_size,
    }
    lh = ctx.lakehouse()
    result = run_audited(lh, EXPIRE_COMMAND, EXPIRE_JOB, arguments, run_id, lambda r: expire_snapshots(lh, opts, r))
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
@click.option(
    "--older-than",
    default="3d",
    show_default=True,
    help="only files modified longer ago than this; below 3 days needs --unsafe-min-age",
)
@click.option("--unsafe-min-age", is_flag=True, help="allow --older-than below 3 days (in-flight writes may be lost)")
@click.option(
    "--tables",
    "names",
    multiple=True,
    help="NS or NS.TABLE (repeat or comma-separate); default: every Iceberg table of the latest version",
)
@click.option(
    "--prefix-mismatch-mode",
    type=click.Choice(["error", "ignore", "delete"]),
    default="error",
    show_default=True,
    help="a listed file whose path a live file names through another scheme/authority",
)
@click.option("--equal-scheme", "equal_schemes", multiple=True, help="SCHEME=SCHEME it equals (s3a, s3n = s3 always)")
@click.option("--equal-authority", "equal_authorities", multiple=True, help="AUTHORITY=AUTHORITY it equals")
@click.option("--dry-run", is_flag=True, help="plan only: delete nothing")
@click.option("--run-id", default=None, help="run id (default: generated)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.pass_obj
@handle_errors
def remove_orphans_command(
    ctx: Ctx,
    older_than: str,
    unsafe_min_age: bool,
    names: tuple[str, ...],
    prefix_mismatch_mode: str,
    equal_schemes: tuple[str, ...],
    equal_authorities: tuple[str, ...],
    dry_run: bool,
    run_id: str | None,
    as_json: bool,
) -> None:
    """Delete the files under each Iceberg table's location that no live metadata reaches (the
    tables' own, and every retained lakehouse version's), older than --older-than."""
    from trinitylake.tables_maintenance.common import ORPHANS_COMMAND, ORPHANS_JOB
    from trinitylake.tables_maintenance.orphans import OrphanOptions, check_options, remove_orphans
    from trinitylake.util import parse_duration_ms

    opts = OrphanOptions(
        older_than_ms=parse_duration_ms(older_than),
        unsafe_min_age=unsafe_min_age,
        tables=list(names),
        dry_run=dry_run,
        prefix_mismatch_mode=prefix_mismatch_mode,
        equal_schemes=_kv(equal_schemes, "--equal-scheme"),
        equal_authorities=_kv(equal_authorities, "--equal-authority"),
    )
    check_options(opts)  # before anything is written
    arguments = {
        "older_than": older_than,
        "unsafe_min_age": unsafe_min_age,
        "tables": list(names),
        "dry_run": dry_run,
        "prefix_mismatch_mode": prefix_mismatch_mode,
    }
    lh = ctx.lakehouse()
    result = run_audited(lh, ORPHANS_COMMAND, ORPHANS_JOB, arguments, run_id, lambda r: remove_orphans(lh, opts, r))
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
