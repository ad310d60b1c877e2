"""`tlake`: the command-line interface over the same library the jobs use."""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click

import trinitylake
from trinitylake import lazy
from trinitylake.cli.common import (
    _ARGV_KEY,
    DURATION,
    TIMESTAMP,
    Ctx,
    _kv,
    _print_kv,
    _print_names,
    emit,
    handle_errors,
    mark_process_start,
    one_line_usage,
)
from trinitylake.errors import InvalidURIError, UndecodableKeyError, ValidationError
from trinitylake.redact import (
    install_log_redaction,
    redact_argv,
    redact_value,
    remember_environment,
    warn_command_line_secrets,
)
from trinitylake.util import refuse_pandas_for_pyarrow

if TYPE_CHECKING:
    from datetime import datetime

    from trinitylake.cli.show import render_versions
    from trinitylake.cli.txn import distributed_view, stage_into
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.lakehouse.transaction import Transaction
    from trinitylake.lakehouse.view import LakehouseView
    from trinitylake.storage.options import check_storage_options
    from trinitylake.storage.uri import parse_uri
else:  # loaded by the commands that use them: `tlake --help` imports neither the lakehouse nor pyarrow
    check_storage_options = lazy.attr("trinitylake.storage.options", "check_storage_options", globals())
    parse_uri = lazy.attr("trinitylake.storage.uri", "parse_uri", globals())
    render_versions = lazy.attr("trinitylake.cli.show", "render_versions", globals())
    distributed_view = lazy.attr("trinitylake.cli.txn", "distributed_view", globals())
    stage_into = lazy.attr("trinitylake.cli.txn", "stage_into", globals())
    Lakehouse = lazy.attr("trinitylake.lakehouse", "Lakehouse", globals())

_P = ParamSpec("_P")
_R = TypeVar("_R")
_F = TypeVar("_F", bound=Callable[..., Any])


# ---- shared plumbing ---------------------------------------------------------------------


def time_travel(fn: _F) -> _F:
    """--version / --as-of / --snapshot on every read command."""
    fn = click.option("--snapshot", "snapshot", default=None, help="read an exported snapshot by name")(fn)
    fn = click.option("--as-of", "as_of", type=TIMESTAMP, default=None,
                      help="read the newest version created at or before TIMESTAMP (ISO-8601, epoch ms, or 1h: an "
                           "hour ago)")(fn)
    fn = click.option("--version", "version", type=int, default=None, help="read version N (FOR SYSTEM_VERSION AS OF N)")(fn)
    return fn


def _view(ctx: Ctx, version: int | None, as_of: datetime | None, snapshot: str | None) -> LakehouseView:
    given = [f for f, v in (("--version", version), ("--as-of", as_of), ("--snapshot", snapshot)) if v is not None]
    if len(given) > 1:
        raise click.UsageError(f"{' and '.join(given)} contradict each other: give one")
    if ctx.txn is not None:
        return ctx.txn
    if ctx.dtxn_id is not None:
        return distributed_view(ctx)
    return ctx.lakehouse().view(version=version, as_of=as_of, snapshot=snapshot)


def split_name(full: str) -> tuple[str, str]:
    """``NAMESPACE.NAME`` of a command line. The format allows dots inside both parts, so a
    second dot makes the name ambiguous (PyIceberg and Spark read ``a.b.c`` as the table ``c`` of
    the nested namespace ``a.b``): it is refused, never guessed."""
    ns, sep, name = full.partition(".")
    if not sep or not ns or not name:
        raise ValidationError(f"expected NAMESPACE.NAME, got {full!r}")
    if "." in name:
        raise ValidationError(
            f"{full!r} is ambiguous (more than one dot: namespace {ns!r} or {full.rsplit('.', 1)[0]!r}?); "
            f"name such a table from Python as a tuple, e.g. catalog.create_table(({ns!r}, {name!r}), schema)")
    return ns, name


def _write(ctx: Ctx, op: Callable[[Transaction], object], describe: str) -> int | None:
    """Run `op(txn)` in the enclosing `tlake txn`, or in its own single-operation transaction."""
    if ctx.txn is not None:
        op(ctx.txn)
        return None
    if ctx.dtxn_id is not None:
        stage_into(ctx, op, describe)
        return None
    lh = ctx.lakehouse()
    txn = lh.begin()
    op(txn)
    version = txn.commit()
    click.echo(f"{describe} (version {version})")
    return version


