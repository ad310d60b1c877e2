"""An S3 endpoint with latency on 127.0.0.1: s3s-fs (a Rust S3 server over a folder) behind a
delaying TCP proxy. For the object-store benchmarks (``bench/bench_objstore.py``) and, the proxy
alone in front of the moto server, for the tests (``slow_s3`` in ``tests/s3server.py``).

The proxy (:class:`DelayProxy`) gives every client connection its own upstream connection and
forwards each chunk the client sends DELAY ms after it arrived; the answers come back at once.
Chunks are queued, not forwarded one at a time, so a request made of many chunks pays the delay
once, and every request/response round trip costs at least DELAY, as on a remote endpoint. It
also reads the HTTP/1.1 requests going through (without changing a byte) to count them by kind
(GET, HEAD, LIST, PUT, COPY, DELETE, DELETE_BATCH, ...) and to time the server: from the moment
a request's last byte went upstream to the first byte of its answer (the server's own share of
a round trip, the delay excluded).

s3s-fs 0.14.1 is built once with cargo (:func:`ensure_s3s`, about 2.5 minutes) with two patches
(:data:`PATCHES`): it took an empty ``delimiter=`` query parameter, which s3fs sends for
recursive listings, as a real delimiter where S3 treats it as none (so recursive listings saw
only the first-level folders), and it walked the whole bucket folder for every listing page
whatever the prefix (the server, not the latency, then dominated listing-heavy jobs). Objects
are plain files under ``ROOT/<bucket>/<key>``: a lakehouse built on local disk and copied under
``ROOT/<bucket>/`` is served as is.

The Go tools (:func:`ensure_gotools`, built once with ``go`` or found in the acceptance checks'
cache): s5cmd, the anchor of the object-store benchmarks (``bench/bench_objstore_anchor.py``),
and latproxy, the same delay as :class:`DelayProxy` in a Go process of its own
(:class:`GoDelayProxy`, ``latency_store(..., proxy_kind="go")``): on 2 cores the Python proxy's
event loop competes with the client under test; latproxy costs next to nothing, but counts
nothing.

Command line::

    python -m bench.objstore build                         # build s3s-fs (or find a built one)
    python -m bench.objstore gotools                       # build s5cmd and latproxy (or find them)
    python -m bench.objstore serve ROOT --delay-ms 20       # s3s-fs + proxy until Ctrl-C
    python -m bench.objstore proxy LISTEN UPSTREAM DELAY_MS # the proxy alone (LISTEN 0: any port)

Only the standard library is imported here: the tests import the proxy without cargo, boto3 or
the project.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import fcntl
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
S3S_VERSION = "0.14.1"
DEFAULT_CACHE = REPO_ROOT / ".cache" / "s3s"
# Built by ../shared/acceptance/lib/objstore.sh with the same patch (it writes `patched` after it).
SHARED_CACHE = Path("/tmp/acceptance-cache/s3s")
# Our patches to s3s-fs's src/s3.rs: name -> (text, replacement); each text occurs once.
PATCHES = {
    # S3 takes an empty `delimiter=` (s3fs sends one for recursive listings) as none.
    "empty-delimiter": (
        "let delimiter = input.delimiter.as_deref();",
        "let delimiter = input.delimiter.as_deref().filter(|d| !d.is_empty());",
    ),
    # A listing without delimiter walked the WHOLE bucket folder for every page, whatever the
    # prefix (an orphans listing of 256 prefixes of a 12k-file lakehouse: 785 ms of server time
    # a request at 16 clients); descend only into folders on the prefix's path, as the listing
    # with a delimiter already does. Same answers, in time proportional to the prefix's files.
    "prefix-listing": (
        """                if file_type.is_dir() {
                    dir_queue.push_back(entry.path());""",
        """                if file_type.is_dir() {
                    if !prefix_is_empty
                        && let Some(dir_key) = entry.path().strip_prefix(bucket_root).ok().and_then(|k| normalize_path(k, "/"))
                    {
                        let dir_key = dir_key + "/";
                        if !prefix.starts_with(dir_key.as_str()) && !dir_key.starts_with(prefix) {
                            continue;
                        }
                    }
                    dir_queue.push_back(entry.path());""",
    ),
}
DEFAULT_KEY = "bench"
DEFAULT_SECRET = "benchsecret"
REGION = "us-east-1"
CHUNK = 65536


# ---- HTTP request framing (accounting only) -------------------------------------------------
def request_kind(method: str, target: str, headers: dict[str, str]) -> str:
    """The S3 operation of one path-style request: GET, HEAD, LIST, PUT, COPY, DELETE,
    DELETE_BATCH (DeleteObjects), MPU (multipart steps), HEAD_BUCKET, BUCKET (other bucket-level
    calls) or OTHER."""
    path, _, query = target.partition("?")
    if "://" in path:  # absolute-form target
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    key = path.strip("/").partition("/")[2]
    params = {p.partition("=")[0] for p in query.split("&") if p}
    if method == "GET":
        if key:
            return "GET"
        if "list-type" in params or "prefix" in params or "delimiter" in params or not params:
            return "LIST"
        return "BUCKET"
    if method == "HEAD":
        return "HEAD" if key else "HEAD_BUCKET"
    if method == "PUT":
        if not key:
            return "BUCKET"
        if "partNumber" in params or "uploadId" in params:
            return "MPU"
        return "COPY" if "x-amz-copy-source" in headers else "PUT"
    if method == "POST":
        if "delete" in params:
            return "DELETE_BATCH"
        if "uploads" in params or "uploadId" in params:
            return "MPU"
        return "OTHER"
    if method == "DELETE":
        if "uploadId" in params:
            return "MPU"
        return "DELETE" if key else "BUCKET"
    return "OTHER"


_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _TRAILERS, _UNTIL_CLOSE, _BROKEN = range(7)
_MAX_HEAD = 1 << 16
_REQUEST_LINE = re.compile(rb"[A-Z]+ \S+ HTTP/1\.[01]\r\n")


class HttpFramer:
    """Finds where each HTTP/1.1 message ends in one direction of a connection (start line and
    headers, then a Content-Length, chunked or no body), without copying bodies.

    ``feed(data)`` returns one label per message that ENDS in `data`: for requests, their kind
    (:func:`request_kind`); for responses, their status code as a string (``"100"`` for an
    interim answer). A response framer needs `head_next`, a callable saying whether the answer
    being read is to a HEAD request (no body, whatever Content-Length says). A request sent with
    ``Expect: 100-continue`` ends at its headers (the server may answer before the body, and the
    client then never sends it): its body, if it follows, is skipped. Anything that does not
    parse turns the framer off for the rest of the connection (``broken``); the proxy forwards
    the bytes regardless. ``close()`` ends a response that runs until the connection closes."""

    __slots__ = ("_buf", "_state", "_remaining", "_label", "_response", "_head_next", "_expect_body", "_quiet")

    def __init__(self, response: bool = False, head_next: Any = None) -> None:
        self._buf = bytearray()
        self._state = _HEAD
        self._remaining = 0
        self._label = ""
        self._response = response
        self._head_next = head_next
        self._expect_body = False  # the body of an Expect: 100-continue request may follow
        self._quiet = False  # the current message was already reported

    @property
    def broken(self) -> bool:
        return self._state == _BROKEN

    def _take_block(self, data: bytes, pos: int, sep: bytes) -> tuple[bytes | None, int]:
        """Accumulate until `sep`; return (block without sep, new pos) or (None, len(data))."""
        start = len(self._buf)
        self._buf += data[pos:]
        i = self._buf.find(sep, max(0, start - len(sep) + 1))
        if i < 0:
            if len(self._buf) > _MAX_HEAD:
                self._state = _BROKEN
            return None, len(data)
        block = bytes(self._buf[:i])
        self._buf.clear()
        return block, pos + i + len(sep) - start

    def _begin(self, head: bytes) -> bool:
        """Parse a message head and set the body state; True when the message is complete."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError("bad header line")
            headers[name.strip().lower()] = value.strip()
        self._quiet = False
        if self._response:
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise ValueError("not an HTTP/1.x status line")
            self._label = status = parts[1]
            if status.startswith("1") or status in ("204", "304") or (self._head_next and self._head_next()):
                return True
        else:
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                raise ValueError("not an HTTP/1.x request line")
            self._label = request_kind(parts[0].upper(), parts[1], headers)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            self._remaining = int(headers["content-length"])
            if self._remaining < 0:
                raise ValueError("negative Content-Length")
            if not self._remaining:
                return True
            self._state = _BODY
        elif self._response:
            self._state = _UNTIL_CLOSE
            return False
        else:
            return True
        if not self._response and "100-continue" in headers.get("expect", "").lower():
            self._quiet = self._expect_body = True
        return False

    def _end(self, done: list[str]) -> None:
        self._state = _HEAD
        if not self._quiet:
            done.append(self._label)
        self._quiet = False

    def feed(self, data: bytes) -> list[str]:
        done: list[str] = []
        pos, n = 0, len(data)
        try:
            while pos < n and self._state != _BROKEN:
                st = self._state
                if self._expect_body:
                    # Does the body follow the headers, or (refused) the next request instead?
                    self._expect_body = False
                    if _REQUEST_LINE.match(data, pos):
                        self._state = _HEAD
                        continue
                if st == _HEAD:
                    if not self._buf:  # tolerate empty lines between messages (RFC 9112 2.2)
                        while data.startswith(b"\r\n", pos):
                            pos += 2
                        if pos >= n:
                            break
                    head, pos = self._take_block(data, pos, b"\r\n\r\n")
                    if head is not None:
                        if self._begin(head):
                            self._end(done)
                        elif self._quiet:
                            done.append(self._label)  # Expect: 100-continue: reported at its head
                elif st in (_BODY, _CHUNK_DATA):
                    take = min(self._remaining, n - pos)
                    pos += take
                    self._remaining -= take
                    if not self._remaining:
                        if st == _BODY:
                            self._end(done)
                        else:
                            self._state = _CHUNK_SIZE
                elif st == _CHUNK_SIZE:
                    line, pos = self._take_block(data, pos, b"\r\n")
                    if line is not None:
                        size = int(line.split(b";", 1)[0].strip() or b"x", 16)
                        if size:
                            self._remaining, self._state = size + 2, _CHUNK_DATA  # data and its CRLF
                        else:
                            # Trailer fields, if any, then an empty line. The buffer starts
                            # with the CRLF that ended the "0" line, so CRLF CRLF ends it.
                            self._state = _TRAILERS
                            self._buf += b"\r\n"
                elif st == _TRAILERS:
                    block, pos = self._take_block(data, pos, b"\r\n\r\n")
                    if block is not None:
                        self._end(done)
                elif st == _UNTIL_CLOSE:
                    pos = n
        except (ValueError, UnicodeDecodeError):
            self._state = _BROKEN
            self._buf.clear()
        return done

    def close(self) -> list[str]:
        """The connection closed: a response that ran until the close ends here."""
        if self._state == _UNTIL_CLOSE:
            done: list[str] = []
            self._end(done)
            return done
        return []


# ---- the delaying proxy -----------------------------------------------------------------------
@dataclass
class _KindStats:
    count: int = 0  # requests forwarded upstream
    timed: int = 0  # answers received in full
    server_s: float = 0.0  # sum over the timed answers: request's last byte sent -> answer's last byte
    errors: int = 0  # answers with a status >= 400


@dataclass
class _Stats:
    connections: int = 0
    chunks_up: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    unparsed_connections: int = 0
    kinds: dict[str, _KindStats] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    lag_samples: int = 0  # the proxy's own event loop: how late a 50 ms timer fired
    lag_s: float = 0.0
    lag_max_s: float = 0.0

    def snapshot(self) -> dict[str, Any]:
        kinds = {k: vars(v).copy() for k, v in sorted(self.kinds.items())}
        timed = sum(v.timed for v in self.kinds.values())
        server_s = sum(v.server_s for v in self.kinds.values())
        return {
            "connections": self.connections,
            "chunks_up": self.chunks_up,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "unparsed_connections": self.unparsed_connections,
            "requests": sum(v.count for v in self.kinds.values()),
            "requests_by_kind": {k: v["count"] for k, v in kinds.items()},
            "statuses": dict(sorted(self.statuses.items())),
            "server_s": server_s,
            "server_ms_per_request": 1000.0 * server_s / timed if timed else None,
            "loop_lag_ms": 1000.0 * self.lag_s / self.lag_samples if self.lag_samples else None,
            "loop_lag_max_ms": 1000.0 * self.lag_max_s if self.lag_samples else None,
            "kinds": kinds,
        }


class DelayProxy:
    """A TCP proxy on 127.0.0.1 that holds every client-to-server chunk for `delay_ms`.

    ``start()`` runs it on an event loop in a daemon thread and returns the port; ``stop()``
    closes it and every connection. Also a context manager (``with DelayProxy(p, 20) as px``).
    ``delay_ms`` may be changed while it runs (chunks already queued keep their due time).
    ``stats()`` / ``reset_stats()``: requests by kind, answers by status, bytes, the server's
    time summed over the requests (see the module docstring), and how late the proxy's own
    loop ran (``loop_lag_ms``: on a starved machine every time it measures is inflated).

    It sets TCP_QUICKACK on its upstream sockets before each read: s3s-fs writes an answer's
    headers and body separately with Nagle's algorithm on, so a receiver that delays its ACK
    (Linux: 40 ms) holds every GET's body for 40 ms. Real S3 has no such stall; the latency
    this proxy adds is the configured one only."""

    counts = True  # requests by kind and the server's time (GoDelayProxy keeps none)
    pid = None  # runs in this process

    def __init__(
        self,
        upstream_port: int,
        delay_ms: float,
        *,
        upstream_host: str = "127.0.0.1",
        host: str = "127.0.0.1",
        port: int = 0,
        account: bool = True,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay_ms = float(delay_ms)
        self.host, self.port = host, port
        self.account = account
        self._stats = _Stats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- life cycle
    async def _open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._handle, self.host, self.port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        watch = asyncio.ensure_future(self._watch_lag())
        self._tasks.add(watch)

    async def _watch_lag(self, every: float = 0.05) -> None:
        """How late the proxy's loop runs (CPU starvation inflates every time it measures:
        delays and the server's time alike)."""
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(every)
            lag = max(0.0, time.monotonic() - t0 - every)
            s = self._stats
            s.lag_samples += 1
            s.lag_s += lag
            s.lag_max_s = max(s.lag_max_s, lag)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def serve(self) -> None:
        """Run in the current event loop until cancelled (the command line's foreground mode)."""
        await self._open()
        try:
            await asyncio.Event().wait()
        finally:
            await self._close()

    def start(self) -> int:
        """Start on a new event loop in a daemon thread; the listening port."""
        if self._thread is not None:
            raise RuntimeError("proxy already started")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self._open())
            except BaseException as e:  # noqa: BLE001 - handed to start()
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._close())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"delay-proxy-{self.upstream[1]}", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
            raise failure[0]
        return self.port

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> DelayProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- accounting
    def _on_loop(self, fn: Any) -> Any:
        loop = self._loop
        if loop is None or self._thread is None or threading.current_thread() is self._thread:
            return fn()

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=10)

    def stats(self) -> dict[str, Any]:
        """Counters since the start or the last reset (a consistent snapshot)."""
        return self._on_loop(self._stats.snapshot)

    def reset_stats(self) -> None:
        def reset() -> None:
            self._stats = _Stats()

        self._on_loop(reset)

    def _kind(self, kind: str) -> _KindStats:
        ks = self._stats.kinds.get(kind)
        if ks is None:
            ks = self._stats.kinds[kind] = _KindStats()
        return ks

    # -- one connection
    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        uw: asyncio.StreamWriter | None = None
        try:
            try:
                ur, uw = await asyncio.open_connection(*self.upstream)
            except OSError:
                return
            self._stats.connections += 1
            pending: collections.deque[tuple[str, float]] = collections.deque()
            up = asyncio.ensure_future(self._client_to_server(cr, uw, pending))
            down = asyncio.ensure_future(self._server_to_client(ur, uw, cw, pending))
            try:
                await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
                if down.done():  # server closed: nothing more can be answered
                    up.cancel()
                else:  # client done sending: let the last answers through
                    await asyncio.wait({down}, timeout=max(60.0, 2 * self.delay_ms / 1000))
            finally:
                for t in (up, down):
                    t.cancel()
                await asyncio.gather(up, down, return_exceptions=True)
        finally:
            for w in (uw, cw):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()
            if task is not None:
                self._tasks.discard(task)

    async def _client_to_server(
        self, cr: asyncio.StreamReader, uw: asyncio.StreamWriter, pending: collections.deque[tuple[str, float]]
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes, list[str]]] = asyncio.Queue()

        async def feed() -> None:
            framer = HttpFramer() if self.account else None
            while True:
                try:
                    data = await cr.read(CHUNK)
                except OSError:
                    data = b""
                ended: list[str] = []
                if framer is not None and data:
                    ended = framer.feed(data)
                    if framer.broken:
                        self._stats.unparsed_connections += 1
                        framer = None
                queue.put_nowait((time.monotonic() + self.delay_ms / 1000.0, data, ended))
                if not data:
                    return

        async def drain() -> None:
            while True:
                due, data, ended = await queue.get()
                while (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if uw.can_write_eof():
                        with contextlib.suppress(OSError):
                            uw.write_eof()
                    return
                uw.write(data)
                now = time.monotonic()
                s = self._stats
                s.chunks_up += 1
                s.bytes_up += len(data)
                for kind in ended:
                    self._kind(kind).count += 1
                    pending.append((kind, now))
                await uw.drain()

        f = asyncio.ensure_future(feed())
        try:
            await drain()
        finally:
            f.cancel()
            await asyncio.gather(f, return_exceptions=True)

    async def _server_to_client(
        self,
        ur: asyncio.StreamReader,
        uw: asyncio.StreamWriter,
        cw: asyncio.StreamWriter,
        pending: collections.deque[tuple[str, float]],
    ) -> None:
        sock = uw.get_extra_info("socket")
        framer: HttpFramer | None = None
        if self.account:
            framer = HttpFramer(response=True, head_next=lambda: bool(pending) and pending[0][0].startswith("HEAD"))

        def answered(statuses: list[str], now: float) -> None:
            for status in statuses:
                if status.startswith("1") or not pending:  # interim ("100 Continue"), or unasked
                    continue
                kind, sent = pending.popleft()
                ks = self._kind(kind)
                ks.timed += 1
                ks.server_s += now - sent
                if status >= "400":
                    ks.errors += 1
                self._stats.statuses[status] = self._stats.statuses.get(status, 0) + 1

        try:
            while True:
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
                data = await ur.read(CHUNK)
                if not data:
                    break
                if framer is not None:
                    answered(framer.feed(data), time.monotonic())
                    if framer.broken:
                        self._stats.unparsed_connections += 1
                        framer = None
                self._stats.bytes_down += len(data)
                cw.write(data)
                await cw.drain()
        finally:
            if framer is not None:
                answered(framer.close(), time.monotonic())


# ---- s3s-fs -------------------------------------------------------------------------------------
def _patched_binary(cache: Path, need: frozenset[str] = frozenset(PATCHES)) -> Path | None:
    """The cache's s3s-fs if its `patched` marker lists every patch in `need`. The acceptance
    checks' build (``acceptance/lib/objstore.sh``) writes an empty `patched` after the
    empty-delimiter patch and `patched2` once it also has the prefix-listing one (the same two
    changes as :data:`PATCHES`, worded differently)."""
    b, marker = cache / "bin" / "s3s-fs", cache / "patched"
    if not (b.is_file() and os.access(b, os.X_OK) and marker.is_file()):
        return None
    have = set(marker.read_text().split()) or {"empty-delimiter"}
    if (cache / "patched2").is_file():  # objstore.sh's marker of its build with both patches
        have |= {"empty-delimiter", "prefix-listing"}
    return b if need <= have else None


def find_s3s(cache_dir: str | os.PathLike[str] | None = None, need: frozenset[str] = frozenset(PATCHES)) -> Path | None:
    """A built s3s-fs with the patches `need` (default: all of ours): $TLAKE_S3S_FS, then
    `cache_dir` (default ``.cache/s3s``), then the acceptance checks' cache
    (/tmp/acceptance-cache/s3s) when its markers say it has them."""
    env = os.environ.get("TLAKE_S3S_FS")
    if env:
        return Path(env) if os.access(env, os.X_OK) else None
    for cache in (Path(cache_dir) if cache_dir else DEFAULT_CACHE, SHARED_CACHE):
        b = _patched_binary(cache, need)
        if b is not None:
            return b
    return None


def ensure_s3s(cache_dir: str | os.PathLike[str] | None = None, *, log: Any = print) -> Path:
    """The path of a patched s3s-fs 0.14.1, built with cargo into `cache_dir` when none exists
    (``cargo fetch`` of the crate, the :data:`PATCHES`, ``cargo install --path``).
    A file lock keeps two builds of the same cache from running at once."""
    found = find_s3s(cache_dir)
    if found is not None:
        return found
    cache = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        b = _patched_binary(cache)
        if b is not None:
            return b
        cargo = shutil.which("cargo")
        if cargo is None:
            raise RuntimeError("building s3s-fs needs cargo (Rust): https://rustup.rs")
        work = cache / "work"
        shutil.rmtree(work, ignore_errors=True)
        (work / "fetch" / "src").mkdir(parents=True)
        (work / "fetch" / "src" / "main.rs").write_text("fn main() {}\n")
        (work / "fetch" / "Cargo.toml").write_text(
            '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n'
            f'[dependencies]\ns3s-fs = {{ version = "={S3S_VERSION}", features = ["binary"] }}\n'
        )
        build_log = cache / "build.log"
        log(f"building s3s-fs {S3S_VERSION} into {cache} (a few minutes; log: {build_log})")
        with open(build_log, "w") as out:
            _run_logged([cargo, "fetch", "-q"], work / "fetch", out, "cargo fetch of s3s-fs")
            home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
            srcs = sorted(glob.glob(str(home / "registry" / "src" / "*" / f"s3s-fs-{S3S_VERSION}")))
            if not srcs:
                raise RuntimeError(f"s3s-fs {S3S_VERSION} source not found under {home}/registry/src after cargo fetch")
            src = work / "s3s-fs"
            shutil.copytree(srcs[0], src)
            for p in src.rglob("*"):
                p.chmod(p.stat().st_mode | 0o200)
            s3rs = src / "src" / "s3.rs"
            text = s3rs.read_text()
            for name, (before, after) in PATCHES.items():
                if text.count(before) != 1:
                    raise RuntimeError(f"cannot apply the {name} patch to {s3rs}: its text is not there once")
                text = text.replace(before, after)
            s3rs.write_text(text)
            _run_logged(
                [cargo, "install", "-q", "--path", str(src), "--features", "binary", "--root", str(cache), "--force"],
                work,
                out,
                "cargo install of s3s-fs",
            )
        (cache / "patched").write_text("\n".join(PATCHES) + "\n")
        b = _patched_binary(cache)
        if b is None:
            raise RuntimeError(f"cargo install finished but {cache}/bin/s3s-fs is missing")
        return b


def _run_logged(cmd: list[str], cwd: Path, out: Any, what: str, env: dict[str, str] | None = None) -> None:
    out.write(f"$ {' '.join(cmd)}\n")
    out.flush()
    rc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    if rc:
        out.flush()
        tail = Path(out.name).read_text().strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"{what} failed (exit {rc}): {tail[0]}")


