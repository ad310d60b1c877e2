"""The I/O engine for S3: asynchronous requests through the Rust `object_store` client
(``obstore``), as many in flight as the store's latency needs, up to what the client's CPU allows.

Why this client and this shape (measured on these 2-core machines, ../shared/ENVIRONMENT.md):

* **CPU per request.** botocore costs 1.0-2.3 ms of client CPU a request, and its interpreter
  lock caps one process near 500 requests/s whatever the cores. ``obstore`` costs 0.2-0.5 ms a
  GET, PUT or copy, with its own runtime spreading the requests over the cores.
* **Requests in flight by Little's law.** A phase that must send N requests at latency W needs
  ``N x W / L`` seconds with L in flight. L is set from the store's measured round trip (the
  shortest of the recent requests, as TCP's BBR takes its minimum RTT: the store's latency, not
  the queueing our own load adds, which would feed back into more requests in flight and more
  queueing) times the rate one process can sustain (cores / CPU per request), between
  `MIN_IN_FLIGHT` and `MAX_IN_FLIGHT`: at 20 ms about 130 in flight, at 100 ms about 650. A
  fixed thread count (16) capped every phase at 160 requests/s at 100 ms.
* **One event loop per process**, on a daemon thread of its own: callers on any thread (the
  driver's phases, an executor task, a copy worker) hand it a batch and wait; every batch
  shares one limit, so parallel callers never multiply it.

`ObjectIO.for_options` gives the engine for a storage's S3 options, or None where it cannot
serve them (``obstore`` not installed, an option it has no equivalent for, or a forked child of
a process whose runtime started: its threads did not survive the fork); `Storage` then keeps
s3fs. Errors come back as the builtin errors `Storage` already types: FileNotFoundError,
FileExistsError (a refused ``If-None-Match: *``), PermissionError (403), and OSError with a
transient errno for what a retry may cure; a batch returns them per item, never raises for one.
Every request is counted by kind (`trinitylake.storage.requests`).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import errno
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from trinitylake import lazy
from trinitylake.storage import requests
from trinitylake.storage.in_flight import MAX_IN_FLIGHT, QUIET_IN_FLIGHT, InFlight
from trinitylake.storage.options import StorageOptions
from trinitylake.storage.retry import RETRY_ATTEMPTS, TRANSIENT_STATUSES, backoff_seconds, is_transient

if TYPE_CHECKING:
    import asyncio

    import obstore
    from obstore import ListResult, ListStream, ObjectMeta, PutResult
    from obstore import exceptions as obstore_errors
    from obstore.store import S3Store
else:  # the object-store client loads when a storage first sends a request, not with every `tlake` command
    asyncio = lazy.module("asyncio", globals(), "asyncio")  # 40 ms of a local command's start-up, for S3 only
    obstore = lazy.module("obstore", globals(), "obstore")
    obstore_errors = lazy.module("obstore.exceptions", globals(), "obstore_errors")
    S3Store = lazy.attr("obstore.store", "S3Store", globals(), "S3Store")

log = logging.getLogger(__name__)
T = TypeVar("T")

#: A LIST answers at most this many keys (S3's page).
LIST_PAGE = 1000

# Options of a storage (s3fs-style, `trinitylake.storage.options`) the engine understands; any
# other option keeps the storage on s3fs, which knows them all.
_KNOWN_OPTIONS = frozenset({"endpoint_url", "key", "secret", "token", "anon", "client_kwargs", "config_kwargs",
                            "use_listings_cache", "skip_instance_cache", "use_ssl"})
_KNOWN_CLIENT_KWARGS = frozenset({"endpoint_url", "region_name"})

_ENGINES: dict[str, ObjectIO] = {}
_ENGINES_LOCK = threading.Lock()
_RUNTIME_PID: list[int | None] = [None]  # the process whose obstore runtime started (fork check)


# ---- requests in flight --------------------------------------------------------------------------
class _Gate:
    """At most `InFlight.limit()` requests in flight on the loop, whichever batch they belong to."""

    def __init__(self, in_flight: InFlight):
        self.in_flight = in_flight
        self.active = 0
        self.peak = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        while self.active >= self.in_flight.limit():
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut
        self.active += 1
        self.peak = max(self.peak, self.active)

    def release(self) -> None:
        self.active -= 1
        room = self.in_flight.limit() - self.active
        while room > 0 and self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                room -= 1


# ---- errors ----------------------------------------------------------------------------------------
# An obstore error's text names the request's URL (endpoint, port, bucket, key): its status is
# read from "status: NNN" / "status code: NNN" with every URL blanked first, so a port such as
# 41273 or a key named "forbidden" never reads as a 412 or a 403 (a 500 on port 41273 once
# read as "already exists" and failed a run that a retry would have cured).
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"',()]+", re.IGNORECASE)
_STATUS = re.compile(r"\bstatus(?: code)?:\s*(\d{3})\b", re.IGNORECASE)
_TRANSIENT_WORDS = ("timed out", "timeout", "connection", "error sending request", "reset", "broken pipe",
                    "slowdown", "service unavailable", "internal error", "dns error", "incomplete", "body error")


def as_builtin(exc: BaseException, what: str) -> BaseException:
    """An obstore error as the builtin error `Storage` callers handle, naming `what`."""
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, obstore_errors.NotFoundError):
        return FileNotFoundError(errno.ENOENT, f"no such file: {what}")
    if isinstance(exc, obstore_errors.AlreadyExistsError | obstore_errors.PreconditionError):
        return FileExistsError(errno.EEXIST, f"already exists: {what}")
    if isinstance(exc, obstore_errors.PermissionDeniedError | obstore_errors.UnauthenticatedError):
        return PermissionError(errno.EACCES, f"access denied to {what}: {text}")
    low = _URL.sub("<url>", str(exc)).lower()
    statuses = {int(s) for s in _STATUS.findall(low)}
    if 404 in statuses or (not statuses and "404" in low and "not found" in low):
        return FileNotFoundError(errno.ENOENT, f"no such file: {what}")
    if 412 in statuses or (not statuses and "precondition" in low):
        return FileExistsError(errno.EEXIST, f"already exists: {what}")
    if statuses & {401, 403} or (not statuses and ("accessdenied" in low or "forbidden" in low)):
        return PermissionError(errno.EACCES, f"access denied to {what}: {text}")
    if "conditionalrequestconflict" in low and (409 in statuses or not statuses):
        return ConditionalConflict(f"conditional write conflict on {what}: {text}")
    if statuses & TRANSIENT_STATUSES or (not statuses and any(w in low for w in _TRANSIENT_WORDS)):
        return ConnectionError(errno.EIO, f"{what}: {text}")
    # An answered 4xx is final (EINVAL, not retried); an unknown generic failure may be the I/O's.
    io = isinstance(exc, obstore_errors.GenericError) and not statuses
    return OSError(errno.EIO if io else errno.EINVAL, f"{what}: {text}")


class ConditionalConflict(OSError):
    """S3's 409 ConditionalRequestConflict: another conditional write to the key was in flight;
    this one did not take effect. Its own retry loop (`Storage.create_exclusive`), not the
    generic transient one."""


# ---- one listed object -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Listed:
    """One object of a listing: its key in the bucket, size, mtime (epoch s) and ETag (quoted
    as S3 answers it, or None)."""

    key: str
    size: int
    mtime: float
    etag: str | None


def _listed(meta: ObjectMeta) -> Listed:
    lm = meta.get("last_modified")
    return Listed(str(meta["path"]), int(meta.get("size") or 0), float(lm.timestamp()) if lm is not None else 0.0,
                  meta.get("e_tag"))


# ---- the engine ------------------------------------------------------------------------------------
class ObjectIO:
    """One S3 endpoint with one set of credentials: a store per bucket, one limit of requests in
    flight, one event loop (see the module doc). Paths are ``bucket/key``."""

    def __init__(self, config: StorageOptions, client_options: StorageOptions, identity: str):
        self.config = config
        self.client_options = client_options
        #: Endpoint and credentials, hashed: two storages with equal identities reach the same
        #: objects with the same rights (a copy between them can be server-side).
        self.identity = identity
        self.in_flight = InFlight()
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._gate: _Gate | None = None

    def close(self) -> None:
        """Drain the loop, stop it and let go of the stores (at exit: see `_shutdown_at_exit`).

        Draining first: a task still pending (a batch abandoned on an error, a listing not read
        to its end) holds a request of the client's runtime, whose thread calls into Python
        when it completes. Done during interpreter finalization, that call ends the thread
        with a forced unwind through Rust frames: a silent SIGABRT of a process whose work was
        done (seen in about one `tlake` process on S3 in a hundred). Cancelled and awaited
        here, while the interpreter is whole, the runtime has nothing left to answer."""
        lp, th = self._loop, self._thread
        if lp is not None and th is not None and th.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(_drain(), lp).result(timeout=5)
            except Exception:  # noqa: BLE001 - a best-effort drain: stopping still follows
                log.debug("object I/O: draining the loop at close did not finish", exc_info=True)
            lp.call_soon_threadsafe(lp.stop)
            th.join(timeout=5)
        self._stores.clear()
        self._loop = self._thread = None

    # -- construction --
    @classmethod
    def for_options(cls, options: StorageOptions) -> ObjectIO | None:
        """The process's engine for these S3 options, or None where it cannot serve them."""
        if not _options_supported(options):
            return None
        pid = os.getpid()
        if _RUNTIME_PID[0] is not None and _RUNTIME_PID[0] != pid:
            return None  # a forked child: the parent's client runtime threads are gone
        config, client_options = _obstore_config(options)
        key = json.dumps([config, client_options], sort_keys=True, default=str)
        with _ENGINES_LOCK:
            eng = _ENGINES.get(key)
            if eng is None:
                ident = hashlib.sha256(key.encode()).hexdigest()[:16]
                eng = _ENGINES[key] = cls(config, client_options, ident)
            return eng

    def store(self, bucket: str) -> S3Store:
        st = self._stores.get(bucket)
        if st is None:
            with self._lock:
                st = self._stores.get(bucket)
                if st is None:
                    _RUNTIME_PID[0] = os.getpid()
                    # Retries are ours (per request, `is_transient`, the storage's backoff), so
                    # that a failure reads the same through every client.
                    st = self._stores[bucket] = S3Store(
                        bucket, config=self.config, client_options=self.client_options,  # type: ignore[arg-type]
                        retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=60),
                                      "backoff": {"init_backoff": timedelta(seconds=0.05), "max_backoff": timedelta(seconds=2),
                                                  "base": 2}})
        return st

    def loop(self) -> asyncio.AbstractEventLoop:
        lp = self._loop
        if lp is not None:
            return lp
        with self._lock:
            if self._loop is None:
                lp = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(lp)
                    ready.set()
                    lp.run_forever()

                thread = threading.Thread(target=run, name="trinitylake-object-io", daemon=True)
                thread.start()
                ready.wait()
                self._thread = thread
                _shutdown_at_exit(self)
                self._gate = _Gate(self.in_flight)
                self._loop = lp
            return self._loop

    def run(self, coro: Awaitable[T]) -> T:
        """Run `coro` on the engine's loop and wait for it (from any thread but the loop's)."""
        fut: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop())  # type: ignore[arg-type]
        return fut.result()

    @property
    def peak_in_flight(self) -> int:
        return self._gate.peak if self._gate is not None else 0

    # -- one request, counted, timed, retried --
    async def _request(self, kind: str | None, what: str, make: Callable[[], Awaitable[T]], attempts: int) -> T:
        gate = self._gate
        assert gate is not None
        n = 0
        while True:
            n += 1
            await gate.acquire()
            t0 = time.perf_counter()
            quiet_start = gate.active <= QUIET_IN_FLIGHT
            try:
                if kind is not None:
                    requests.record(kind)
                out = await make()
            except Exception as e:  # noqa: BLE001 - typed below
                err = as_builtin(e, what)
                if n >= attempts or not is_transient(err):
                    raise err from e
            else:
                self.in_flight.observe(time.perf_counter() - t0, quiet=quiet_start and gate.active <= QUIET_IN_FLIGHT)
                return out
            finally:
                gate.release()
            await asyncio.sleep(backoff_seconds(n))

    async def _many(self, items: Sequence[Any], one: Callable[[Any], Awaitable[T]]) -> list[T | BaseException]:
        """``one(item)`` for every item, as many at once as the gate lets through; per item its
        result or its (builtin) error. Tasks are started in windows, so a batch of a million
        items holds a window's coroutines, not a million."""
        out: list[T | BaseException] = [None] * len(items)  # type: ignore[list-item]
        it = iter(range(len(items)))

        async def worker() -> None:
            # Workers pull items until none is left; the gate decides how many of their
            # requests are in flight (asyncio.wait over thousands of tasks cost O(n) a call).
            for i in it:
                try:
                    out[i] = await one(items[i])
                except Exception as e:  # noqa: BLE001 - returned per item
                    out[i] = e

        self.in_flight.batch_started()
        try:
            await asyncio.gather(*(worker() for _ in range(min(len(items), MAX_IN_FLIGHT))))
        finally:
            self.in_flight.batch_ended()
        return out

    # -- batches (each item: its result or its error) --
    def get_many(self, paths: Sequence[str], attempts: int = RETRY_ATTEMPTS) -> list[bytes | BaseException]:
        """The bytes of each ``bucket/key``."""

        async def one(fp: str) -> bytes:
            bucket, key = _split(fp)

            async def get() -> bytes:
                res = await obstore.get_async(self.store(bucket), key)
                return bytes(await res.bytes_async())

            data = await self._request("get", f"s3://{fp}", get, attempts)
            requests.record("bytes_read", len(data))
            return data

        return self.run(self._many(paths, one)) if paths else []

    def delete_many(self, batches: Sequence[tuple[str, list[str]]], attempts: int = RETRY_ATTEMPTS
                    ) -> list[None | BaseException]:
        """One bulk delete (S3 DeleteObjects, at most 1,000 keys) per ``(bucket, keys)``, in
        flight together; per batch None (every key is gone, a missing one included) or the
        error of the request or of its first refused key, which does not name the others."""

        async def one(batch: tuple[str, list[str]]) -> None:
            bucket, keys = batch

            async def delete() -> None:
                await obstore.delete_async(self.store(bucket), keys)

            await self._request("delete", f"s3://{bucket}/{keys[0]} and {len(keys) - 1} more keys", delete, attempts)

        return self.run(self._many(batches, one)) if batches else []

    def put_many(self, items: Sequence[tuple[str, bytes]], *, exclusive: bool,
                 attempts: int = RETRY_ATTEMPTS) -> list[str | None | BaseException]:
        """PUT each ``(bucket/key, bytes)``; with `exclusive` as ``If-None-Match: *`` (a key that
        exists comes back as FileExistsError, never overwritten). Per item the ETag answered."""

        mode: Literal["create", "overwrite"] = "create" if exclusive else "overwrite"

        async def one(item: tuple[str, bytes]) -> str | None:
            fp, data = item
            bucket, key = _split(fp)

            async def put() -> PutResult:
                return await obstore.put_async(self.store(bucket), key, data, mode=mode, use_multipart=False)

            res = await self._request("put", f"s3://{fp}", put, attempts)
            requests.record("bytes_written", len(data))
            etag = res.get("e_tag") if isinstance(res, dict) else None
            return str(etag) if etag else None

        return self.run(self._many(items, one)) if items else []

    def copy_many(self, pairs: Sequence[tuple[str, str]], attempts: int = RETRY_ATTEMPTS) -> list[None | BaseException]:
        """Server-side copy of each ``(bucket/src, bucket/dst)`` (one bucket per pair): one
        CopyObject with ``If-None-Match: *``, no byte through the client. A target that exists
        comes back as FileExistsError (never overwritten); a missing source as FileNotFoundError."""

        async def one(pair: tuple[str, str]) -> None:
            src, dst = pair
            sb, sk = _split(src)
            db, dk = _split(dst)
            if sb != db:
                raise ValueError(f"server-side copy across buckets: s3://{src} -> s3://{dst}")

            async def copy() -> None:
                await obstore.copy_async(self.store(db), sk, dk, overwrite=False)

            await self._request("copy", f"s3://{dst}", copy, attempts)

        return self.run(self._many(pairs, one)) if pairs else []

    def head_many(self, paths: Sequence[str], attempts: int = RETRY_ATTEMPTS) -> list[Listed | BaseException]:

        async def one(fp: str) -> Listed:
            bucket, key = _split(fp)

            async def head() -> ObjectMeta:
                return await obstore.head_async(self.store(bucket), key)

            return _listed(await self._request("head", f"s3://{fp}", head, attempts))

        return self.run(self._many(paths, one)) if paths else []

    def list_objects(self, base: str, *, start_after: str | None = None, stop_after: str | None = None,
             attempts: int = RETRY_ATTEMPTS) -> Iterator[Listed]:
        """Objects under the folder ``bucket/prefix`` (recursive, keys in order), pages fetched one
        ahead of the caller; from after `start_after` and up to `stop_after` (keys) when given."""
        bucket, prefix = _split(base, allow_bare=True)
        prefix = prefix.strip("/")
        stream = self._open_list(bucket, prefix, start_after)
        while True:
            page = self.run(self._next_page(stream, f"s3://{base}", attempts))
            if page is None:
                return
            for meta in page:
                item = _listed(meta)
                if stop_after is not None and item.key > stop_after:
                    return
                yield item

    def list_dirs(self, base: str) -> tuple[list[str], list[Listed]]:
        """Immediate children of the folder ``bucket/prefix``: (sub-folder keys, objects)."""

        bucket, prefix = _split(base, allow_bare=True)
        prefix = prefix.strip("/")

        async def lst() -> ListResult[Sequence[ObjectMeta]]:
            return await obstore.list_with_delimiter_async(self.store(bucket), prefix or None)

        async def go() -> ListResult[Sequence[ObjectMeta]]:
            return await self._request("list", f"s3://{base}", lst, RETRY_ATTEMPTS)

        res = self.run(go())
        return [str(p).rstrip("/") for p in res.get("common_prefixes") or []], [_listed(m) for m in res.get("objects") or []]

    def _open_list(self, bucket: str, prefix: str, start_after: str | None) -> ListStream[Sequence[ObjectMeta]]:
        return obstore.list(self.store(bucket), prefix or None, offset=start_after, chunk_size=LIST_PAGE)

    async def _next_page(self, stream: ListStream[Sequence[ObjectMeta]], what: str, attempts: int) -> Sequence[ObjectMeta] | None:
        async def nxt() -> Sequence[ObjectMeta] | None:
            try:
                page = await stream.__anext__()
            except StopAsyncIteration:
                return None  # the stream knew it was done: no request
            requests.record("list")
            return page

        # A failed page cannot be asked again from the same stream: one attempt, the
        # storage's retry re-lists.
        return await self._request(None, what, nxt, 1)


