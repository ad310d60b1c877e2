"""`tlake export`: snapshot exports from the command line.

    tlake --lakehouse SRC export --name N --target URI [--version V | --as-of T]
                                 [--full | --partial --depth D | --minimal]
                                 [--target-storage-option KEY=VALUE ...] [--json]
    tlake --lakehouse SRC export list [--json]
    tlake --lakehouse SRC export drop NAME

The export itself is the job of `trinitylake.jobs.export.job`, run through the shared job runner
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

from trinitylake.cli.common import Ctx, _kv, console, emit, handle_errors
from trinitylake.cli.jobs import progress_display
from trinitylake.config import load_job_config
from trinitylake.errors import TrinityLakeError
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


def register(cli: click.Group) -> None:
    """Add the `export` command group to the `tlake` CLI."""

    @cli.group("export", invoke_without_command=True)
    @click.option("--name", default=None, help="name to record the export under (unique per lakehouse)")
    @click.option("--target", default=None, help="root URI to export to (outside the lakehouse)")
    @click.option("--target-storage-option", "target_storage_options", multiple=True, metavar="KEY=VALUE",
                  help="fsspec option of the target's storage (e.g. endpoint_url=..., key=..., secret=...), "
                       "repeatable: a target on another endpoint or account. When any is given (or a TLAKE_TARGET_* "
                       "variable is set) the target uses only these, never --storage-option; credentials are "
                       "better given as TLAKE_TARGET_AWS_ACCESS_KEY_ID / TLAKE_TARGET_AWS_SECRET_ACCESS_KEY")
    @click.option("--version", "version", type=int, default=None, help="version to export (default: the latest)")
    @click.option("--as-of", "as_of", default=None, help="export the version current at TIMESTAMP (ISO-8601 or epoch ms)")
    @click.option("--full", "mode", flag_value="full", help="copy every reachable file (the default)")
    @click.option("--partial", "mode", flag_value="partial", help="copy the nodes down to --depth (and their definitions)")
    @click.option("--minimal", "mode", flag_value="minimal", help="copy the root node only")
    @click.option("--depth", type=int, default=None, help="deepest node level copied by --partial (root = 0); implies --partial")
    @click.option("--batch-size", type=int, default=None, help="files per plan part (and Spark task)")
    @click.option("--execution", type=click.Choice(["auto", "local", "distributed"]), default=None,
                  help="where phases run: auto (by size; small exports never start Spark), local (driver threads), "
                       "distributed (Spark executors)")
    @click.option("--threads", type=int, default=None, help="driver threads, and I/O threads per Spark task")
    @click.option("--local-threads", type=int, default=None,
                  help="--threads for local files (default 1: more only contend for the interpreter lock)")
    @click.option("--no-verify", is_flag=True, help="check sizes only, not checksums")
    @click.option("--with-tables", "with_tables", is_flag=True, default=None,
                  help="also copy the Iceberg tables under the lakehouse (metadata, manifests, data), paths rewritten")
    @click.option("--table-snapshots", type=click.Choice(["all", "current"]), default=None,
                  help="with --with-tables: every retained snapshot (default) or the current one only")
    @click.option("--master", default=None, help="Spark master (default local[*])")
    @click.option("--conf", "conf_path", default=None, help="YAML job configuration (e.g. conf/export.yaml)")
    @click.option("--spark-conf", multiple=True, help="Spark property key=value")
    @click.option("--json", "as_json", is_flag=True, help="print the job result as JSON")
    @click.pass_context
    @handle_errors
    def export(click_ctx: click.Context, name: str | None, target: str | None, target_storage_options: tuple[str, ...],
               version: int | None, as_of: str | None,
               mode: str | None, depth: int | None, batch_size: int | None, execution: str | None, threads: int | None,
               local_threads: int | None,
               no_verify: bool, with_tables: bool | None, table_snapshots: str | None, master: str | None,
               conf_path: str | None, spark_conf: tuple[str, ...],
               as_json: bool) -> None:
        """Export a version to its own root URI (full, partial or minimal), or manage exports."""
        if click_ctx.invoked_subcommand is not None:
            return
        ctx: Ctx = click_ctx.obj
        if not name or not target:
            raise click.UsageError("give --name and --target (or a subcommand: list, drop)")
        if mode is None and depth is not None:
            mode = "partial"
        if depth is not None and mode != "partial":
            raise click.UsageError("--depth goes with --partial")

        overrides = {
            "lakehouse": ctx.require_uri(),
            "storage_options": ctx.storage_options or None,
            "control_uri": ctx.control_uri,
            "name": name,
            "target": target,
            # Parsed as the job's own flag (values typed, dotted keys nested); None: not given.
            "target_storage_options": list(target_storage_options) or None,
            "version": version,
            "as_of": as_of,
            "mode": mode,
            "depth": depth,
            "batch_size": batch_size,
            "execution": execution,
            "threads": threads,
            "local_threads": local_threads,
            "verify_checksum": False if no_verify else None,
            "with_tables": True if with_tables else None,
            "table_snapshots": table_snapshots,
            "master": master,
            "spark_conf": _kv(spark_conf, "--spark-conf") or None,
        }
        cfg = load_job_config("export", conf_path, overrides=overrides)

        try:
            with progress_display(f"tlake export {cfg.run_id}") as status:
                remove = add_progress_listener(status)
                try:
                    result = run_job("export", cfg, audit=ctx.audit)
                finally:
                    remove()
        except JobFailedError as e:
            # The typed error of the export (name clash, expired version, bad target, ...)
            # is what the user needs to read; the runner has recorded the failed run.
            if isinstance(e.__cause__, TrinityLakeError):
                raise e.__cause__ from None
            raise
        emit(result.to_dict(), as_json, lambda r: click.echo(_summary(r)))

    @export.command("list")
    @click.option("--json", "as_json", is_flag=True)
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
