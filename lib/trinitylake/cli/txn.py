"""`tlake txn`: multi-operation transactions, local (stdin) or distributed (by id).

* ``tlake txn [--file F]``: operations, one per line, as ONE local transaction.
* ``tlake txn begin --distributed``: begin a distributed transaction; its id is the last
  stdout line, so scripts and orchestrators can pass it on (``id=$(tlake txn begin
  --distributed | tail -1)``).
* ``tlake --txn ID namespace create ...`` (and every namespace/table write verb, from any
  process): stage into it; read verbs with ``--txn`` show its state.
* ``tlake txn commit ID`` / ``tlake txn abort ID`` / ``tlake txn list`` / ``tlake txn show ID``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

import click
from rich.table import Table

from trinitylake.cli.common import DURATION, Ctx, _print_kv, console, emit, handle_errors
from trinitylake.errors import TrinityLakeError, ValidationError
from trinitylake.json_data import JsonObject
from trinitylake.lakehouse.distributed import DistributedTransaction, list_transactions
from trinitylake.values import format_timestamp

if TYPE_CHECKING:
    from trinitylake.lakehouse.transaction import Transaction


def _dtxn_id(ctx: Ctx) -> str:
    if ctx.dtxn_id is None:  # the callers run only under --txn
        raise click.UsageError("give --txn ID")
    return ctx.dtxn_id


def stage_into(ctx: Ctx, op: Callable[[Transaction], object], describe: str) -> None:
    """Stage one CLI write verb into the distributed transaction named by ``--txn``."""

    dt = DistributedTransaction.load(ctx.lakehouse(), _dtxn_id(ctx))
    state = dt.stage(op, requested_at_millis=ctx.started_ms)
    click.echo(f"staged: {describe} (transaction {dt.id}, state {state})")


def distributed_view(ctx: Ctx) -> Transaction:

    return DistributedTransaction.load(ctx.lakehouse(), _dtxn_id(ctx)).view()


def register(cli: click.Group) -> None:
    @cli.group(invoke_without_command=True)
    @click.option("--isolation", type=click.Choice(["snapshot", "serializable"]), default=None,
                  help="isolation level (default: the lakehouse's)")
    @click.option("--file", "ops_file", type=click.File("r"), default="-", help="operations, one per line (default stdin)")
    @click.pass_context
    @handle_errors
    def txn(click_ctx: click.Context, isolation: str | None, ops_file: TextIO) -> None:
        """Run several operations (one per line, same verbs as the CLI) as ONE transaction;
        or manage distributed transactions (begin, commit, abort, list, show).

        Example input:  namespace create sales / table create sales.orders / table drop sales.old
        """
        if click_ctx.invoked_subcommand is not None:
            return
        ctx: Ctx = click_ctx.obj
        if ctx.dtxn_id is not None:
            raise ValidationError("--txn stages single commands into a distributed transaction; "
                                  "`tlake txn` with operations on stdin runs its own local transaction")
        _run_local(cli, ctx, isolation, ops_file)

    @txn.command("begin")
    @click.option("--distributed", is_flag=True, help="a transaction other processes can stage into (required)")
    @click.option("--isolation", type=click.Choice(["snapshot", "serializable"]), default=None,
                  help="isolation level (default: the lakehouse's)")
    @click.option("--ttl", type=DURATION, default=None,
                  help="time to live, with its unit (e.g. 30m; at most the lakehouse's txn TTL)")
    @click.option("--id", "txn_id", default=None, help="transaction id (default: a new UUID)")
    @click.pass_obj
    @handle_errors
    def txn_begin(ctx: Ctx, distributed: bool, isolation: str | None, ttl: int | None, txn_id: str | None) -> None:
        """Begin a distributed transaction; prints its id as the last line."""

        if not distributed:
            raise click.UsageError("only distributed transactions begin by id: pass --distributed "
                                   "(a local transaction is `tlake txn` with operations on stdin)")

        dt = DistributedTransaction.begin(ctx.lakehouse(), isolation=isolation, txn_id=txn_id,
                                          ttl_millis=ttl)
        click.echo(f"began distributed transaction; stage with: tlake --txn {dt.id} ..., "
                   f"then tlake txn commit {dt.id} (tlake txn show {dt.id} for its state)")
        click.echo(dt.id)

    @txn.command("commit")
    @click.argument("txn_id")
    @click.pass_obj
    @handle_errors
    def txn_commit(ctx: Ctx, txn_id: str) -> None:
        """Commit a distributed transaction as one new version."""

        version = DistributedTransaction.load(ctx.lakehouse(), txn_id).commit(requested_at_millis=ctx.started_ms)
        click.echo(f"committed transaction {txn_id} as version {version}" if version is not None
                   else f"transaction {txn_id} staged nothing; nothing to commit")

    @txn.command("abort")
    @click.argument("txn_id")
    @click.pass_obj
    @handle_errors
    def txn_abort(ctx: Ctx, txn_id: str) -> None:
        """Abort a distributed transaction and delete what it staged."""

        left = DistributedTransaction.load(ctx.lakehouse(), txn_id).abort()
        click.echo(f"aborted transaction {txn_id}" + (f"; {len(left)} files left for the orphan job" if left else ""))

    @txn.command("list")
    @click.option("--all", "include_closed", is_flag=True, help="also committed, aborted and expired ones")
    @click.option("--json", "as_json", is_flag=True, help="print JSON")
    @click.pass_obj
    @handle_errors
    def txn_list(ctx: Ctx, include_closed: bool, as_json: bool) -> None:
        """List live distributed transactions."""

        rows = list_transactions(ctx.lakehouse(), include_closed=include_closed)

        def render(rows: list[JsonObject]) -> None:
            t = Table("id", "state", "begin version", "staged", "expires at (UTC)", "isolation")
            for r in rows:
                t.add_row(r["id"], r["state"] + (" (expired)" if r["expired"] else ""), str(r["begin_version"]),
                          str(r["staged"]), r["expire_at"], r["isolation"])
            console.print(t)

        emit([with_iso_times(r) for r in rows], as_json, render)

    @txn.command("show")
    @click.argument("txn_id")
    @click.option("--json", "as_json", is_flag=True, help="print JSON")
    @click.pass_obj
    @handle_errors
    def txn_show(ctx: Ctx, txn_id: str, as_json: bool) -> None:
        """State of one distributed transaction."""

        info = with_iso_times(DistributedTransaction.load(ctx.lakehouse(), txn_id).info())
        # Operator text gives times as ISO-8601 only; --json keeps the epoch milliseconds as well.
        emit(info, as_json, lambda d: _print_kv({k: v for k, v in d.items() if not k.endswith("_millis")}))


def with_iso_times(info: JsonObject) -> JsonObject:
    """`info` with an ISO-8601 UTC field beside each ``*_millis`` one (``began_at``, ``expire_at``)."""

    out: dict[str, Any] = {}
    for k, v in info.items():
        if k.endswith("_millis") and isinstance(v, int):
            out[k.removesuffix("_millis")] = format_timestamp(v)
        out[k] = v
    return out


def _run_local(cli: click.Group, ctx: Ctx, isolation: str | None, ops_file: TextIO) -> None:
    lh = ctx.lakehouse()
    t = lh.begin(isolation=isolation)
    ctx.txn = t
    try:
        n = _replay(cli, ctx, ops_file)
    except BaseException:
        # Nothing was committed: the definition files the replayed lines wrote are unreferenced.
        ctx.txn = None
        t.rollback()
        raise
    ctx.txn = None
    version = t.commit(command="txn", arguments={"ops": t.ops, "isolation": t.isolation})
    click.echo(f"committed {n} operations as version {version}" if version is not None else "nothing to commit")


def _replay(cli: click.Group, ctx: Ctx, ops_file: TextIO) -> int:
    """Run each line of `ops_file` as a CLI write verb staged into ``ctx.txn``; the count run.

    A line's typed error is raised again naming the line (the verb's own error handler leaves
    it to us while ``ctx.txn`` is set, so the user reads one line)."""
    n = 0
    for lineno, line in enumerate(ops_file, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            args = shlex.split(line)
        except ValueError as e:  # e.g. "No closing quotation": one clear line, not a traceback
            raise ValidationError(f"line {lineno}: cannot parse {line!r} ({e}); nothing was committed") from None
        if args[:1] not in (["namespace"], ["table"]) or len(args) < 2 or args[1] not in ("create", "drop", "alter"):
            raise ValidationError(f"line {lineno}: only namespace/table create|drop|alter are allowed in a transaction: {line!r}")
        try:
            cli.main(args=args, prog_name="tlake", obj=ctx, standalone_mode=False)
        except click.ClickException as e:
            raise ValidationError(f"line {lineno}: {e.format_message().rstrip('.')}; nothing was committed") from None
        except TrinityLakeError as e:
            e.args = (f"line {lineno} ({line!r}): {e}; nothing was committed",)
            raise
        except SystemExit as e:
            if e.code:
                raise ValidationError(f"line {lineno} failed: {line!r}; nothing was committed") from None
        n += 1
    return n
