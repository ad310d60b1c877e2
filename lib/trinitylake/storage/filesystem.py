"""The fsspec filesystem behind a `Storage`, and the S3 requests a storage sends itself.

One filesystem per (scheme, options) per process, shared by every storage with those options;
S3's is an s3fs with a lean botocore client (no listings cache, a connection pool as large as
any phase's I/O threads, no per-request checksums or parameter validation). Where s3fs's own
calls cost extra requests or drop errors, a storage sends the request itself through the
filesystem's client: one HEAD (`head_object`), DeleteObjects reading the per-key errors
(`delete_objects`), the conditional PUT retried on 409 (`put_if_absent`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

from trinitylake import lazy
from trinitylake.storage import requests, retry
from trinitylake.storage.options import StorageOptions
from trinitylake.storage.retry import is_conditional_conflict, is_precondition_failed

_FS_LOCK = threading.Lock()
# One filesystem per (scheme, options) per process, shared by every Storage with those options.
# A new s3fs instance builds its own botocore session and client (0.1-1 s here, against ~25 ms
# for a warm request), and Spark unpickles a fresh Storage in every task. Cleared after fork.
_FS_CACHE: dict[str, Any] = {}
_FS_CACHE_PID = [os.getpid()]

#: HTTP connections an S3 client keeps (more than any phase's I/O threads).
MAX_POOL_CONNECTIONS = 64
#: botocore settings that cost client CPU per request for nothing we rely on: CRC32 checksums of
#: every request body and checked on every response (a copy is verified by the ETag of its PUT,
#: the MD5 of what the store received), and client-side parameter validation. Measured on 3,000
#: small PUTs and GETs: 2.55-2.65 ms of CPU per request with botocore's defaults, 1.9-2.3 ms
#: without; on 2 cores the client's CPU is what bounds a copy's requests per second.
_LEAN_CLIENT = {"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required",
                "parameter_validation": False}
_S3_DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys per request
# AWS answers 409 ConditionalRequestConflict while another conditional write to the same key is
# in flight; the request did not take effect and must be retried (it then gets 200 or 412).
_S3_CONFLICT_RETRIES = 6

if TYPE_CHECKING:
    import fsspec
    from botocore.config import Config as BotocoreConfig
    from s3fs import S3FileSystem
else:  # the storage clients load when a storage first needs them, not with every `tlake` command
    fsspec = lazy.module("fsspec", globals(), "fsspec")
    BotocoreConfig = lazy.attr("botocore.config", "Config", globals(), "BotocoreConfig")


#: One entry of an fsspec listing or ``info``: name, size, type and the store's own fields.
ListingEntry = dict[str, Any]


class HeadInfo(TypedDict):
    """What one HEAD of an object answers: its size, modification time (epoch seconds, or the
    datetime botocore parsed) and ETag."""

    size: int
    mtime: float | datetime | None
    ETag: str | None


def filesystem(scheme: str, options: StorageOptions) -> fsspec.AbstractFileSystem:
    """The fsspec filesystem for `scheme` with `options`: shared per process by storages with
    equal options, never across fork."""
    pid = os.getpid()
    with _FS_LOCK:
        if _FS_CACHE_PID[0] != pid:  # a forked child must not reuse the parent's clients
            _FS_CACHE.clear()
            _FS_CACHE_PID[0] = pid
        key = scheme + "|" + json.dumps(options, sort_keys=True, default=repr)
        fs = _FS_CACHE.get(key)
        if fs is None:
            fs = _FS_CACHE[key] = _make_fs(scheme, options)
        return fs


def _make_fs(scheme: str, options: StorageOptions) -> fsspec.AbstractFileSystem:

    if scheme == "file":
        return fsspec.filesystem("file")
    if scheme == "s3":
        opts = dict(options)
        endpoint = opts.pop("endpoint_url", None)
        client_kwargs = dict(opts.pop("client_kwargs", {}) or {})
        if endpoint:
            client_kwargs["endpoint_url"] = endpoint
        # s3fs's listings cache answers exists()/info() from an earlier listing of the
        # parent directory: a file another writer created since then looks missing (and
        # info() even calls it a zero-size directory). Version discovery must see it.
        opts.setdefault("use_listings_cache", False)
        # botocore keeps 10 connections per client by default: 16 I/O threads (or a copy
        # task's) would queue behind them, each waiting a round trip for a free one.
        config_kwargs = dict(opts.pop("config_kwargs", None) or {})
        config_kwargs.setdefault("max_pool_connections", MAX_POOL_CONNECTIONS)
        for k, v in _LEAN_CLIENT.items():
            config_kwargs.setdefault(k, v)
        opts["config_kwargs"] = _known_config(config_kwargs)
        opts.pop("skip_instance_cache", None)  # we cache (see _FS_CACHE), fsspec must not
        fs = fsspec.filesystem("s3", client_kwargs=client_kwargs, skip_instance_cache=True, **opts)
        requests.instrument_s3fs(fs)  # every request counted by kind (job results show them)
        return fs
    return fsspec.filesystem(scheme, **options)


def _known_config(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` without the settings this botocore's ``Config`` does not know (a cluster runtime
    may ship an older one, which refuses unknown keywords)."""
    try:
        known = set(BotocoreConfig.OPTION_DEFAULTS)
    except Exception:  # noqa: BLE001 - this botocore cannot say: pass them on as given
        return kwargs
    return {k: v for k, v in kwargs.items() if k in known or k not in _LEAN_CLIENT}