# ---- Go tools: s5cmd (the anchor) and latproxy (a delaying proxy that costs no Python CPU) -------
S5CMD_VERSION = "v2.3.0"
DEFAULT_GOTOOLS = REPO_ROOT / ".cache" / "gotools"
# Built by ../shared/acceptance/lib/gotools.sh (same s5cmd, same latproxy source).
SHARED_GOTOOLS = Path("/tmp/acceptance-cache/gotools")
GOTOOLS = ("s5cmd", "latproxy")
# latproxy: the acceptance checks' Go proxy (acceptance/lib/latproxy/main.go), verbatim.
LATPROXY_GO = """// latproxy: a TCP proxy that delays every chunk a client sends by a fixed time (an object store
// far away), forwarding answers at once; per-kind request counts are not kept. Go, so the proxy
// itself is never the bottleneck of a benchmark on 2 cores.
// usage: latproxy LISTEN_PORT UPSTREAM_PORT DELAY_MS
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

type chunk struct {
	due  time.Time
	data []byte
}

func quickack(c *net.TCPConn) {
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, 12, 1) })
	}
}

func handle(client *net.TCPConn, upstreamAddr string, delay time.Duration) {
	defer client.Close()
	u, err := net.Dial("tcp", upstreamAddr)
	if err != nil {
		return
	}
	up := u.(*net.TCPConn)
	defer up.Close()
	q := make(chan chunk, 4096)
	go func() { // client -> queue
		for {
			buf := make([]byte, 65536)
			n, err := client.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(delay), buf[:n]}
			}
			if err != nil {
				close(q)
				return
			}
		}
	}()
	go func() { // queue -> upstream, each chunk at its due time
		for c := range q {
			if w := time.Until(c.due); w > 0 {
				time.Sleep(w)
			}
			if _, err := up.Write(c.data); err != nil {
				return
			}
		}
		up.CloseWrite()
	}()
	// upstream -> client at once; ack the server promptly (no 40 ms delayed ACK against Nagle)
	buf := make([]byte, 65536)
	for {
		quickack(up)
		n, err := up.Read(buf)
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				client.CloseWrite()
			}
			return
		}
	}
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: latproxy LISTEN_PORT UPSTREAM_PORT DELAY_MS")
		os.Exit(2)
	}
	ms, _ := strconv.ParseFloat(os.Args[3], 64)
	delay := time.Duration(ms * float64(time.Millisecond))
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go handle(c.(*net.TCPConn), "127.0.0.1:"+os.Args[2], delay)
	}
}
"""


