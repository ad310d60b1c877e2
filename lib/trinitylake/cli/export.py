"""`tlake export`: snapshot exports from the command line.

    tlake --lakehouse SRC export --name N --target URI [--version V | --as-of T]
                                 [--full | --partial --depth D | --minimal]
                                 [--target-storage-option KEY=VALUE ...] [--json] [any export option]
    tlake --lakehouse SRC export list [--json]
    tlake --lakehouse SRC export drop NAME

Its flags are the export job's own, from the option table (`trinitylake.job_flags`, as every
job command's: defaults shown, ``--reference-time``, ``--run-id``, ``--remote``, ``--keep-runs``,
...), plus the shortcuts ``--full``/``--partial``/``--minimal`` (``--mode``) and ``--no-verify``;
contradictory flags are a usage error (exit 2). The export itself is the job of
`trinitylake.jobs.export.job`, run through the shared job runner
(audit rows; ``--execution auto`` keeps a small export on the driver's threads without starting
Spark, ``distributed`` sends every phase to a Spark session: ``--master``, ``--spark-conf``,
e.g. ``spark.api.mode=connect``). The target's storage options: its own when any is given
(``--target-storage-option``, ``target_storage_options`` in ``--conf``,
``TLAKE_EXPORT_TARGET_STORAGE_OPTIONS``, or the ``TLAKE_TARGET_*`` variables of an ``s3://``
target; `trinitylake.storage.target_options`), and then only those; else the lakehouse's when
the scheme is the same, else the environment's (``TLAKE_S3_ENDPOINT_URL``, ``AWS_*``).
``drop`` and ``list`` only touch the lakehouse definition.
Registered by `trinitylake.cli` when this module exists.
"""

from __future__ import annotations

import click
from rich.table import Table

from trinitylake.cli.common import Ctx, console, emit, handle_errors
from trinitylake.cli.jobs import JobOptionsGroup, fail_with, load_cli_config, progress_display
from trinitylake.job_flags import given_flags
from trinitylake.jobs.export.target import drop_export, list_exports
from trinitylake.jobs.runner import JobFailedError, run_job
from trinitylake.json_data import JsonObject
from trinitylake.spark.common import add_progress_listener


def _summary(r: JsonObject) -> str:
    d, c, b, s = r["details"], r["counts"], r["bytes"], r["seconds"]
    mode = d.get("mode")
    if mode == "partial":
        mode = f"partial, depth {d.get('depth')}"
    lines = [
        f"exported version {d.get('version')} of {r['lakehouse']} as {d.get('name')!r} ({mode}) to {d.get('target')}",
        f"  files: {c.get('planned', 0)} planned, {c.get('copied', 0)} copied, {c.get('skipped', 0)} already there, "
        f"{c.get('verified', 0)} verified, {c.get('rewritten', 0)} rewritten",
        f"  bytes: {b.get('planned', 0)} planned, {b.get('copied', 0)} copied, {b.get('skipped', 0)} already there",
        "  seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in s.items()),
        "  ran on: " + (", ".join(f"{k.removeprefix('export.')} {v.get('where')}"
                                  for k, v in (d.get("execution") or {}).items()) or "-")
        + ("" if (d.get("spark") or {}).get("started") else " (Spark not started)"),
        f"  root: {d.get('root')}",
    ]
    tables = d.get("tables")
    if tables:
        lines.append(f"  tables: {tables.get('copied_tables', 0)} of {tables.get('tables', 0)} copied with "
                     f"{tables.get('snapshots', 0)} snapshots ({tables.get('snapshots_mode')}), "
                     f"{tables.get('files', 0)} files ({tables.get('copied', 0)} copied, "
                     f"{tables.get('skipped', 0)} already there), {tables.get('bytes_copied', 0)} bytes, "
                     f"on the {tables.get('where', 'driver')}")
        lines += [f"  table left as a pointer: {p}" for p in tables.get("left_as_pointers", [])]
        if tables.get("external_files"):
            lines.append(f"  {tables['external_files']} table files outside the lakehouse stay where they are")
    if d.get("pinned_version") is not None:
        lines.append(f"  pins source version {d['pinned_version']} ({c.get('external_refs', 0)} references into the source)")
    if d.get("recorded_in_version") is not None:
        lines.append(f"  recorded in lakehouse version {d['recorded_in_version']}")
    elif not d.get("recorded"):
        lines.append("  (already recorded by an earlier run)")
    return "\n".join(lines)


