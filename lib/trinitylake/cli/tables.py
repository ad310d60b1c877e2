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
from trinitylake.cli.jobs import config_error, err_console, job_flags
from trinitylake.config import load_from_flags
from trinitylake.errors import ConfigError, TrinityLakeError
from trinitylake.job_flags import job_command
from trinitylake.redact import redact_text

if TYPE_CHECKING:
    from trinitylake.maintenance.results import JobResult

_Columns = list[tuple[str, Callable[[dict[str, Any]], object]]]

#: Job flags that belong to the `tlake` group (``tlake --lakehouse URI tables ...``).
_SET_BY_TLAKE = frozenset({"--lakehouse", "--control-uri"})


def register(cli: click.Group) -> None:
    cli.add_command(tables)


@click.group("tables")
def tables() -> None:
    """Maintain the lakehouse's Iceberg tables: snapshot expiry and orphan removal, consistent with
    the lakehouse's time travel (a table file any retained lakehouse version reaches stays)."""


class _TablesJobCommand(click.Command):
    """``tlake tables <command>``: the flags of job `job`, derived from the option table when
    the command runs or shows its help (building them costs time every `tlake` start would pay)."""

    def __init__(self, name: str, job: str, columns: _Columns, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.job = job
        self.columns = columns
        self._job_params: list[click.Parameter] | None = None

    def job_params(self) -> list[click.Parameter]:
        if self._job_params is None:
            self._job_params = [
                p for p in job_command(self.job).params if not _SET_BY_TLAKE.intersection(getattr(p, "opts", ()))
            ]
        return self._job_params

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        help_option = self.get_help_option(ctx)
        return [*self.params, *self.job_params(), *([help_option] if help_option is not None else [])]

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """A bad flag is a configuration error: one typed line, exit 2."""
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            path = f"tlake tables {self.name}"
            config_error(ConfigError(f"{path}: {e.format_message()} (see {path} --help)"))


def run_tables_job(ctx: Ctx, job: str, flags: dict[str, Any]) -> JobResult:
    """Run the tables' job `job` through the job runner (its config from ``--conf``, the
    environment and the given flags, as ``jobs/<job>.py`` loads it; its audit rows). Exits 2 on a
    configuration error and 1 on a failed run, naming the error in one line."""
    from trinitylake.jobs.runner import JobFailedError, run_job  # not at import: 0.4 s that `tlake --help` skips

    try:
        given = job_flags(ctx, flags)
        cfg = load_from_flags(job, given.pop("conf", None), given)
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


def _tables_command(name: str, job: str, columns: _Columns, help_text: str) -> click.Command:
    @click.pass_obj
    def command(ctx: Ctx, as_json: bool, **flags: Any) -> None:
        _emit(run_tables_job(ctx, job, flags), as_json, columns)

    return _TablesJobCommand(
        name,
        job,
        columns,
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
