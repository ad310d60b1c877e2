"""Plumbing shared by the `tlake` command modules: the command context (`Ctx`), error
handling (typed library errors become one line and exit 1), output helpers. Every module of
this package imports from here; nothing here imports them back."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trinitylake.errors import TrinityLakeError, ValidationError
from trinitylake.json_data import JsonObject
from trinitylake.redact import redact_argv, redact_text

if TYPE_CHECKING:
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.lakehouse.transaction import Transaction

_P = ParamSpec("_P")
_R = TypeVar("_R")

console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)


class Ctx:
    def __init__(self, lakehouse_uri: str | None, storage_options: dict, control_uri: str | None, audit: bool):
        self.lakehouse_uri = lakehouse_uri
        self.storage_options = storage_options
        self.control_uri = control_uri
        self.audit = audit
        self.txn: Transaction | None = None  # set by `tlake txn` while it replays operations
        self.dtxn_id: str | None = None  # global --txn: a distributed transaction to stage into
        # When this command was asked for: a distributed transaction's lease is checked
        # against it, so the process's own start-up does not eat a short TTL.
        self.started_ms = _command_started_ms()
        self._lh: Lakehouse | None = None

    def require_uri(self) -> str:
        if not self.lakehouse_uri:
            raise click.UsageError("give --lakehouse URI or set TLAKE_LAKEHOUSE")
        return self.lakehouse_uri

    def lakehouse(self) -> Lakehouse:
        if self._lh is None:
            from trinitylake.lakehouse import Lakehouse
            from trinitylake.lakehouse.context import AuditContext

            click_ctx = click.get_current_context()
            argv = click_ctx.find_root().meta.get(_ARGV_KEY, sys.argv[1:])
            context = AuditContext(click_ctx.command_path.split(" ", 1)[-1], {"argv": redact_argv(argv, learn=True)})
            self._lh = Lakehouse.open(self.require_uri(), storage_options=self.storage_options or None,
                                      control_uri=self.control_uri, audit=self.audit, context=context)
        return self._lh


def _kv(values: tuple[str, ...], what: str) -> dict[str, str]:
    out = {}
    for v in values:
        if "=" not in v:
            raise click.BadParameter(f"expected key=value, got {v!r}", param_hint=what)
        k, _, val = v.partition("=")
        out[k] = val
    return out


def handle_errors(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Typed library errors become one clear line on stderr and exit code 1 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except TrinityLakeError as e:
            if _replaying():
                raise  # `tlake txn` replays this line: it prints the error once, naming the line
            err_console.print(f"[red]error[/red] ({type(e).__name__}): {escape(redact_text(str(e)))}", highlight=False,
                              markup=True)
            sys.exit(1)
        except FileNotFoundError as e:
            err_console.print(f"[red]error[/red] (FileNotFoundError): {escape(redact_text(str(e)))}", highlight=False)
            sys.exit(1)

    return wrapper


def _replaying() -> bool:
    """True while `tlake txn` replays an operation line into its local transaction."""
    click_ctx = click.get_current_context(silent=True)
    return click_ctx is not None and getattr(click_ctx.obj, "txn", None) is not None


def parse_time(value: str) -> datetime:
    """ISO-8601 (naive = UTC) or epoch milliseconds."""
    v = value.strip()
    if v.isdigit():
        return datetime.fromtimestamp(int(v) / 1000, UTC)
    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(f"cannot parse timestamp {value!r}; use ISO-8601 or epoch milliseconds") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def emit(obj: object, as_json: bool, render: Callable[[Any], object]) -> None:
    if as_json:
        click.echo(json.dumps(obj, indent=2, default=str))
    else:
        render(obj)


_ARGV_KEY = "trinitylake.argv"


def _print_names(what: str, names: list[str], version: int) -> None:
    t = Table(f"{what} (version {version})")
    for n in names:
        t.add_row(n)
    console.print(t)


def _print_kv(d: JsonObject) -> None:
    t = Table("field", "value")
    for k, v in d.items():
        t.add_row(k, json.dumps(v) if isinstance(v, dict | list) else str(v))
    console.print(t)


_process_command_ms: int | None = None  # set by main(): the process runs one command


def _command_started_ms() -> int:
    """When the command was asked for: the process start for `tlake` (main), else now (a
    command invoked in-process, e.g. by a test runner or `tlake txn` replaying a line)."""
    global _process_command_ms
    stamp, _process_command_ms = _process_command_ms, None
    return stamp if stamp is not None else int(datetime.now(UTC).timestamp() * 1000)


def mark_process_start(ms: int) -> None:
    """`tlake` runs one command per process: date it from the process start (`main`)."""
    global _process_command_ms
    _process_command_ms = ms
