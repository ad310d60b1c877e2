"""`tlake tables expire-snapshots | remove-orphans`: maintenance of the lakehouse's Iceberg
tables, consistent with its time travel (`trinitylake.tables_maintenance`).

    tlake --lakehouse /data/lh tables expire-snapshots --older-than 5d --retain-last 3
    tlake --lakehouse /data/lh tables remove-orphans --older-than 7d --dry-run --json

Each command runs its job (``tables_expire`` / ``tables_orphans``, as ``jobs/<job>.py`` runs it:
the options of ``--conf`` YAML, the environment ``TLAKE_TABLES_EXPIRE_<KEY>`` and the flags)
through the job runner. Its flags are the job's own, derived from the option table
(`trinitylake.job_flags.job_command`, as ``tlake expire`` and ``spark-submit jobs/<job>.py``
get theirs), so they cannot drift from the job's options; the lakehouse, control URI and
storage options are ``tlake``'s. Each run writes a ``begin`` and a final row in the control table under the job's name
(`tlake show --job tables_expire` lists the runs), the table commits as rows of their own
parented to it, and per-table counts in the result. Exit codes: 0 ok, 1 the run failed or
refused (a typed error on one line), 2 a configuration error, 3 partial: a damaged table (a
metadata file, manifest list or manifest that cannot be read) was skipped, none of its files
deleted, and every other table maintained (`trinitylake.tables_maintenance.damage`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click
from rich.table import Table

from trinitylake.cli.common import Ctx, console
from trinitylake.cli.jobs import JobOptionsCommand, fail_with, load_cli_config
from trinitylake.jobs.runner import EXIT_PARTIAL, PARTIAL, JobFailedError, run_job
from trinitylake.runs.results import JobResult

_Columns = list[tuple[str, Callable[[dict[str, Any]], object]]]

def register(cli: click.Group) -> None:
    cli.add_command(tables)


@click.group("tables")
def tables() -> None:
    """Maintain the lakehouse's Iceberg tables: snapshot expiry and orphan removal, consistent with
    the lakehouse's time travel (a table file any retained lakehouse version reaches stays).

    A table whose metadata, manifest list or manifest cannot be read is skipped (none of its
    files deleted) and named; the others are maintained, and the command exits 3 (partial)."""


def run_tables_job(ctx: Ctx, job: str, flags: dict[str, object]) -> JobResult:
    """Run the tables' job `job` through the job runner (its config from ``--conf``, the
    environment and the given flags, as ``jobs/<job>.py`` loads it; its audit rows). Exits 2 on a
    configuration error and 1 on a failed run, naming the error in one line."""
    cfg = load_cli_config(job, ctx, flags)
    try:
        return run_job(job, cfg, audit=ctx.audit)
    except JobFailedError as e:
        fail_with(e.__cause__ or e)
    except Exception as e:  # noqa: BLE001 - one typed line, never a traceback
        fail_with(e)


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
    for line in result.details.get(PARTIAL) or []:
        click.echo(f"partial: {line}")


def _tables_command(name: str, job: str, columns: _Columns, help_text: str) -> click.Command:
    @click.pass_obj
    def command(ctx: Ctx, as_json: bool, **flags: object) -> None:
        result = run_tables_job(ctx, job, flags)
        _emit(result, as_json, columns)
        if result.status == PARTIAL:
            sys.exit(EXIT_PARTIAL)

    return JobOptionsCommand(
        name,
        job,
        f"tlake tables {name}",
        callback=command,
        params=[click.Option(["--json", "as_json"], is_flag=True, help="print the result as JSON")],
        help=help_text,
    )


tables.add_command(
    _tables_command(
        "expire-snapshots",
        "tables_expire",
        [
            ("snapshots expired", lambda r: r.get("snapshots_expired", 0)),
            ("version", lambda r: "" if r.get("version") is None else r["version"]),
            ("files to delete", lambda r: r.get("files_to_delete", 0)),
            ("files deleted", lambda r: r.get("files_deleted", 0)),
            ("files deferred", lambda r: r.get("files_deferred", 0)),
        ],
        "Expire old snapshots of every Iceberg table, many tables per lakehouse version, and delete the "
        "files only they reached. A file a retained lakehouse version still reaches is deferred: the first "
        "run after that version expires deletes it.",
    )
)
tables.add_command(
    _tables_command(
        "remove-orphans",
        "tables_orphans",
        [
            ("files listed", lambda r: r.get("files_listed", 0)),
            ("files live", lambda r: r.get("files_live", 0)),
            ("files young", lambda r: r.get("files_young", 0)),
            ("orphans", lambda r: r.get("orphans", 0)),
            ("files deleted", lambda r: r.get("files_deleted", 0)),
        ],
        "Delete the files under each Iceberg table's location that no live metadata reaches (the tables' "
        "own, and every retained lakehouse version's), older than --older-than (3d, also the floor).",
    )
)