def as_bytes(data: bytes | bytearray | memoryview) -> bytes | bytearray:
    """bytes or bytearray as given; other buffers (botocore refuses memoryview) copied to bytes."""
    if isinstance(data, bytes | bytearray):
        return data
    if isinstance(data, str):
        raise TypeError(f"file content must be bytes, not str ({len(data)} characters)")
    return bytes(data)


def mtime_of(d: Mapping[str, object]) -> float:
    """Epoch seconds of an fsspec listing entry or info, or of a `head_object` answer; 0.0 if none."""
    for k in ("mtime", "LastModified", "last_modified", "created"):
        v = d.get(k)
        if isinstance(v, datetime):
            return v.timestamp()
        if not isinstance(v, int | float | str):  # absent (None)
            continue
        try:
            return float(v)
        except ValueError:  # not a number
            continue
    return 0.0


def head_object(fs: S3FileSystem, fp: str) -> HeadInfo | None:
    """One HEAD of the object `fp` (bucket/key): its size, mtime and ETag, or None when it
    does not exist. s3fs's ``info`` follows a 404 with a LIST (to call the key a
    directory), a second request for every probe of a missing file (version discovery
    probes one per call)."""
    bucket, _, key = fp.partition("/")
    if not key:
        return None
    try:
        out = fs.call_s3("head_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None
    return {"size": int(out.get("ContentLength") or 0), "mtime": out.get("LastModified"),
            "ETag": out.get("ETag")}


def put_if_absent(fs: S3FileSystem, fp: str, data: bytes | bytearray, on_exists: Callable[[], None]) -> str | None:
    """One PUT of `data` to `fp` with ``If-None-Match: *``, retried while S3 answers 409
    ConditionalRequestConflict; the ETag it answered, or None. When the object exists (412),
    `on_exists` decides: it raises unless the stored bytes are ours."""

    def put(_n: int) -> str | None:
        try:
            out = fs.pipe_file(fp, data, mode="create")
        except FileExistsError:
            on_exists()
            return None
        except OSError as e:  # a 412 without the If-None-Match detail is a generic OSError
            if not is_precondition_failed(e):
                raise
            on_exists()
            return None
        etag = out.get("ETag") if isinstance(out, dict) else None
        return str(etag) if etag else None

    etag: str | None = retry.call(put, retry_on=is_conditional_conflict, attempts=_S3_CONFLICT_RETRIES + 1)
    return etag


def delete_batches(resolved: list[tuple[str, str]], uri: Callable[[str], str]
                   ) -> tuple[list[tuple[str, list[tuple[str, str]]]], list[tuple[str, str]]]:
    """The bulk deletes of `resolved` (each path with its bucket/key): ``(bucket, [(path, key)])``
    of at most 1,000 keys (DeleteObjects' bound), and the failures of paths that name a bucket."""
    failures: list[tuple[str, str]] = []
    by_bucket: dict[str, list[tuple[str, str]]] = {}
    for p, fp in resolved:
        bucket, _, key = fp.partition("/")
        if not key:
            failures.append((p, f"{uri(p)} is a bucket, not a file"))
            continue
        by_bucket.setdefault(bucket, []).append((p, key))
    batches = [(bucket, items[i : i + _S3_DELETE_BATCH])
               for bucket, items in by_bucket.items() for i in range(0, len(items), _S3_DELETE_BATCH)]
    return batches, failures


def delete_objects(fs: S3FileSystem, resolved: list[tuple[str, str]], uri: Callable[[str], str]) -> list[tuple[str, str]]:
    """DeleteObjects per bucket, 1,000 keys a request, reporting the per-key errors.

    `resolved` pairs each path with its bucket/key; `uri` names a path in error messages.
    s3fs's own bulk delete drops the ``Errors`` of the response, so a key S3 refused to
    delete would count as deleted; this reads them. Missing keys are not errors on S3.
    """
    batches, failures = delete_batches(resolved, uri)
    for bucket, chunk in batches:
        by_key: dict[str, list[str]] = {}
        for p, key in chunk:
            by_key.setdefault(key, []).append(p)
        request = {"Objects": [{"Key": k} for k in by_key], "Quiet": True}
        try:
            out = fs.call_s3("delete_objects", Bucket=bucket, Delete=request)
        except Exception as e:  # noqa: BLE001 - the whole request failed
            failures.extend((p, str(e)) for p, _ in chunk)
            continue
        for err in out.get("Errors") or []:
            if err.get("Code") == "NoSuchKey":
                continue
            msg = f"{err.get('Code', 'Error')}: {err.get('Message', '')}".strip()
            failures.extend((p, msg) for p in by_key.get(err.get("Key", ""), []))
        for _, key in chunk:
            fs.invalidate_cache(f"{bucket}/{key}")
    return failures