def find_gotools(cache_dir: str | os.PathLike[str] | None = None) -> dict[str, Path] | None:
    """s5cmd and latproxy, both from one cache: `cache_dir` (default ``.cache/gotools``), then
    the acceptance checks' cache (/tmp/acceptance-cache/gotools); None when neither has both."""
    for cache in (Path(cache_dir) if cache_dir else DEFAULT_GOTOOLS, SHARED_GOTOOLS):
        tools = {name: cache / "bin" / name for name in GOTOOLS}
        if all(t.is_file() and os.access(t, os.X_OK) for t in tools.values()):
            return tools
    return None


def ensure_gotools(cache_dir: str | os.PathLike[str] | None = None, *, log: Any = print) -> dict[str, Path]:
    """s5cmd and latproxy, built with the Go toolchain into `cache_dir` when no cache has them
    (about a minute). ``go install ...@version`` fails here (it asks the module proxy for
    deprecations, which ours refuses), so s5cmd is built from a throwaway module that requires
    it, as ``acceptance/lib/gotools.sh`` does; latproxy from :data:`LATPROXY_GO`."""
    found = find_gotools(cache_dir)
    if found is not None:
        return found
    cache = Path(cache_dir) if cache_dir else DEFAULT_GOTOOLS
    (cache / "bin").mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find_gotools(cache)
        if found is not None and found["s5cmd"].parent == cache / "bin":
            return found
        go = shutil.which("go")
        if go is None:
            raise RuntimeError("building s5cmd and latproxy needs the Go toolchain: https://go.dev/dl/")
        env = {**os.environ, "GOFLAGS": "-mod=mod"}
        build_log = cache / "build.log"
        log(f"building s5cmd {S5CMD_VERSION} and latproxy into {cache} (about a minute; log: {build_log})")
        with open(build_log, "w") as out:
            s5 = cache / "s5"
            s5.mkdir(exist_ok=True)
            if not (s5 / "go.mod").is_file():
                _run_logged([go, "mod", "init", "s5"], s5, out, "go mod init", env)
            _run_logged([go, "get", f"github.com/peak/s5cmd/v2@{S5CMD_VERSION}"], s5, out, "go get of s5cmd", env)
            _run_logged([go, "build", "-o", str(cache / "bin" / "s5cmd"), "github.com/peak/s5cmd/v2"], s5, out,
                        "go build of s5cmd", env)
            lp = cache / "latproxy"
            lp.mkdir(exist_ok=True)
            (lp / "go.mod").write_text("module latproxy\n\ngo 1.22\n")
            (lp / "main.go").write_text(LATPROXY_GO)
            _run_logged([go, "build", "-o", str(cache / "bin" / "latproxy"), "."], lp, out, "go build of latproxy", env)
    found = find_gotools(cache)
    if found is None:
        raise RuntimeError(f"the Go builds finished but {cache}/bin lacks s5cmd or latproxy")
    return found


