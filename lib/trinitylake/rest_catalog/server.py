"""Running the catalog server: its settings (a YAML file, options, the environment) and uvicorn.

Safe by default: it binds 127.0.0.1, refuses to start without a bearer token
(``TLAKE_CATALOG_TOKEN`` or a token file) or client credentials (``TLAKE_CATALOG_CREDENTIAL``,
``client_id:client_secret``, or a credential file), limits request bodies, and logs requests
without their headers (uvicorn's access log line: client, request line, status; `AccessLog`), the request line's
credential-named query values replaced (:func:`trinitylake.redact.redact_request_target`).

It binds its port before it announces itself: a port in use fails in one line. SIGINT (Ctrl-C)
and SIGTERM end it cleanly with exit code 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import logging
import os
import queue
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
import yaml
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from trinitylake.errors import AddressUnavailableError, ConfigError
from trinitylake.redact import redact_request_target
from trinitylake.rest_catalog.app import DEFAULT_MAX_BODY_BYTES, ServerSettings, build_app
from trinitylake.rest_catalog.auth import (
    DEFAULT_TOKEN_LIFETIME_S,
    Authenticator,
    parse_credentials,
    read_secret_file,
)

log = logging.getLogger(__name__)

TOKEN_ENV = "TLAKE_CATALOG_TOKEN"
CREDENTIAL_ENV = "TLAKE_CATALOG_CREDENTIAL"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8181
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: The shortest static bearer token accepted (``openssl rand -hex 24`` gives 48 characters).
MIN_TOKEN_CHARS = 16

#: The keys a settings file may hold (conf/catalog_serve.yaml), with their types.
FILE_KEYS: dict[str, type] = {"host": str, "port": int, "token_file": str, "credential_file": str, "read_only": bool,
                              "allow_purge": bool, "max_body_bytes": int, "token_lifetime_s": int,
                              "forwarded_allow_ips": str, "properties": dict}


@dataclass
class ServeOptions:
    """What `tlake catalog serve` was asked for: None means "not given" (the file's or the default)."""

    host: str | None = None
    port: int | None = None
    token_file: str | None = None
    credential_file: str | None = None
    read_only: bool | None = None
    allow_purge: bool | None = None
    max_body_bytes: int | None = None
    token_lifetime_s: int | None = None
    forwarded_allow_ips: str | None = None
    properties: dict[str, str] = field(default_factory=dict)


def load_file(path: str) -> ServeOptions:
    """Settings from a YAML file of `FILE_KEYS` (unknown keys and wrong types refused by name)."""
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read the catalog server settings {path}: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    unknown = sorted(set(raw) - set(FILE_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown settings {unknown}; known: {sorted(FILE_KEYS)}")
    out = ServeOptions()
    for key, value in raw.items():
        if value is None:
            continue
        want = FILE_KEYS[key]
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            kind = {int: "an integer", bool: "true or false", str: "a string", dict: "a mapping"}[want]
            raise ConfigError(f"{path}: {key} must be {kind}, got {type(value).__name__}")
        if isinstance(value, dict):
            value = {str(k): str(v) for k, v in value.items()}
        setattr(out, key, value)
    return out


def merge(file: ServeOptions, given: ServeOptions) -> ServeOptions:
    """`given` (the command line) over `file`."""
    out = dataclasses.replace(file)
    for key, value in vars(given).items():
        if key == "properties":
            out.properties = {**file.properties, **value}
        elif value is not None:
            setattr(out, key, value)
    return out


def authenticator(opts: ServeOptions, env: dict[str, str] | None = None) -> Authenticator:
    """The token and client credentials from the environment and files (never printed)."""
    env = dict(os.environ) if env is None else env
    token, source = env.get(TOKEN_ENV) or None, TOKEN_ENV
    if opts.token_file:
        token, source = read_secret_file(opts.token_file, "token"), f"the token file {opts.token_file}"
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"the bearer token from {source} has {len(token)} characters; at least {MIN_TOKEN_CHARS} "
                          "are required (e.g. `openssl rand -hex 24`)")
    credentials: dict[str, str] = {}
    if env.get(CREDENTIAL_ENV):
        credentials.update(parse_credentials(env[CREDENTIAL_ENV], CREDENTIAL_ENV))
    if opts.credential_file:
        try:
            text = Path(opts.credential_file).read_text()
        except OSError as e:
            raise ConfigError(f"cannot read the credential file {opts.credential_file}: {e.strerror}") from None
        credentials.update(parse_credentials(text, opts.credential_file))
    return Authenticator(token, credentials, opts.token_lifetime_s or DEFAULT_TOKEN_LIFETIME_S)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port` (as uvicorn binds it: SO_REUSEADDR, inheritable),
    or an AddressUnavailableError in one line naming the address (taken, not this machine's, not
    permitted)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise AddressUnavailableError(f"cannot bind {host}:{port}: unknown host ({e.strerror})") from None
    family = infos[0][0] if infos else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP; with proto 0 every
    # answer sent in two writes (headers, body) waited for the client's delayed ACK (~40 ms a request)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(infos[0][4] if infos else (host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        why = {errno.EADDRINUSE: "the port is already in use (another server? choose one with --port)",
               errno.EADDRNOTAVAIL: "the address is not one of this machine's (--host)",
               errno.EACCES: "permission denied (ports below 1024 need privileges)"}.get(e.errno or 0, e.strerror)
        raise AddressUnavailableError(f"cannot bind {host}:{port}: {why}") from None
    sock.set_inheritable(True)
    return sock


class _AccessLogFilter(logging.Filter):
    """An access log record (`AccessLog`: client, method, target, HTTP version, status) with the
    target's credential-named query values replaced, and nothing else touched: the request line
    stays whole (the process's general redaction of free text would read ``token= HTTP/1.1`` as
    a token and its value)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (args[0], args[1], redact_request_target(args[2]), args[3], args[4])
            record.msg = record.getMessage()
            record.args = None
            record.tlake_redacted = True  # the handlers' RedactingFilter keeps this message as it is
        return True


_Message = MutableMapping[str, object]
_ACCESS_FORMAT = '%s - "%s %s HTTP/%s" %d'
#: The access log's logger (uvicorn's own, ``uvicorn.access``, is off: uvicorn stops its
#: propagation when its access log is off).
ACCESS_LOGGER = "trinitylake.rest_catalog.access"


class AccessLog:
    """The server's access log: uvicorn's line (client, request line, status) on the
    `ACCESS_LOGGER` logger, written after the answer by a thread of its own. uvicorn's own
    access log formats and writes the line before the answer's first byte: 0.26 ms of
    load_table's p50 (paired probe, two runs: 4.01 and 3.72 ms with uvicorn's line, 3.74 and
    3.46 with this one, 3.69 and 3.44 with none). The request's loop only queues its values."""

    def __init__(self, app: Callable[..., Awaitable[None]]):
        self.app = app
        self._lines: queue.SimpleQueue[tuple[object, ...] | None] = queue.SimpleQueue()

    async def __call__(self, scope: _Message, receive: Callable[[], Awaitable[_Message]],
                       send: Callable[[_Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def sending(message: _Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])  # type: ignore[call-overload]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            status = status or 500  # raised before answering: uvicorn answers 500
            raise
        finally:
            if status:
                self._lines.put((scope.get("client"), scope["method"], scope["path"], scope["query_string"],
                                 scope["http_version"], status))

    def write_lines(self) -> None:
        """Write the queued lines until `close` (the thread's loop)."""
        access = logging.getLogger(ACCESS_LOGGER)
        while (line := self._lines.get()) is not None:
            client, method, path, query, version, status = line
            scope = {"client": client, "path": path, "query_string": query}
            access.info(_ACCESS_FORMAT, get_client_addr(scope), method,  # type: ignore[arg-type]
                        get_path_with_query_string(scope), version, status)  # type: ignore[arg-type]

    def close(self) -> None:
        self._lines.put(None)


@contextlib.contextmanager
def access_logged(app: Callable[..., Awaitable[None]]) -> Iterator[AccessLog]:
    """`app` with its access log (`AccessLog`) and the thread writing it; on exit every queued
    line is written. Opened in each server process (a forked worker has no thread of its parent)."""
    logged = AccessLog(app)
    writer = threading.Thread(target=logged.write_lines, name="trinitylake-access-log", daemon=True)
    writer.start()
    try:
        yield logged
    finally:
        logged.close()
        writer.join(30)


class _Server(uvicorn.Server):
    """uvicorn's server, which after a graceful shutdown on SIGINT/SIGTERM does not raise the
    signal again (that gave click's "Aborted!" and exit 1, or a death by SIGTERM)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            try:
                yield
            finally:
                captured = getattr(self, "_captured_signals", None)
                if isinstance(captured, list):
                    captured.clear()


def uvicorn_config(app: object, host: str, port: int, opts: ServeOptions) -> uvicorn.Config:
    """uvicorn's settings for the server. Its HTTP parser and event loop stay its "auto" choice:
    httptools and uvloop, which the project depends on (a GET through PyIceberg's session took
    2.20 ms against 2.88 with h11 and asyncio), falling back to those where they cannot be
    installed. Its access log is off: `AccessLog` writes the same lines after the answers."""
    return uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,  # type: ignore[arg-type]
                          server_header=False, proxy_headers=bool(opts.forwarded_allow_ips),
                          forwarded_allow_ips=opts.forwarded_allow_ips or None, timeout_keep_alive=30)


def run_workers(count: int, run_one: Callable[[], None]) -> None:
    """`count` forked processes each running `run_one` (a uvicorn server on the listening socket
    they share: the kernel spreads the connections); SIGINT/SIGTERM are passed on to them, and
    when one ends the others are stopped. Returns once all have ended."""
    pids: list[int] = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:  # the worker
            code = 0
            try:
                run_one()
            except BaseException:  # noqa: BLE001 - a worker's failure is logged, its exit status 1
                log.exception("catalog server worker %d failed", os.getpid())
                code = 1
            finally:
                os._exit(code)
        pids.append(pid)

    def stop(signum: int, frame: object) -> None:
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        live = set(pids)
        while live:
            pid, _ = os.wait()
            live.discard(pid)
            if live:
                stop(signal.SIGTERM, None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(lakehouse: str, opts: ServeOptions, *, storage_options: dict[str, str] | None = None,
          control_uri: str | None = None, audit: bool = True, workers: int = 1) -> None:
    """Serve the lakehouse until interrupted (SIGINT/SIGTERM end it cleanly: it returns).

    The port is bound before the server announces itself: a port in use is a ConfigError.
    `workers` > 1: that many server processes on the one socket, each with its own group commit
    (rest_catalog/group_commit.py); they race for the lakehouse's roots as any writers do."""
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    auth = authenticator(opts)
    settings = ServerSettings(lakehouse=lakehouse, storage_options=dict(storage_options or {}),
                              catalog_properties=dict(opts.properties), control_uri=control_uri, audit=audit,
                              read_only=bool(opts.read_only), allow_purge=bool(opts.allow_purge),
                              max_body_bytes=opts.max_body_bytes or DEFAULT_MAX_BODY_BYTES)
    host, port = opts.host or DEFAULT_HOST, opts.port if opts.port is not None else DEFAULT_PORT
    sock = bind(host, port)
    try:
        app = build_app(settings, auth)
        for name in ("uvicorn.error", ACCESS_LOGGER):
            logging.getLogger(name).setLevel(logging.INFO)
        access = logging.getLogger(ACCESS_LOGGER)
        if not any(isinstance(f, _AccessLogFilter) for f in access.filters):
            access.addFilter(_AccessLogFilter())
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if host not in _LOOPBACK:
            log.warning("binding %s: the server speaks plain HTTP; put it behind a TLS proxy (README)", host)
        mode = "read-only" if settings.read_only else "read-write"
        how = " and ".join(x for x in ("a bearer token" if auth.has_static_token else "",
                                       "OAuth2 client credentials" if auth.issues_tokens else "") if x)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        procs = f"; {workers} worker processes" if workers > 1 else ""
        print(f"serving the Iceberg REST catalog of {lakehouse} on http://{shown}:{bound} ({mode}; {how}{procs}; "
              "Ctrl-C stops it)", file=sys.stderr, flush=True)

        def run_one(app: Callable[..., Awaitable[None]]) -> None:
            with access_logged(app) as logged:
                _Server(uvicorn_config(logged, host, bound, opts)).run(sockets=[sock])

        # the objects made so far (modules, the app) live as long as the server: out of the
        # collector's generations, so its full collections do not walk them at every request burst
        gc.freeze()
        if workers == 1:
            run_one(app)
        else:
            # each worker builds its own application (its own lakehouse handles and group commit)
            run_workers(workers, lambda: run_one(build_app(settings, auth)))
    except KeyboardInterrupt:
        pass  # Ctrl-C before uvicorn took the signal over: a stop like any other
    finally:
        sock.close()
