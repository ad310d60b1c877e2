"""One storage interface over fsspec, with the commit primitive `create_exclusive`.

All paths given to a `Storage` are either relative to its root (the stored pointers of the
format) or absolute URIs (pointers rewritten by partial exports). Local files use plain `os`
calls (the sandbox's system calls are slow, and fsspec adds more of them); S3 uses s3fs with
``If-None-Match: *``; ``memory://`` is a process-local backend for fast unit tests that honours
exclusivity as strictly as the others.

Every operation retries transient errors (connection resets, timeouts, EIO, S3 503 SlowDown and
other 5xx/throttling answers) with jittered exponential backoff, a bounded number of times,
through the one retry helper `trinitylake.storage.retry.call` (tenacity); what still fails, and
every permanent error (403, ENOSPC, ...), is raised as a typed `StorageError` (an OSError with
the original errno). FileNotFoundError and FileExistsError keep their meaning, never retried.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from trinitylake.errors import StorageError, UnknownOutcomeError
from trinitylake.storage import requests, retry
from trinitylake.storage.filesystem import (
    _S3_CONFLICT_RETRIES,
    as_bytes,
    delete_objects,
    filesystem,
    head_object,
    mtime_of,
    put_if_absent,
)
from trinitylake.storage.object_io import ConditionalConflict, Listed, ObjectIO, sorted_keys_range
from trinitylake.storage.options import s3_options_from_env
from trinitylake.storage.retry import (  # noqa: F401 - part of this module's API
    RETRY_ATTEMPTS,
    is_conditional_conflict,
    is_precondition_failed,
    is_transient,
    typed_error,
)
from trinitylake.storage.uri import ParsedURI, is_absolute, is_plain_relative, join_uri, parse_uri

_MEMORY_LOCK = threading.Lock()
_UNSET: Any = object()  # `Storage.engine` not looked up yet
# Attempts of a conditional PUT while S3 answers 409 ConditionalRequestConflict: the same bound
# through the engine as through s3fs (`filesystem.put_if_absent`).
_S3_CONFLICT_ATTEMPTS = _S3_CONFLICT_RETRIES + 1


def _is_conflict(e: BaseException) -> bool:
    return is_conditional_conflict(e) or isinstance(e, ConditionalConflict)


def _result_of(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or the error it raised (a batch's per-file result)."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - returned per file
        return e


def _one(results: builtins.list[Any]) -> Any:
    """The one result of a one-item engine batch, raising its error."""
    r = results[0]
    if isinstance(r, BaseException):
        raise r
    return r

# Temporary names of in-flight local writes: ``<target>.tmp-<32 hex>``. Listings skip them.
_TMP_RE = re.compile(r"\.tmp-[0-9a-f]{32}$")


def _tmp_name(fp: str) -> str:
    return f"{fp}.tmp-{uuid.uuid4().hex}"


def _is_tmp(name: str) -> bool:
    return bool(_TMP_RE.search(name))


@dataclass(frozen=True)
class FileInfo:
    """One listed file: `path` relative to the storage root, size in bytes, mtime in epoch seconds."""

    path: str
    size: int
    mtime: float


class Storage:
    """Files under one root URI.

    The object is picklable (the filesystem is rebuilt lazily), so Spark executors receive it
    in closures and reach the same storage through the same code.
    """

    def __init__(self, root: str, options: dict[str, Any] | None = None):
        self._parsed: ParsedURI = parse_uri(root)
        self.root: str = self._parsed.uri
        self.scheme: str = self._parsed.scheme
        self.options: dict[str, Any] = dict(options or {})
        if self.scheme == "s3":
            self.options = s3_options_from_env(self.options)
        self._fs: Any = None
        self._fs_pid: int | None = None
        self._engine: Any = _UNSET

    # ---- plumbing -------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fs"] = None
        state["_fs_pid"] = None
        state["_engine"] = _UNSET
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("_fs_pid", None)
        state["_engine"] = _UNSET
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"Storage({self.root!r})"

    @property
    def fs(self) -> Any:
        """The fsspec filesystem: shared per process by storages with equal options, never across fork."""
        fs = self._fs
        pid = os.getpid()
        if fs is not None and self._fs_pid == pid:
            return fs
        self._fs, self._fs_pid = filesystem(self.scheme, self.options), pid
        return self._fs

    @property
    def engine(self) -> ObjectIO | None:
        """The asynchronous S3 engine (`trinitylake.storage.object_io`) serving this storage's
        requests, or None (not S3, or options only s3fs understands: s3fs serves them)."""
        eng = self._engine
        if eng is _UNSET:
            eng = self._engine = ObjectIO.for_options(self.options) if self.scheme == "s3" else None
        return eng

    def copies_server_side_from(self, source: Storage) -> bool:
        """Whether a file of `source` can be copied here by the store itself (S3 CopyObject):
        one endpoint, one set of credentials. (Each copy must also stay in its bucket.)"""
        a, b = self.engine, source.engine
        return a is not None and b is not None and a.identity == b.identity

    def for_uri(self, uri: str) -> Storage:
        """A storage rooted at another URI, sharing these options when the scheme matches."""
        p = parse_uri(uri)
        return Storage(p.uri, self.options if p.scheme == self.scheme else None)

    def uri(self, path: str) -> str:
        """Canonical absolute URI of a relative path or absolute location."""
        if is_plain_relative(path):  # every key the format writes: a join (plans do one per file)
            return f"{self.root}{path}" if self.root.endswith("/") else f"{self.root}/{path}"
        if is_absolute(path):
            return parse_uri(path).uri
        return join_uri(self.root, path)

    def relative(self, uri: str) -> str | None:
        """Path of `uri` relative to this root, or None when it lies outside the root.

        A relative path is already relative to the root: it comes back normalized.
        """
        if is_plain_relative(uri):
            return uri
        if not is_absolute(uri):
            return join_uri("", uri).lstrip("/")
        full = parse_uri(uri).uri
        if full == self.root:
            return ""
        prefix = self.root if self.root.endswith("/") else self.root + "/"
        return full[len(prefix) :] if full.startswith(prefix) else None

    def _fs_path(self, path: str) -> str:
        if self.scheme == "file" and is_plain_relative(path):
            # Every key the format writes: a join (parse_uri costs more than a small file's I/O).
            base = self._parsed.fs_path
            return f"{base}{path}" if base.endswith("/") else f"{base}/{path}"
        if is_absolute(path):
            p = parse_uri(path)
            if p.scheme != self.scheme:
                raise StorageError(f"{path!r} is on {p.scheme}://, this storage is {self.root}")
            return p.fs_path
        return parse_uri(join_uri(self.root, path)).fs_path

    def _local(self) -> bool:
        return self.scheme == "file"

    # ---- what kind of store -------------------------------------------------------------
    @property
    def on_local_disk(self) -> bool:
        """Whether the files are on the local filesystem (plain system calls reach them, and
        threads only add overhead: there is no round trip to hide)."""
        return self.scheme == "file"

    @property
    def is_local(self) -> bool:
        return self.on_local_disk

    @property
    def head_gives_md5(self) -> bool:
        """Whether one HEAD (`head_s3`) gives a file's size and an ETag that, for a single-part
        upload, is the MD5 of its bytes (S3): a copy can be verified without reading it back."""
        return self.scheme == "s3"

    def reaches(self, location: str | ParsedURI) -> bool:
        """Whether this storage addresses the absolute `location` itself (the same kind of
        store: its operations take that URI as a path)."""
        p = location if isinstance(location, ParsedURI) else parse_uri(location)
        return p.scheme == self.scheme

    def for_store_of(self, location: str | ParsedURI) -> Storage:
        """A storage rooted at the top of the store that holds the absolute `location` (its
        bucket; ``file:///`` for local files), sharing these options when the scheme matches."""
        p = location if isinstance(location, ParsedURI) else parse_uri(location)
        return self.for_uri(p.store_uri)

    def path_on_disk(self, path: str) -> str | None:
        """The local filesystem path of `path` (relative to the root, or an absolute URI on
        this storage) for the fast paths that use ``os`` calls, or None on any other store."""
        return self._fs_path(path) if self.on_local_disk else None

    def local_path(self, path: str) -> str | None:
        """The local filesystem path of `path` (relative to the root, or an absolute URI on
        this storage) for the local fast paths (``os`` calls), or None on any other store."""
        return self._fs_path(path) if self.scheme == "file" else None

    def _io(self, op: str, path: str, fn: Any, *args: Any) -> Any:
        """One attempt of operation `op` on `path`: ``fn(*args)``. Every attempt of every
        storage operation goes through this one call (the retries around it), nothing else."""
        return fn(*args)

    def attempt(self, op: str, path: str, fn: Any, *args: Any) -> Any:
        """One attempt of storage operation `op` on `path`, ``fn(*args)``, through the seam that
        every attempt goes through (fault injection hooks into it); no retry."""
        return self._io(op, path, fn, *args)

    def retrying(self, op: str, path: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` as storage operation `op` on `path`: each attempt through the attempt
        seam, retried while it fails transiently, failures typed (`StorageError`). For fast
        paths outside this class that make their own system calls (e.g. a local ``scandir``)."""
        return retry.call(lambda _n: self._io(op, path, fn, *args),
                          fail=lambda e, n: typed_error(op, self._uri_quiet(path), e, n))

    def _uri_quiet(self, path: str) -> str:
        try:
            return self.uri(path)
        except Exception:  # noqa: BLE001 - only for an error message
            return repr(path)

    # ---- reads ------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        """Whole file content. Raises FileNotFoundError naming the URI."""
        fp = self._fs_path(path)
        t0 = time.perf_counter()
        try:
            data: bytes = self.retrying("read", path, self._read_once, fp)
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {self.uri(path)}") from None
        if not self._local():
            requests.observe(self.scheme, time.perf_counter() - t0)  # the store's latency (placement)
        return data

    def _read_once(self, fp: str) -> bytes:
        if self._local():
            with open(fp, "rb") as f:
                return f.read()
        eng = self.engine
        if eng is not None:
            return _one(eng.get_many([fp], attempts=1))
        # max_concurrency=1: else s3fs first sends a HEAD for the size (to split big files into
        # ranged GETs), a second round trip per read of our small files.
        data = self.fs.cat_file(fp, max_concurrency=1)
        requests.record("bytes_read", len(data))
        return data

    def exists(self, path: str) -> bool:
        """True when `path` is a file. A directory (or an S3 key prefix) is not a file."""
        return self.retrying("exists", path, self._exists_once, self._fs_path(path))

    def _exists_once(self, fp: str) -> bool:
        if self._local():
            return os.path.isfile(fp)
        if self.scheme == "s3":
            return self._head(fp) is not None
        try:
            d = self.fs.info(fp)
        except FileNotFoundError:
            return False
        return d.get("type") != "directory"

    def head_s3(self, path: str) -> dict[str, Any] | None:
        """S3 only: ``{"size", "mtime", "ETag"}`` of `path` from one HEAD, None when missing."""
        if self.scheme != "s3":
            raise StorageError(f"head_s3 needs an s3:// storage, this one is {self.root}")
        return self.retrying("info", path, self._head, self._fs_path(path))

    def _head(self, fp: str) -> dict[str, Any] | None:
        """One HEAD of the S3 object `fp` (bucket/key): size, mtime, ETag; None when missing."""
        eng = self.engine
        if eng is None:
            return head_object(self.fs, fp)
        try:
            h = _one(eng.head_many([fp], attempts=1))
        except FileNotFoundError:
            return None
        return {"size": h.size, "mtime": h.mtime, "ETag": h.etag}

    def info(self, path: str) -> FileInfo:
        """Size and mtime of a file. Raises FileNotFoundError for a missing file or a directory."""
        return self.retrying("info", path, self._info_once, self._fs_path(path), path)

    def _info_once(self, fp: str, path: str) -> FileInfo:
        try:
            if self._local():
                st = os.stat(fp)
                if not stat.S_ISREG(st.st_mode):
                    raise FileNotFoundError(fp)
                return FileInfo(path, st.st_size, st.st_mtime)
            if self.scheme == "s3":
                h = self._head(fp)
                if h is None:
                    raise FileNotFoundError(fp)
                return FileInfo(path, h["size"], mtime_of(h))
            d = self.fs.info(fp)
            if d.get("type") == "directory":
                raise FileNotFoundError(fp)
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {self.uri(path)}") from None
        return FileInfo(path, int(d.get("size") or 0), mtime_of(d))

    # ---- writes -----------------------------------------------------------------------
    def write(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Create or overwrite a file (hint files, plans). Atomic replace on local disk."""
        data = as_bytes(data)
        self.retrying("write", path, self._write_once, self._fs_path(path), data)

    def _write_once(self, fp: str, data: bytes | bytearray) -> None:
        if self._local():
            tmp = _tmp_name(fp)
            try:
                with _open_creating_dirs(tmp) as f:
                    f.write(data)
                os.replace(tmp, fp)
            except BaseException:
                _unlink_quietly(tmp)
                raise
            return
        if self.scheme == "memory":
            with _MEMORY_LOCK:
                self.fs.pipe_file(fp, data)
            return
        eng = self.engine
        if eng is not None:
            _one(eng.put_many([(fp, bytes(data))], exclusive=False, attempts=1))
            return
        self.fs.pipe_file(fp, data)

    def create_exclusive(self, path: str, data: bytes | bytearray | memoryview) -> str | None:
        """Create `path` with `data` only if it does not exist: the commit primitive.

        Returns the ETag the store answered the PUT with (S3; for a single-part upload it is the
        MD5 of what it stored, so a copy needs no HEAD to verify), else None.

        Readers never see partial content: locally the bytes go to a temporary name that is
        hard-linked into place (``link`` fails if the target exists, like ``O_EXCL``); on S3 a
        single PUT with ``If-None-Match: *`` (retried while S3 answers 409
        ConditionalRequestConflict). Where the local filesystem cannot hard-link, the file is
        written in place with ``O_EXCL``: still exclusive, but a reader may then see it partial.

        A retry (S3's own after an unseen success: 412; ours after a transient error) that
        finds the file holding exactly our bytes succeeded: every file written this way
        carries a unique transaction id or UUID, so identical bytes are ours.

        Raises:
            FileExistsError: another writer created the file first.
            UnknownOutcomeError: after a retry the file exists but cannot be read back.
            ValueError: `data` is empty. s3fs writes an empty ``xb`` file through ``touch``
                without the condition and would silently overwrite, so no empty file is ever
                a commit marker.
        """
        data = as_bytes(data)
        if not data:
            raise ValueError(f"refusing to create empty file {self.uri(path)} exclusively")
        fp = self._fs_path(path)

        def attempt(n: int) -> str | None:
            try:
                etag = self._io("create_exclusive", path, self._create_exclusive_once, fp, data, path)
                return etag if isinstance(etag, str) else None
            except FileExistsError:
                if n > 1 and self.holds(path, data):
                    return None  # an earlier attempt of ours took effect before it failed
                raise

        out: str | None = retry.call(attempt, fail=lambda e, n: typed_error("create_exclusive", self._uri_quiet(path),
                                                                            e, n))
        return out

    def holds(self, path: str, data: bytes | bytearray, read: Callable[[], bytes] | None = None) -> bool:
        """True when `path` holds exactly `data`, False when other bytes. Unreadable raises
        UnknownOutcomeError: "another writer's" is not safe, a committer frees the files of a
        lost race, and were the file ours, its committed root would reference deleted files."""
        try:
            stored = read() if read is not None else self.read(path)
        except Exception as e:  # noqa: BLE001 - whatever the reason, the outcome is unknown
            raise UnknownOutcomeError(
                f"create of {self._uri_quiet(path)} was retried and the file exists, but it cannot be read back "
                f"to tell whether an earlier attempt created it: {type(e).__name__}: {e}") from e
        return stored == data

    def _create_exclusive_once(self, fp: str, data: bytes | bytearray, path: str) -> str | None:
        if self._local():
            self._create_exclusive_local(fp, data, path)
            return None
        if self.scheme == "memory":
            with _MEMORY_LOCK:
                if self.fs.exists(fp):
                    raise FileExistsError(f"already exists: {self.uri(path)}")
                self.fs.pipe_file(fp, data)
            return None

        eng = self.engine
        if eng is None:
            return put_if_absent(self.fs, fp, data, lambda: self._raise_unless_ours(fp, data, path))
        return self._put_if_absent(eng, fp, data, path)

    def _put_if_absent(self, eng: ObjectIO, fp: str, data: bytes | bytearray, path: str) -> str | None:
        """One PUT with ``If-None-Match: *`` through the engine, retried while S3 answers 409
        ConditionalRequestConflict (another conditional write to the key in flight); a 412 is
        ours when the stored bytes are ours (see `_raise_unless_ours`)."""

        def put(_n: int) -> str | None:
            try:
                return _one(eng.put_many([(fp, bytes(data))], exclusive=True, attempts=1))
            except FileExistsError:
                self._raise_unless_ours(fp, data, path)
                return None

        etag: str | None = retry.call(put, retry_on=_is_conflict, attempts=_S3_CONFLICT_ATTEMPTS)
        return etag

    def _raise_unless_ours(self, fp: str, data: bytes | bytearray, path: str) -> None:
        """A 412 after s3fs/botocore retried a PUT whose first attempt succeeded unseen is our
        own win, not a lost race: the stored bytes are ours (every commit file we write carries
        a unique transaction id or UUID). Anything else is another writer's file."""
        if not self.holds(path, data, read=lambda: self._read_once(fp)):
            raise FileExistsError(f"already exists: {self.uri(path)}")

    def _create_exclusive_local(self, fp: str, data: bytes | bytearray, path: str) -> None:
        tmp = _tmp_name(fp)
        try:
            with _open_creating_dirs(tmp) as f:
                f.write(data)
            try:
                os.link(tmp, fp)
                return
            except FileExistsError:
                raise FileExistsError(f"already exists: {self.uri(path)}") from None
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV):
                    raise
            # No hard links here (some FUSE/SMB/overlay mounts): plain O_EXCL create.
            try:
                f = open(fp, "xb")  # closed by the `with` below; removed if the write fails
            except FileExistsError:
                raise FileExistsError(f"already exists: {self.uri(path)}") from None
            try:
                with f:
                    f.write(data)
            except BaseException:
                _unlink_quietly(fp)
                raise
        finally:
            _unlink_quietly(tmp)

    def delete(self, paths: Iterable[str]) -> list[tuple[str, str]]:
        """Delete files in bulk; missing files count as deleted (idempotent re-runs).

        Returns:
            A list of ``(path, error message)`` for the files that could not be deleted.
        """
        batch = list(paths)
        if not batch:
            return []
        # Resolve every path first: an invalid one raises before anything is deleted.
        resolved = [(p, self._fs_path(p)) for p in batch]
        what = batch[0] if len(batch) == 1 else f"{batch[0]} (and {len(batch) - 1} more)"
        return self.retrying("delete", what, self._delete_once, resolved)

    def _delete_once(self, resolved: list[tuple[str, str]]) -> list[tuple[str, str]]:
        failures: list[tuple[str, str]] = []
        if self._local():
            for p, fp in resolved:
                try:
                    os.unlink(fp)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    failures.append((p, str(e)))
            return failures
        if self.scheme == "s3":
            # DeleteObjects through botocore even with the engine: obstore answers a bulk delete
            # in a missing bucket as done, and does not name the keys S3 refused; a request
            # removes 1,000 keys, so its client CPU does not matter.
            failures.extend(delete_objects(self.fs, resolved, self.uri))
            return failures
        # memory:// and other fsspec filesystems: one by one, because fsspec's bulk rm stops at
        # the first missing file and would leave the rest in place.
        for p, fp in resolved:
            try:
                self.fs.rm_file(fp)
            except FileNotFoundError:
                pass
            except Exception as e:  # noqa: BLE001 - reported per file
                failures.append((p, str(e)))
        return failures

    # ---- batches: many files a call ------------------------------------------------------
    # On S3 through the engine (requests in flight by latency, retried per file); elsewhere a
    # loop of the single-file operations. Per file the result or its error, never a raise for
    # one file; the batch itself goes through the attempt seam once (a fault there fails it).
    def read_many(self, paths: Sequence[str]) -> builtins.list[bytes | BaseException]:
        """The bytes of each path (FileNotFoundError and typed errors per file)."""
        if not paths:
            return []
        eng = self.engine
        if eng is None:
            return [_result_of(self.read, p) for p in paths]
        fps = [self._fs_path(p) for p in paths]
        out = self.retrying("read", paths[0], eng.get_many, fps)
        return [self._typed("read", p, r) for p, r in zip(paths, out, strict=True)]

    def create_exclusive_many(self, items: Sequence[tuple[str, bytes]]) -> builtins.list[str | None | BaseException]:
        """`create_exclusive` of each ``(path, bytes)``: per file the ETag (S3) or None, or its
        error (FileExistsError: another writer's file is there; nothing is overwritten)."""
        if not items:
            return []
        eng = self.engine
        if eng is None:
            return [_result_of(self.create_exclusive, p, d) for p, d in items]
        for p, d in items:
            if not d:
                raise ValueError(f"refusing to create empty file {self.uri(p)} exclusively")
        fps = [(self._fs_path(p), bytes(d)) for p, d in items]
        out = self.retrying("create_exclusive", items[0][0], functools.partial(eng.put_many, exclusive=True), fps)
        res: builtins.list[str | None | BaseException] = []
        for (p, d), r in zip(items, out, strict=True):
            if isinstance(r, FileExistsError | ConditionalConflict):
                # 412: an unseen earlier attempt of ours, or another writer's file; 409: a
                # conditional write in flight. The one-file path tells them apart.
                r = _result_of(self.create_exclusive, p, d)
            res.append(self._typed("create_exclusive", p, r))
        return res

    def exists_many(self, paths: Sequence[str]) -> builtins.list[bool]:
        """`exists` of each path; on S3 their HEADs in flight together (one round trip)."""
        if self.engine is None or len(paths) < 2:
            return [self.exists(p) for p in paths]
        out: builtins.list[bool] = []
        for h in self.head_many(paths):
            if isinstance(h, FileNotFoundError):
                out.append(False)
            elif isinstance(h, BaseException):
                raise h
            else:
                out.append(True)
        return out

    def head_many(self, paths: Sequence[str]) -> builtins.list[Listed | BaseException]:
        """S3: size, mtime and ETag of each path (FileNotFoundError per missing file)."""
        eng = self.engine
        if eng is None:
            raise StorageError(f"head_many needs the S3 engine, this storage is {self.root}")
        out = self.retrying("info", paths[0], eng.head_many, [self._fs_path(p) for p in paths]) if paths else []
        return [self._typed("info", p, r) for p, r in zip(paths, out, strict=True)]

    def copy_many_from(self, source: Storage, pairs: Sequence[tuple[str, str]]) -> builtins.list[None | BaseException]:
        """Server-side copies (`copies_server_side_from`): each ``(source path, path here)`` one
        CopyObject with ``If-None-Match: *``. Per file None, or FileExistsError (the key exists
        here: never overwritten), FileNotFoundError (no source) or its typed error."""
        eng = self.engine
        if eng is None or not self.copies_server_side_from(source):
            raise StorageError(f"{self.root} cannot copy server-side from {source.root}")
        fps = [(source._fs_path(s), self._fs_path(t)) for s, t in pairs]
        out = self.retrying("create_exclusive", pairs[0][1], eng.copy_many, fps) if pairs else []
        return [self._typed("copy", t, r) for (_s, t), r in zip(pairs, out, strict=True)]

    def list_range(self, first: str, last: str) -> Iterator[tuple[str, int, float, str | None]]:
        """S3: the objects from `first` to `last` (paths under this root, in key order) as
        ``(path, size, mtime, ETag)``: one LIST a 1,000 of them, from the folder both lie in."""
        eng = self.engine
        if eng is None:
            raise StorageError(f"list_range needs the S3 engine, this storage is {self.root}")
        a, b = self._fs_path(first), self._fs_path(last)
        bucket = a.partition("/")[0]
        folder, after, stop = sorted_keys_range([a.partition("/")[2], b.partition("/")[2]])
        rf = self._parsed.fs_path.strip("/")
        for o in eng.list_objects(f"{bucket}/{folder}", start_after=after, stop_after=stop):
            name = f"{bucket}/{o.key}"
            if name.startswith(rf + "/"):
                yield name[len(rf) + 1:], o.size, o.mtime, o.etag

    def _typed(self, op: str, path: str, r: Any) -> Any:
        if isinstance(r, FileNotFoundError):
            return FileNotFoundError(errno.ENOENT, f"no such file: {self._uri_quiet(path)}")
        if isinstance(r, FileExistsError):
            return FileExistsError(errno.EEXIST, f"already exists: {self._uri_quiet(path)}")
        if isinstance(r, BaseException):
            return typed_error(op, self._uri_quiet(path), r, RETRY_ATTEMPTS)
        return r

    # ---- listing ----------------------------------------------------------------------
    def list(self, prefix: str = "", recursive: bool = True) -> Iterator[FileInfo]:
        """Files under `prefix` (a directory path relative to the root), paths relative to the root.

        Missing prefixes (and a prefix that names a file) yield nothing. Temporary files of
        in-flight local writes are skipped. The order is unspecified.
        """
        base = self._fs_path(prefix) if prefix else self._parsed.fs_path
        root_fp = self._parsed.fs_path
        if self._local():
            yield from self._list_local(base, root_fp, recursive)
            return
        yield from self.retrying("list", prefix, self._list_remote_once, base, root_fp, recursive)

    def _list_remote_once(self, base: str, root_fp: str, recursive: bool) -> builtins.list[FileInfo]:
        eng = self.engine
        if eng is not None:
            return self._list_engine(eng, base, root_fp, recursive)
        try:
            if recursive:
                found = self.fs.find(base, detail=True)
                items = found.values() if isinstance(found, dict) else found
            else:
                items = self.fs.ls(base, detail=True)
        except FileNotFoundError:
            return []
        out: list[FileInfo] = []
        # fsspec answers a listing of a file path with the file itself; only keep what is
        # strictly below `base` (memory:// names carry a leading slash, s3:// names do not).
        under = base.strip("/") + "/"
        rf = root_fp.strip("/")
        for d in items:
            if d.get("type") == "directory":
                continue
            name = d["name"].strip("/")
            if not name.startswith(under):
                continue
            rel = name[len(rf) + 1 :] if name.startswith(rf + "/") else name
            out.append(FileInfo(rel, int(d.get("size") or 0), mtime_of(d)))
        return out

    def _list_engine(self, eng: ObjectIO, base: str, root_fp: str, recursive: bool) -> builtins.list[FileInfo]:
        bucket = base.strip("/").partition("/")[0]
        rf = root_fp.strip("/")
        try:
            objs: Iterable[Listed] = list(eng.list_dirs(base)[1] if not recursive else eng.list_objects(base))
        except FileNotFoundError:  # no such bucket: nothing under it (as s3fs answers)
            return []
        under = base.strip("/") + "/"
        out: builtins.list[FileInfo] = []
        for o in objs:
            name = f"{bucket}/{o.key}"
            if not name.startswith(under):
                continue
            rel = name[len(rf) + 1:] if name.startswith(rf + "/") else name
            out.append(FileInfo(rel, o.size, o.mtime))
        return out

    def list_dirs(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[FileInfo]]:
        """Immediate children of `prefix`: (sub-directory paths, files), relative to the root."""
        base = self._fs_path(prefix) if prefix else self._parsed.fs_path
        return self.retrying("list_dirs", prefix, self._list_dirs_once, base, prefix)

    def _list_dirs_once(self, base: str, prefix: str) -> tuple[builtins.list[str], builtins.list[FileInfo]]:
        dirs: builtins.list[str] = []
        files: builtins.list[FileInfo] = []
        pre = (prefix.rstrip("/") + "/") if prefix else ""
        if self._local():
            try:
                with os.scandir(base) as it:
                    for e in it:
                        if e.is_dir(follow_symlinks=False):
                            dirs.append(pre + e.name)
                        elif e.is_file(follow_symlinks=False) and not _is_tmp(e.name):
                            st = e.stat()
                            files.append(FileInfo(pre + e.name, st.st_size, st.st_mtime))
            except (FileNotFoundError, NotADirectoryError):
                pass
            return sorted(dirs), sorted(files, key=lambda f: f.path)
        eng = self.engine
        if eng is not None:
            bucket = base.strip("/").partition("/")[0]
            under = base.strip("/") + "/"
            try:
                sub, objs = eng.list_dirs(base)
            except FileNotFoundError:  # no such bucket: nothing under it (as s3fs answers)
                return [], []
            for d in sub:
                full = f"{bucket}/{d}"
                if full.startswith(under):
                    dirs.append(pre + full.rsplit("/", 1)[-1])
            for o in objs:
                full = f"{bucket}/{o.key}"
                if full.startswith(under):
                    files.append(FileInfo(pre + full.rsplit("/", 1)[-1], o.size, o.mtime))
            return sorted(dirs), sorted(files, key=lambda f: f.path)
        try:
            entries = (
                self.fs.ls(base, detail=True, refresh=True) if self.scheme == "s3" else self.fs.ls(base, detail=True)
            )
        except FileNotFoundError:
            return [], []
        under = base.strip("/") + "/"
        for d in entries:
            full = d["name"].strip("/")
            if not full.startswith(under):  # `prefix` named a file: it has no children
                continue
            name = full.rsplit("/", 1)[-1]
            if d.get("type") == "directory":
                dirs.append(pre + name)
            else:
                files.append(FileInfo(pre + name, int(d.get("size") or 0), mtime_of(d)))
        return sorted(dirs), sorted(files, key=lambda f: f.path)

    def _list_local(self, base: str, root_fp: str, recursive: bool) -> Iterator[FileInfo]:
        # Lazy across directories (a lakehouse may hold millions of files), each directory
        # read whole and retried on its own.
        stack = [base]
        while stack:
            d = stack.pop()
            subdirs, files = self.retrying("list", os.path.relpath(d, root_fp), self._scan_local_once, d, root_fp)
            if recursive:
                stack.extend(subdirs)
            yield from files

    @staticmethod
    def _scan_local_once(d: str, root_fp: str) -> tuple[builtins.list[str], builtins.list[FileInfo]]:
        subdirs: builtins.list[str] = []
        files: builtins.list[FileInfo] = []
        try:
            it = os.scandir(d)
        except (FileNotFoundError, NotADirectoryError):
            return subdirs, files
        with it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    subdirs.append(e.path)
                elif e.is_file(follow_symlinks=False) and not _is_tmp(e.name):
                    try:
                        st = e.stat()
                    except FileNotFoundError:  # deleted since the directory was read
                        continue
                    files.append(FileInfo(os.path.relpath(e.path, root_fp), st.st_size, st.st_mtime))
        return subdirs, files


def _open_creating_dirs(path: str) -> Any:
    """``open(path, "xb")``, creating parent directories only when they are missing (each
    mkdir is a slow system call here, and hash-prefix directories mostly exist already)."""
    try:
        return open(path, "xb")
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "xb")


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)