def _check_flags(given: dict[str, object], *, full: bool, partial: bool, minimal: bool, no_verify: bool) -> None:
    """Contradictory flags are refused (a usage error) and the shortcuts become the job's
    options: ``--full``/``--partial``/``--minimal`` its ``mode`` (one of them; ``--depth``
    alone means ``--partial``), ``--no-verify`` its ``verify_checksum``."""
    modes = [m for m, on in (("full", full), ("partial", partial), ("minimal", minimal)) if on]
    said = [f"--{m}" for m in modes]
    if given.get("mode") is not None:
        modes.append(str(given["mode"]).lower())
        said.append(f"--mode {given['mode']}")
    if len(set(modes)) > 1:
        raise click.UsageError(f"{' and '.join(said)} contradict each other: give one of --full, --partial "
                               f"(with --depth D) or --minimal")
    mode = modes[0] if modes else ("partial" if given.get("depth") is not None else None)
    if given.get("depth") is not None and mode != "partial":
        raise click.UsageError(f"--depth goes with --partial, not with --{mode}")
    if mode is not None:
        given["mode"] = mode
    if no_verify:
        if given.get("verify_checksum"):
            raise click.UsageError("--no-verify and --verify-checksum contradict each other: give one")
        given["verify_checksum"] = False
    if given.get("with_tables") and mode in ("partial", "minimal"):
        raise click.UsageError(f"--with-tables copies the tables of a full export; it contradicts --{mode}")
    if given.get("version") is not None and given.get("as_of") is not None:
        raise click.UsageError("--version and --as-of contradict each other: give one")


def register(cli: click.Group) -> None:
    """Add the `export` command group to the `tlake` CLI."""

    @click.pass_context
    def export(click_ctx: click.Context, as_json: bool, full: bool, partial: bool, minimal: bool, no_verify: bool,
               **flags: object) -> None:
        """Export a version to its own root URI (full, partial or minimal), or manage exports."""
        if click_ctx.invoked_subcommand is not None:
            return
        ctx: Ctx = click_ctx.obj
        given = given_flags(flags)
        if not given:
            raise click.UsageError("give --name and --target (or a subcommand: list, drop)")
        _check_flags(given, full=full, partial=partial, minimal=minimal, no_verify=no_verify)
        cfg = load_cli_config("export", ctx, given)
        try:
            with progress_display(f"tlake export {cfg.run_id}") as status:
                remove = add_progress_listener(status)
                try:
                    result = run_job("export", cfg, audit=ctx.audit)
                finally:
                    remove()
        except Exception as e:  # noqa: BLE001 - one line, never a traceback
            # The typed error of the export (name clash, expired version, bad target, ...)
            # is what the user needs to read (the runner has recorded the failed run), or its
            # cause: a missing bucket, a target that is a file.
            places = [("export target", cfg["target"], cfg["target_storage_options"] or cfg.storage_options),
                      ("lakehouse", cfg.lakehouse, cfg.storage_options)]
            fail_with(e.__cause__ or e if isinstance(e, JobFailedError) else e, places)
        emit(result.to_dict(), as_json, lambda r: click.echo(_summary(r)))

    export = JobOptionsGroup(
        "export", "export", "tlake export", callback=export, invoke_without_command=True,
        params=[
            click.Option(["--full"], is_flag=True, help="copy every reachable file: --mode full (the default)"),
            click.Option(["--partial"], is_flag=True, help="copy the nodes down to --depth: --mode partial"),
            click.Option(["--minimal"], is_flag=True, help="copy the root node only: --mode minimal"),
            click.Option(["--no-verify"], is_flag=True, help="check sizes only, not checksums: --no-verify-checksum"),
            click.Option(["--json", "as_json"], is_flag=True, help="print the job result as JSON"),
        ],
        help="Export a version to its own root URI (full, partial or minimal), or manage exports (list, drop). "
             "Every option of the export job below can be given; the lakehouse and control table are tlake's own: "
             "tlake --lakehouse URI export --name N --target URI ...",
    )
    cli.add_command(export)

    @export.command("list")
    @click.option("--json", "as_json", is_flag=True, help="print JSON")
    @click.pass_obj
    @handle_errors
    def export_list(ctx: Ctx, as_json: bool) -> None:
        """List the exports recorded in the lakehouse definition."""


        rows = list_exports(ctx.lakehouse().definition())

        def render(rows: list[JsonObject]) -> None:
            t = Table("name", "version", "pinned", "root")
            for r in rows:
                t.add_row(r["name"], str(r["version"]), "" if r["pinned_version"] is None else str(r["pinned_version"]),
                          str(r["root"]))
            console.print(t)

        emit({"exports": rows}, as_json, lambda o: render(o["exports"]))

    @export.command("drop")
    @click.argument("name")
    @click.pass_obj
    @handle_errors
    def export_drop(ctx: Ctx, name: str) -> None:
        """Forget an export: remove its record and its pin (the exported files are kept)."""

        lh = ctx.lakehouse()
        d = lh.definition()
        loc = d.exported_snapshots.get(name)
        row = next((r for r in list_exports(d) if r["name"] == name), None)
        txn = lh.begin()
        txn.mutate_definition(drop_export(name), f"drop export {name}")
        v = txn.commit(command="export drop", arguments={"name": name})
        # The reader asks "which export went": its own version first; the lakehouse version that
        # records the drop comes after, named as such.
        of = f" of version {row['version']}" if row is not None and row.get("version") is not None else ""
        pin = f", pin on version {row['pinned_version']} released" if row is not None and row.get("pinned_version") is not None else ""
        where = f"; its files stay at {loc.rsplit('/', 1)[0]}" if loc else ""
        click.echo(f"dropped export {name}{of}{pin} (recorded in lakehouse version {v}){where}")
