"""Plumbing shared by the `tlake` command modules: the command context (`Ctx`), error
handling (every error one line; exit 1 for a failed operation, 2 for a usage or configuration
error), the duration and timestamp flag types, output helpers. Every module of
this package imports from here; nothing here imports them back."""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click

from trinitylake import lazy
from trinitylake.errors import (
    ConfigError,
    ControlTableError,
    NotFoundError,
    StorageError,
    TrinityLakeError,
    ValidationError,
)
from trinitylake.json_data import JsonObject
from trinitylake.redact import redact_argv, redact_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from trinitylake.lakehouse import Lakehouse
    from trinitylake.lakehouse.transaction import Transaction
    from trinitylake.storage.diagnose import cause_at
    from trinitylake.storage.uri import parse_uri
    from trinitylake.values import parse_duration
else:  # rich loads when a command first prints (`tlake --help` is click's text alone), URIs when one is read
    parse_duration = lazy.attr("trinitylake.values", "parse_duration", globals())
    parse_uri = lazy.attr("trinitylake.storage.uri", "parse_uri", globals())
    cause_at = lazy.attr("trinitylake.storage.diagnose", "cause_at", globals())
    Console = lazy.attr("rich.console", "Console", globals())
    escape = lazy.attr("rich.markup", "escape", globals())
    Table = lazy.attr("rich.table", "Table", globals())

_P = ParamSpec("_P")
_R = TypeVar("_R")

console: Console = lazy.value(lambda: Console(width=None if sys.stdout.isatty() else 160), globals(), "console",
                              "rich.console.Console")
err_console: Console = lazy.value(lambda: Console(stderr=True, soft_wrap=True), globals(), "err_console",
                                  "rich.console.Console")


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
            # Imported by the commands that open a lakehouse: `tlake --help` loads no lakehouse code.
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


#: Exit codes of every `tlake` command (README "Exit codes"): 0 done; 1 the operation failed
#: (a typed error line); 2 a usage or configuration error found before any work (a bad flag,
#: value, option key or config file, contradictory flags). The tables' maintenance adds 3 for a
#: partial run.
EXIT_ERROR = 1
EXIT_USAGE = 2

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def error_text(error: BaseException) -> str:
    """One line naming the error: its message, redacted, without terminal colour codes (delta-rs
    puts ANSI sequences in its errors) or line breaks."""
    text = _ANSI.sub("", redact_text(str(error)))
    return " ".join(part.strip() for part in text.splitlines() if part.strip()) or type(error).__name__


def print_error(error: BaseException, kind: str | None = None) -> None:
    """``error (Type): message`` on stderr, one line."""
    err_console.print(f"[red]error[/red] ({kind or type(error).__name__}): {escape(error_text(error))}",
                      highlight=False, markup=True, soft_wrap=True)


#: Where a command worked: ``(what, uri, storage options)``, e.g. ``("export target", uri, {})``.
Places = Sequence[tuple[str, str, Mapping[str, Any] | None]]


def explain(error: BaseException, places: Places | None = None) -> BaseException:
    """The cause of a failed command, when the error itself does not name it: a bucket that
    does not exist, a folder that is a file, S3 without credentials. `places` are ``(what, uri,
    storage options)`` the command used (default: the lakehouse of the running command); each
    is checked only now that something failed (one request).

    Returns:
        a `TrinityLakeError` naming the cause, or `error` itself when none is found.
    """
    if isinstance(error, ConfigError | click.ClickException | NotADirectoryError) or (
            isinstance(error, TrinityLakeError) and not isinstance(error, NotFoundError | StorageError | ControlTableError)):
        return error  # says its cause itself (a file where a folder should be: the storage says so)
    if places is None:
        click_ctx = click.get_current_context(silent=True)
        obj = click_ctx.find_root().obj if click_ctx is not None else None
        places = [("lakehouse", obj.lakehouse_uri, obj.storage_options)] if isinstance(obj, Ctx) and obj.lakehouse_uri else []
    for what, uri, options in places:
        try:
            cause = cause_at(what, uri, options or {}, error)
        except Exception:  # noqa: BLE001 - the check is a courtesy: the original error stands
            logging.getLogger("trinitylake.cli").debug("checking %s failed", uri, exc_info=True)
            cause = None
        if cause is not None:
            return cause
    return error