# ---- the group -------------------------------------------------------------------------


#: Commands defined in modules of their own, by name; any other name is a job's command
#: (`trinitylake.cli.jobs`). A module is imported when one of its commands runs, or when the
#: help lists them all: those modules import the heavy parts of the library at their top
#: (pyarrow, Delta, the job runner: 1.1 s measured with -X importtime), which `tlake init` or
#: `tlake namespace list` need not pay (0.3 s).
_COMMAND_MODULES = {
    "txn": "trinitylake.cli.txn",
    "show": "trinitylake.cli.show",
    "export": "trinitylake.cli.export",
    "report": "trinitylake.cli.report",
    "control": "trinitylake.cli.control",
    "tables": "trinitylake.cli.tables",
    "catalog": "trinitylake.cli.catalog",
}
_JOB_COMMANDS_MODULE = "trinitylake.cli.jobs"
#: The first paragraph of the help of each command of those modules, which `tlake --help` lists
#: without importing them (0.3-0.8 s of pyarrow, Delta, rich and the job runner, against 0.1 s for
#: the group itself). tests/test_startup.py checks it against the commands, and prints the table
#: to paste here when a command's help changes.
_SUMMARIES = {
    "catalog": "Serve the lakehouse's Iceberg tables to Spark and other Iceberg REST clients.",
    "control": "Maintain the control table (the Delta audit log).",
    "expire": "Expire old versions (commit first), then delete the files only they reached. Every job option below can be "
              "given after the command; the lakehouse and control table are tlake's own: tlake --lakehouse URI expire ...",
    "export": "Export a version to its own root URI (full, partial or minimal), or manage exports (list, drop). Every "
              "option of the export job below can be given; the lakehouse and control table are tlake's own: tlake "
              "--lakehouse URI export --name N --target URI ...",
    "orphans": "Delete old format-owned files that no retained version, export or pin references. Every job option below "
               "can be given after the command; the lakehouse and control table are tlake's own: tlake --lakehouse URI "
               "orphans ...",
    "report": "Write an HTML report: versions over time, job runs, files and bytes per version, Iceberg tables.",
    "show": "History of transactions and job runs, newest first, mapped to versions by txn_seq.",
    "tables": "Maintain the lakehouse's Iceberg tables: snapshot expiry and orphan removal, consistent with the "
              "lakehouse's time travel (a table file any retained lakehouse version reaches stays).",
    "txn": "Run several operations (one per line, same verbs as the CLI) as ONE transaction; or manage distributed "
           "transactions (begin, commit, abort, list, show).",
    "walk": "List every file reachable from the retained versions, pinned exports and pinned versions (read-only; a full "
            "export is self-contained and not walked). Every job option below can be given after the command; the "
            "lakehouse and control table are tlake's own: tlake --lakehouse URI walk ...",
}