async def _drain() -> None:
    """Cancel every other task of the running loop and wait until each has ended."""
    me = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not me]
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.wait(pending, timeout=4)


def _shutdown_at_exit(engine: ObjectIO) -> None:
    """Close `engine` when the interpreter exits, before it finalizes: an event loop still
    running on its daemon thread, with the client's runtime threads answering into it, made one
    `tlake` process in 12 abort (SIGABRT) after its work was done."""

    atexit.register(engine.close)



def _split(fp: str, allow_bare: bool = False) -> tuple[str, str]:
    bucket, _, key = fp.strip("/").partition("/")
    if not bucket or (not key and not allow_bare):
        raise ValueError(f"not an object path (bucket/key): {fp!r}")
    return bucket, key


def _options_supported(options: StorageOptions) -> bool:
    if set(options) - _KNOWN_OPTIONS:
        return False
    ck = options.get("client_kwargs") or {}
    if set(ck) - _KNOWN_CLIENT_KWARGS:
        return False
    if options.get("use_ssl") is False:
        return False
    return True


def _obstore_config(options: StorageOptions) -> tuple[StorageOptions, StorageOptions]:
    """obstore's S3 config and client options for s3fs-style storage options."""
    ck = options.get("client_kwargs") or {}
    endpoint = options.get("endpoint_url") or ck.get("endpoint_url")
    region = ck.get("region_name") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    config: dict[str, Any] = {"region": region,
                              # S3 honours If-None-Match on CopyObject as on PUT (AWS docs,
                              # conditional writes): one request, refused when the key exists.
                              "copy_if_not_exists": "header:If-None-Match:*"}
    client: dict[str, Any] = {"timeout": "120s", "connect_timeout": "10s", "pool_idle_timeout": "30s"}
    if endpoint:
        config["endpoint"] = str(endpoint)
        config["virtual_hosted_style_request"] = False
        if str(endpoint).startswith("http://"):
            client["allow_http"] = True
    if options.get("anon"):
        config["skip_signature"] = True
    else:
        if options.get("key"):
            config["access_key_id"] = options["key"]
        if options.get("secret"):
            config["secret_access_key"] = options["secret"]
        if options.get("token"):
            config["token"] = options["token"]
    return config, client


def sorted_keys_range(keys: Sequence[str]) -> tuple[str, str | None, str]:
    """For sorted keys of one bucket: (the folder holding all of them, the key to list after,
    the last key): a listing of that range sees every one of them."""
    first, last = keys[0], keys[-1]
    common = os.path.commonprefix([first, last])
    folder = common.rsplit("/", 1)[0] if "/" in common else ""
    # Any string below `first`: listings return keys strictly after it.
    after = first[:-1] if len(first) > len(folder) + 1 else None
    return folder, after, last