def exit_code_of(error: BaseException) -> int:
    """2 for a usage or configuration error, else 1 (see `EXIT_USAGE`)."""
    return EXIT_USAGE if isinstance(error, ConfigError | click.UsageError) else EXIT_ERROR


def handle_errors(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Errors become one clear line on stderr and an exit code (`exit_code_of`), never a
    traceback: typed library errors, OS errors, and anything unexpected (its traceback is
    logged at DEBUG: ``tlake --log-level DEBUG`` shows it)."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise  # usage errors: click's, told in one line by the group (`one_line_usage`)
        except Exception as e:  # noqa: BLE001 - the one place an error becomes the user's line
            if _replaying():
                raise  # `tlake txn` replays this line: it prints the error once, naming the line
            if not isinstance(e, TrinityLakeError | OSError):
                logging.getLogger("trinitylake.cli").debug("unexpected error", exc_info=True)
            told = explain(e)
            print_error(told)
            sys.exit(exit_code_of(told))

    return wrapper


class OneLineUsageError(click.UsageError):
    """A click usage error told in one line (click's own is the usage, a hint and the error on
    four lines): ``error (UsageError): tlake namespace create: Missing argument 'NAME'. (see
    tlake namespace create --help)``; exit 2."""

    def __init__(self, error: click.UsageError) -> None:
        super().__init__(error.format_message(), error.ctx)  # exit code 2: click's usage error's

    def show(self, file: object = None) -> None:
        path = _command_path(self.ctx)
        err_console.print(f"[red]error[/red] (UsageError): {escape(path + ': ' if path else '')}"
                          f"{escape(error_text(self))}" + (f" (see {escape(path)} --help)" if path else ""),
                          highlight=False, markup=True, soft_wrap=True)


def one_line_usage(error: click.UsageError) -> OneLineUsageError:
    return error if isinstance(error, OneLineUsageError) else OneLineUsageError(error)


def _command_path(ctx: click.Context | None) -> str:
    """``tlake namespace create`` (the root's name is the test runner's under CliRunner)."""
    if ctx is None:
        return "tlake"
    names = []
    while ctx is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    names[-1] = "tlake"
    return " ".join(reversed([n for n in names if n]))


class DurationType(click.ParamType):
    """A duration flag: ``90s``, ``36h``, ``7d``, ``500ms`` (a bare number is refused); the value
    is integer milliseconds."""

    name = "duration"

    def get_metavar(self, param: click.Parameter, *args: object) -> str:
        return "DURATION"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value  # a default already converted
        try:
            return parse_duration(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class TimeType(click.ParamType):
    """An instant: ISO-8601 (naive = UTC), epoch milliseconds, or a duration back from now
    (``1h``, ``now-1h``); the value is an aware `datetime`."""

    name = "timestamp"

    def get_metavar(self, param: click.Parameter, *args: object) -> str:
        return "TIMESTAMP"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_time(value)
        except ValidationError as e:
            self.fail(str(e), param, ctx)


DURATION = DurationType()
TIMESTAMP = TimeType()


def _replaying() -> bool:
    """True while `tlake txn` replays an operation line into its local transaction."""
    click_ctx = click.get_current_context(silent=True)
    return click_ctx is not None and getattr(click_ctx.obj, "txn", None) is not None


def parse_time(value: str) -> datetime:
    """ISO-8601 (naive = UTC), epoch milliseconds, or a duration back from now (``1h``,
    ``now-1h``: the last hour)."""
    v = value.strip()
    if v.isdigit():
        return datetime.fromtimestamp(int(v) / 1000, UTC)
    ago = v[4:] if v.lower().startswith("now-") else v
    if ago and ago[-1:].isalpha() and ago[:1].isdigit():
        try:
            return datetime.now(UTC) - timedelta(milliseconds=parse_duration(ago))
        except ValueError:
            pass
    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(f"cannot parse timestamp {value!r}; use ISO-8601 (2026-11-22T03:00:00Z), epoch "
                              f"milliseconds, or a duration back from now (1h, 7d)") from None
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