class _Group(click.Group):
    """Keeps the command line it parsed (the control table records it, redacted; the secrets
    warning reads it), also when called from Python or a test runner rather than `sys.argv`;
    loads the commands of their own modules when they are needed (`_COMMAND_MODULES`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta.setdefault(_ARGV_KEY, list(args))
        return super().parse_args(ctx, args)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        """A usage error of the group's own flags in one line (`one_line_usage`), exit 2."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:
            raise one_line_usage(e) from None

    def invoke(self, ctx: click.Context) -> Any:
        """A usage error of any command below, in one line, exit 2."""
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise one_line_usage(e) from None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: set[str] = set()  # the modules whose commands are registered

    def _load(self, module: str) -> None:
        if module not in self._loaded:
            self._loaded.add(module)
            importlib.import_module(module).register(self)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            self._load(_COMMAND_MODULES.get(cmd_name, _JOB_COMMANDS_MODULE))
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in (*_COMMAND_MODULES.values(), _JOB_COMMANDS_MODULE):
            self._load(module)
        return super().list_commands(ctx)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's command list, with the commands not loaded yet listed by `_SUMMARIES`
        (`tlake --help` imports no command module)."""
        names = sorted({*self.commands, *(n for n in _SUMMARIES if n not in self.commands)})
        shown = [n for n in names if n not in self.commands or not self.commands[n].hidden]
        if not shown:
            return
        limit = formatter.width - 6 - max(len(n) for n in shown)
        rows = [(n, (self.commands.get(n) or click.Command(n, help=_SUMMARIES[n])).get_short_help_str(limit))
                for n in shown]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--lakehouse", "lakehouse_uri", envvar="TLAKE_LAKEHOUSE", help="lakehouse root URI (or TLAKE_LAKEHOUSE)")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="storage option, repeatable: endpoint_url, region, profile, anon, client_kwargs (JSON), ... "
                   "(README: Storage options); credentials belong in the environment")
@click.option("--control-uri", envvar="TLAKE_CONTROL_URI", default=None, help="control table location (default <lakehouse>/_control)")
@click.option("--control-table", envvar="TLAKE_CONTROL_TABLE", default=None,
              help="control table rows as a catalog name (catalog.schema.table; Spark's Delta) or a path")
@click.option("--no-audit", is_flag=True, help="do not write the control table (tests, offline copies)")
@click.option("--log-level", default=os.environ.get("TLAKE_LOG_LEVEL", "WARNING"), show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
              help="Python log level of tlake's own messages (or TLAKE_LOG_LEVEL)")
@click.option("--txn", "txn_id", default=None, help="stage namespace/table writes into distributed transaction ID (tlake txn begin --distributed)")
@click.pass_context
def cli(click_ctx: click.Context, lakehouse_uri: str | None, storage_options: tuple[str, ...], control_uri: str | None,
        control_table: str | None, no_audit: bool, log_level: str, txn_id: str | None) -> None:
    """TrinityLake lakehouse tool: format operations, time travel, maintenance jobs."""
    if isinstance(click_ctx.obj, Ctx):  # re-entered by `tlake txn` replaying one operation
        return
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_log_redaction()
    remember_environment()
    argv = click_ctx.meta.get(_ARGV_KEY, ())
    warn_command_line_secrets(argv)
    options = _kv(storage_options, "--storage-option")
    _check_group_values(lakehouse_uri, control_uri, options)
    # Arms the scrubbing of these credentials from any later message (see trinitylake.redact).
    redact_argv(argv, learn=True)
    redact_value(options, learn=True)
    if control_table:
        # Read by every ControlTable of this process, jobs (their control_table option) included.
        os.environ["TLAKE_CONTROL_TABLE"] = control_table
    click_ctx.obj = Ctx(lakehouse_uri, options, control_uri, not no_audit)
    click_ctx.obj.dtxn_id = txn_id


def _check_group_values(lakehouse_uri: str | None, control_uri: str | None, options: dict[str, str]) -> None:
    """The group's values, checked before any command runs: a bad one is a usage error."""
    for flag, uri in (("--lakehouse", lakehouse_uri), ("--control-uri", control_uri)):
        if uri:
            try:
                parse_uri(uri)
            except InvalidURIError as e:
                raise click.BadParameter(str(e), param_hint=flag) from None
    try:
        scheme = parse_uri(lakehouse_uri).scheme if lakehouse_uri else "s3"
        check_storage_options(options, "--storage-option", scheme=scheme)
    except ValidationError as e:
        raise click.UsageError(str(e)) from None


@cli.command()
@click.option("--order", type=int, default=128, show_default=True, help="tree order N (children per node)")
@click.option("--node-max-bytes", type=int, default=1 << 20, show_default=True, help="node file size limit")
@click.option("--name-max-bytes", type=int, default=100, show_default=True, help="max UTF-8 bytes of names")
@click.option("--txn-ttl", type=DURATION, default="3d", show_default=True,
              help="transaction TTL, with its unit (e.g. 3d, 12h, 30m)")
@click.option("--isolation", type=click.Choice(["snapshot", "serializable"]), default="snapshot", show_default=True,
              help="isolation level of transactions")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE", help="lakehouse property, repeatable")
@click.pass_obj
@handle_errors
def init(ctx: Ctx, order: int, node_max_bytes: int, name_max_bytes: int, txn_ttl: int, isolation: str,
         properties: tuple[str, ...]) -> None:
    """Create a new lakehouse."""

    lh = Lakehouse.create(
        ctx.require_uri(), storage_options=ctx.storage_options or None, control_uri=ctx.control_uri, audit=ctx.audit,
        order=order, node_max_bytes=node_max_bytes, namespace_max=name_max_bytes, table_max=name_max_bytes,
        view_max=name_max_bytes, txn_ttl_millis=txn_ttl, isolation=isolation,
        properties=_kv(properties, "--property"),
    )
    click.echo(f"created lakehouse {lh.uri} (version 0, order {order}, node max {node_max_bytes} bytes)")


