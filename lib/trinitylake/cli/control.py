"""`tlake control redact`: remove credentials that earlier versions wrote into the control table
(see `trinitylake.control.redact` for what it rewrites and deletes)."""

from __future__ import annotations

import click

from trinitylake.cli.common import Ctx, emit, handle_errors


def _control_group(cli: click.Group) -> click.Group:
    """The `tlake control` group (shared with other control-table commands)."""
    existing = cli.commands.get("control")
    if isinstance(existing, click.Group):
        return existing

    @cli.group("control")
    def control() -> None:
        """Maintain the control table (the Delta audit log)."""

    return control


def register(cli: click.Group) -> None:
    group = _control_group(cli)

    @group.command("redact")
    @click.option("--dry-run", is_flag=True, help="count the rows holding credentials; change nothing")
    @click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
    @click.pass_obj
    @handle_errors
    def redact(ctx: Ctx, dry_run: bool, as_json: bool) -> None:
        """Rewrite control-table rows that hold credentials and delete their old copies.

        Rows written by earlier versions may quote storage credentials (e.g. the command line
        of `--storage-option secret=...`). This rewrites them redacted, then vacuums with
        retention 0 and drops the Delta log before a new checkpoint, so the clear text is
        physically gone. Time travel of the control table to versions before the rewrite is
        no longer possible; no row is lost.
        """
        # Here, not at the top: the control table's module loads pyarrow and deltalake (0.7 s of
        # every tlake command's start-up, measured with -X importtime).
        from trinitylake.control.redact import redact_control_table

        res = redact_control_table(ctx.lakehouse().auditor.control, dry_run=dry_run)

        def render(r: dict) -> None:
            if r["dry_run"]:
                click.echo(f"{r['rows_redacted']} of {r['rows_scanned']} control-table rows hold credentials "
                           f"(dry run: nothing changed)")
            elif r["rows_redacted"]:
                click.echo(f"redacted {r['rows_redacted']} of {r['rows_scanned']} control-table rows; removed "
                           f"{r['files_vacuumed']} old data file(s) and {r['log_files_deleted']} old log file(s) "
                           f"(table version {r['table_version']}; earlier versions can no longer be read)")
            else:
                click.echo(f"no credentials in the {r['rows_scanned']} control-table rows; nothing changed")

        emit(res.to_dict(), as_json, render)