def process_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of a running process so far (/proc), None when unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proxy_control(upstream_port: int, delay_ms: float) -> int:
    """`ProcessDelayProxy`'s child (``python -m bench.objstore proxy-control``): a `DelayProxy`,
    driven by one JSON command a line on stdin, each answered by one JSON line on stdout."""
    out = sys.stdout
    proxy = DelayProxy(upstream_port, delay_ms)
    try:
        port = proxy.start()
    except OSError as e:
        out.write(json.dumps({"error": repr(e)}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps({"port": port}) + "\n")
    out.flush()
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            answer: Any = None
            if cmd["cmd"] == "stop":
                break
            if cmd["cmd"] == "delay":
                proxy.delay_ms = float(cmd["value"])
            elif cmd["cmd"] == "stats":
                answer = proxy.stats()
            elif cmd["cmd"] == "reset":
                proxy.reset_stats()
            out.write(json.dumps({"ok": answer}) + "\n")
            out.flush()
    finally:
        proxy.stop()
    return 0


class ProcessDelayProxy:
    """:class:`DelayProxy` in a process of its own: the same delay and the same counts, without
    its event loop taking turns on the interpreter lock of a client under test that runs in
    the bench's process (the tables' benchmark runs both tools in process). In that process
    it cost a CPU-bound client 8-13% of its time: 50 tables' expire at 20 ms took 3.76-3.93 s
    with it, 3.27-3.63 s with latproxy (no counts) outside. ``delay_ms`` may be changed while
    it runs."""

    counts = True

    def __init__(self, upstream_port: int, delay_ms: float) -> None:
        self.upstream_port = upstream_port
        self._delay_ms = float(delay_ms)
        self.port = 0
        self._proc: subprocess.Popen[str] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def delay_ms(self) -> float:
        return self._delay_ms

    @delay_ms.setter
    def delay_ms(self, value: float) -> None:
        self._delay_ms = float(value)
        if self._proc is not None:
            self._ask("delay", self._delay_ms)

    def _line(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the proxy process ended (exit {self._proc.poll()})")
        return dict(json.loads(line))

    def _ask(self, cmd: str, value: Any = None) -> Any:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"cmd": cmd, "value": value}) + "\n")
        self._proc.stdin.flush()
        return self._line()["ok"]

    def start(self) -> int:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.objstore", "proxy-control", str(self.upstream_port), f"{self._delay_ms:g}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=env)
        first = self._line()
        if "port" not in first:
            self.stop()
            raise RuntimeError(f"the proxy process did not start: {first.get('error')}")
        self.port = int(first["port"])
        return self.port

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _stop_process(proc)
        if proc.stdout is not None:
            proc.stdout.close()

    def stats(self) -> dict[str, Any]:
        """Counters since the start or the last reset (see :meth:`DelayProxy.stats`)."""
        return dict(self._ask("stats"))

    def reset_stats(self) -> None:
        self._ask("reset")