# ---- namespaces --------------------------------------------------------------------------
@cli.group()
def namespace() -> None:
    """Create, drop, list, describe and alter namespaces."""


@namespace.command("create")
@click.argument("name")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE", help="namespace property, repeatable")
@click.pass_obj
@handle_errors
def namespace_create(ctx: Ctx, name: str, properties: tuple[str, ...]) -> None:
    """Create a namespace (a name without dots: tables are named NAMESPACE.TABLE)."""
    if "." in name:
        # The format allows it, but `table create a.b.t` could never name a table under it.
        raise click.BadParameter(f"{name!r} has a dot: no table under it could be named NAMESPACE.TABLE on this "
                                 f"command line; choose a name without dots", param_hint="NAME")
    props = _kv(properties, "--property")
    _write(ctx, lambda t: t.create_namespace(name, props), f"created namespace {name}")


@namespace.command("drop")
@click.argument("name")
@click.option("--cascade", is_flag=True, help="also drop the namespace's tables and views")
@click.pass_obj
@handle_errors
def namespace_drop(ctx: Ctx, name: str, cascade: bool) -> None:
    """Drop a namespace (--cascade: with its tables and views)."""
    _write(ctx, lambda t: t.drop_namespace(name, cascade=cascade), f"dropped namespace {name}")


@namespace.command("alter")
@click.argument("name")
@click.option("--set", "set_", multiple=True, metavar="KEY=VALUE", help="property to set, repeatable")
@click.option("--unset", multiple=True, metavar="KEY", help="property to remove, repeatable")
@click.pass_obj
@handle_errors
def namespace_alter(ctx: Ctx, name: str, set_: tuple[str, ...], unset: tuple[str, ...]) -> None:
    """Set or remove properties of a namespace."""
    props = _kv(set_, "--set")
    _write(ctx, lambda t: t.alter_namespace(name, props, list(unset)), f"altered namespace {name}")


@namespace.command("list")
@time_travel
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.pass_obj
@handle_errors
def namespace_list(ctx: Ctx, version: int | None, as_of: datetime | None, snapshot: str | None, as_json: bool) -> None:
    """List the namespaces (of the latest version, or the one asked for)."""
    v = _view(ctx, version, as_of, snapshot)
    try:
        names = v.list_namespaces()
    except UndecodableKeyError as e:  # show the rest, then fail naming the keys
        emit({"version": v.version, "namespaces": e.listed}, as_json, lambda o: _print_names("namespace", o["namespaces"], o["version"]))
        raise
    emit({"version": v.version, "namespaces": names}, as_json, lambda o: _print_names("namespace", o["namespaces"], o["version"]))


@namespace.command("describe")
@click.argument("name")
@time_travel
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.pass_obj
@handle_errors
def namespace_describe(ctx: Ctx, name: str, version: int | None, as_of: datetime | None, snapshot: str | None,
                       as_json: bool) -> None:
    """Show a namespace's properties."""
    d = _view(ctx, version, as_of, snapshot).describe_namespace(name)
    emit(d, as_json, _print_kv)


# ---- tables ------------------------------------------------------------------------------
@cli.group()
def table() -> None:
    """Create, drop, list, describe and alter tables (Iceberg)."""


@table.command("create")
@click.argument("full_name")
@click.option("--metadata-location", default=None, help="Iceberg metadata.json location (external tables)")
@click.option("--type", "table_type", type=click.Choice(["managed", "external", "federated"]), default=None,
              help="table type (default: external with --metadata-location, else managed)")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE", help="table property, repeatable")
@click.pass_obj
@handle_errors
def table_create(ctx: Ctx, full_name: str, metadata_location: str | None, table_type: str | None,
                 properties: tuple[str, ...]) -> None:
    """Create a table NAMESPACE.TABLE."""
    ns, t = split_name(full_name)
    props = _kv(properties, "--property")
    _write(ctx, lambda x: x.create_table(ns, t, metadata_location=metadata_location, table_type=table_type, properties=props),
           f"created table {full_name}")


@table.command("drop")
@click.argument("full_name")
@click.pass_obj
@handle_errors
def table_drop(ctx: Ctx, full_name: str) -> None:
    """Drop a table NAMESPACE.TABLE (its files stay for time travel)."""
    ns, t = split_name(full_name)
    _write(ctx, lambda x: x.drop_table(ns, t), f"dropped table {full_name}")