class GoDelayProxy:
    """latproxy (Go) in a process of its own, in front of `upstream_port`: the same delay as
    :class:`DelayProxy` (each client chunk held `delay_ms`, answers at once, the server acked
    promptly), without its Python event loop on the cores of the client under test. It keeps
    no counts: :meth:`stats` says so (``requests`` None); `counts` is False."""

    counts = False

    def __init__(self, upstream_port: int, delay_ms: float, binary: str | os.PathLike[str]) -> None:
        self.upstream_port = upstream_port
        self.delay_ms = float(delay_ms)
        self.binary = str(binary)
        self.port = 0
        self.proc: subprocess.Popen[Any] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> int:
        for _attempt in range(5):  # the free port may be taken between probe and bind
            port = free_port()
            proc = subprocess.Popen([self.binary, str(port), str(self.upstream_port), f"{self.delay_ms:g}"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if wait_listening(port, proc):
                self.port, self.proc = port, proc
                return port
            _stop_process(proc)
        raise RuntimeError(f"latproxy did not start ({self.binary})")

    def stop(self) -> None:
        if self.proc is not None:
            _stop_process(self.proc)
            self.proc = None

    def stats(self) -> dict[str, Any]:
        return {"requests": None, "requests_by_kind": {}, "kinds": {}, "server_s": None, "loop_lag_ms": None}

    def reset_stats(self) -> None:
        pass


MEMORY_MOUNT = Path("/dev/shm")


def memory_backed(where: Path | None = None) -> bool:
    """Whether `where` (default `MEMORY_MOUNT`) is a writable tmpfs mount (its files live in memory)."""
    where = MEMORY_MOUNT if where is None else where
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    return any(m[1] == str(where) and m[2] == "tmpfs" for m in mounts if len(m) > 2) and os.access(where, os.W_OK)


@contextlib.contextmanager
def store_files_dir(fallback: Path, on: str = "tmpfs") -> Iterator[tuple[Path, str]]:
    """Where a latency store keeps its objects, and what it is (``tmpfs`` or ``disk``): a new
    folder on the tmpfs mount when `on` is ``tmpfs`` and the machine has one, else `fallback`;
    the tmpfs folder is removed on exit.

    Why tmpfs: s3s-fs writes each PUT as files of its own (the object, its metadata JSON), and on
    this machine's disk (ext4 without a journal, whose inode allocator skips every inode deleted
    in the last minute) that cost 7.5 ms of s3s-fs CPU a PUT, on the 2 cores the code under test
    runs on: 64 PUTs in flight took 300 ms where the 20 ms delay allows one round trip. On tmpfs
    0.5-0.8 ms a PUT. A real object store's CPU is not on the client's cores."""
    if on == "tmpfs" and memory_backed():
        d = Path(tempfile.mkdtemp(prefix="latency-store-", dir=MEMORY_MOUNT))
        try:
            yield d, "tmpfs"
        finally:
            shutil.rmtree(d, ignore_errors=True)
    else:
        yield fallback, "disk"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen[Any], timeout: float = 20.0) -> bool:
    """Whether `proc` listens on 127.0.0.1:`port` within `timeout` seconds (False: it exited,
    or it did not listen in time)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        time.sleep(0.05)
    return False


@dataclass
class LatencyStore:
    """A running s3s-fs behind a :class:`DelayProxy` (see :func:`latency_store`)."""

    root: Path
    endpoint_url: str  # through the proxy: what clients should use
    direct_url: str  # s3s-fs itself, no delay
    key: str
    secret: str
    proxy: DelayProxy | ProcessDelayProxy | GoDelayProxy
    region: str = REGION
    server_pid: int | None = None  # s3s-fs's process (its CPU: process_cpu_seconds)

    @property
    def env(self) -> dict[str, str]:
        """AWS variables for clients (boto3, s3fs, the tlake CLI and its Spark workers)."""
        return {
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

    @property
    def storage_options(self) -> dict[str, str]:
        return {"endpoint_url": self.endpoint_url, "key": self.key, "secret": self.secret}

    def tlake_args(self) -> list[str]:
        """The `tlake` group flags that point at this endpoint (credentials come from `env`)."""
        return ["--storage-option", f"endpoint_url={self.endpoint_url}"]

    def bucket_dir(self, bucket: str) -> Path:
        """The folder of `bucket` (created: in s3s-fs a bucket is a folder under the root)."""
        d = self.root / bucket
        d.mkdir(parents=True, exist_ok=True)
        return d


@contextlib.contextmanager
def latency_store(
    root_dir: str | os.PathLike[str],
    delay_ms: float = 20.0,
    *,
    key: str = DEFAULT_KEY,
    secret: str = DEFAULT_SECRET,
    binary: str | os.PathLike[str] | None = None,
    log_path: str | os.PathLike[str] | None = None,
    proxy_kind: str = "python",
) -> Iterator[LatencyStore]:
    """s3s-fs serving `root_dir` (one folder per bucket) behind a proxy adding `delay_ms` to each
    request; both stopped on exit. Builds s3s-fs first if needed (:func:`ensure_s3s`).

    `proxy_kind`: ``"python"`` (:class:`DelayProxy`: counts requests by kind and times the
    server; its delay can change between requests), ``"process"`` (the same in a process of its
    own, :class:`ProcessDelayProxy`: for clients measured in this process), ``"go"`` (:class:`GoDelayProxy`, built by
    :func:`ensure_gotools` if needed: no counts, a fixed delay, next to no CPU) or ``"auto"``
    (go when a built latproxy is found, else python)."""
    if proxy_kind not in ("python", "process", "go", "auto"):
        raise ValueError(f"proxy_kind must be python, process, go or auto, not {proxy_kind!r}")
    latproxy: Path | None = None
    if proxy_kind == "go":
        latproxy = ensure_gotools()["latproxy"]
    elif proxy_kind == "auto":
        found = find_gotools()
        latproxy = found["latproxy"] if found else None
    root = Path(root_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    exe = str(binary) if binary else str(ensure_s3s())
    log_file = open(log_path or os.devnull, "ab")  # noqa: SIM115 - closed below
    proc: subprocess.Popen[Any] | None = None
    proxy: DelayProxy | ProcessDelayProxy | GoDelayProxy | None = None
    try:
        for _attempt in range(5):  # the free port may be taken between probe and bind
            port = free_port()
            proc = subprocess.Popen(
                [exe, "--host", "127.0.0.1", "--port", str(port), "--access-key", key, "--secret-key", secret, str(root)],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
            )
            if wait_listening(port, proc):
                break
            _stop_process(proc)
            proc = None
        if proc is None:
            raise RuntimeError(f"s3s-fs did not start ({exe}); see {log_path or 'its log (pass log_path)'}")
        proxy = (GoDelayProxy(port, delay_ms, latproxy) if latproxy
                 else ProcessDelayProxy(port, delay_ms) if proxy_kind == "process" else DelayProxy(port, delay_ms))
        proxy.start()
        yield LatencyStore(root, proxy.endpoint_url, f"http://127.0.0.1:{port}", key, secret, proxy,
                           server_pid=proc.pid)
    finally:
        if proxy is not None:
            proxy.stop()
        if proc is not None:
            _stop_process(proc)
        log_file.close()


def _stop_process(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- command line -------------------------------------------------------------------------------
def _parse_hostport(s: str) -> tuple[str, int]:
    host, sep, port = s.rpartition(":")
    return (host or "127.0.0.1") if sep else "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.objstore", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build s3s-fs with cargo (or find a built one) and print its path")
    b.add_argument("--cache", default=None, help=f"cache folder (default {DEFAULT_CACHE.relative_to(REPO_ROOT)})")
    g = sub.add_parser("gotools", help="build s5cmd and latproxy with Go (or find built ones) and print their paths")
    g.add_argument("--cache", default=None, help=f"cache folder (default {DEFAULT_GOTOOLS.relative_to(REPO_ROOT)})")
    s = sub.add_parser("serve", help="serve ROOT through s3s-fs and the delaying proxy until interrupted")
    s.add_argument("root")
    s.add_argument("--delay-ms", type=float, default=20.0)
    s.add_argument("--key", default=DEFAULT_KEY)
    s.add_argument("--secret", default=DEFAULT_SECRET)
    s.add_argument("--proxy", choices=("python", "go", "auto"), default="python",
                   help="the delaying proxy: python (counts requests), go (latproxy) or auto")
    c = sub.add_parser("proxy-control", help="the delaying proxy for ProcessDelayProxy: JSON commands on stdin")
    c.add_argument("upstream", type=int)
    c.add_argument("delay_ms", type=float)
    x = sub.add_parser("proxy", help="the delaying proxy alone, in the foreground")
    x.add_argument("listen", type=int, help="port to listen on (0: any free port, printed)")
    x.add_argument("upstream", help="upstream PORT or HOST:PORT")
    x.add_argument("delay_ms", type=float)
    a = p.parse_args(argv)

    if a.cmd == "build":
        print(ensure_s3s(a.cache))
        return 0
    if a.cmd == "gotools":
        for path in ensure_gotools(a.cache).values():
            print(path)
        return 0
    if a.cmd == "proxy-control":
        return _proxy_control(a.upstream, a.delay_ms)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if a.cmd == "serve":
        with latency_store(a.root, a.delay_ms, key=a.key, secret=a.secret, proxy_kind=a.proxy) as st:
            for k, v in st.env.items():
                print(f"export {k}={v}")
            print(f"# s3s-fs {st.direct_url} (direct), {st.endpoint_url} with {a.delay_ms:g} ms a request")
            print(f"# tlake --lakehouse s3://BUCKET/PATH {' '.join(st.tlake_args())} ...", flush=True)
            stop.wait()
            if st.proxy.counts:
                print(json.dumps(st.proxy.stats()), file=sys.stderr)
        return 0
    host, port = _parse_hostport(a.upstream)
    proxy = DelayProxy(port, a.delay_ms, upstream_host=host, port=a.listen)
    with proxy:
        print(f"proxy 127.0.0.1:{proxy.port} -> {host}:{port}, {a.delay_ms:g} ms", flush=True)
        stop.wait()
        print(json.dumps(proxy.stats()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