@table.command("alter")
@click.argument("full_name")
@click.option("--set", "set_", multiple=True, metavar="KEY=VALUE", help="property to set, repeatable")
@click.option("--unset", multiple=True, metavar="KEY", help="property to remove, repeatable")
@click.option("--metadata-location", default=None, help="new Iceberg metadata.json location")
@click.pass_obj
@handle_errors
def table_alter(ctx: Ctx, full_name: str, set_: tuple[str, ...], unset: tuple[str, ...], metadata_location: str | None) -> None:
    """Set or remove properties of a table, or point it at new metadata."""
    ns, t = split_name(full_name)
    props = _kv(set_, "--set")
    _write(ctx, lambda x: x.alter_table(ns, t, set_properties=props, remove=list(unset), metadata_location=metadata_location),
           f"altered table {full_name}")


@table.command("list")
@click.argument("namespace_name")
@time_travel
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.pass_obj
@handle_errors
def table_list(ctx: Ctx, namespace_name: str, version: int | None, as_of: datetime | None, snapshot: str | None,
               as_json: bool) -> None:
    """List the tables of a namespace."""
    v = _view(ctx, version, as_of, snapshot)
    try:
        names = v.list_tables(namespace_name)
    except UndecodableKeyError as e:  # show the rest, then fail naming the keys
        names = e.listed
        emit({"namespace": namespace_name, "version": v.version, "tables": names}, as_json,
             lambda o: _print_names(f"table in {namespace_name}", o["tables"], o["version"]))
        raise
    emit({"namespace": namespace_name, "version": v.version, "tables": names}, as_json,
         lambda o: _print_names(f"table in {namespace_name}", o["tables"], o["version"]))


@table.command("describe")
@click.argument("full_name")
@time_travel
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.pass_obj
@handle_errors
def table_describe(ctx: Ctx, full_name: str, version: int | None, as_of: datetime | None, snapshot: str | None,
                   as_json: bool) -> None:
    """Show a table's metadata location, type and properties."""
    ns, t = split_name(full_name)
    emit(_view(ctx, version, as_of, snapshot).describe_table(ns, t), as_json, _print_kv)


# ---- versions, txn, rollback ------------------------------------------------------------
@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.pass_obj
@handle_errors
def versions(ctx: Ctx, as_json: bool) -> None:
    """List the available versions (oldest first), rollbacks and unreadable roots marked."""

    emit(ctx.lakehouse().versions(), as_json, render_versions)


@cli.command()
@click.option("--to", "to_version", type=int, required=True, help="version whose content becomes the new latest")
@click.pass_obj
@handle_errors
def rollback(ctx: Ctx, to_version: int) -> None:
    """Roll back by rolling forward: commit a new version equal to version N."""
    v = ctx.lakehouse().rollback(to_version)
    click.echo(f"rolled back to version {to_version} as new version {v}")


def main() -> None:
    mark_process_start(trinitylake.PROCESS_STARTED_MS)
    refuse_pandas_for_pyarrow()  # this process is the tlake command (tests invoke `cli`, not main)
    cli(prog_name="tlake")


def console_main() -> None:
    """The `tlake` console script: `main`, then `_exit` with its exit code."""
    code: str | int | None = 0
    try:
        main()
    except SystemExit as e:
        code = e.code
    _exit(code)


def _exit(code: str | int | None) -> None:
    """Leave the process once the command is done, without the interpreter's finalization
    when no Spark session was started. The object-store client's runtime threads are native
    threads the interpreter does not own: one that calls into Python while it finalizes ends
    by a forced unwind through Rust frames, a silent SIGABRT of a command whose work was done
    and recorded (exit -6; seen in a fresh `make test`). Exit handlers still run, in order
    (the engine's close, logging's flush), then the streams are flushed and the process ends
    with the command's own exit code. With a Spark session, the normal exit stops it."""
    if "pyspark" in sys.modules:
        sys.exit(code)
    status = code if isinstance(code, int) else (0 if code is None else 1)
    if not isinstance(code, int) and code is not None:
        print(code, file=sys.stderr)  # what sys.exit("message") would print

    atexit._run_exitfuncs()  # noqa: SLF001 - the handlers os._exit would skip, run first
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: nothing more to say
            pass
    os._exit(status)

