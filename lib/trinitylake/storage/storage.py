"""One storage interface, with the commit primitive `create_exclusive`; a backend per kind
of store behind it (`trinitylake.storage.local_storage`, `trinitylake.storage.object_storage`).

All paths given to a `Storage` are either relative to its root (the stored pointers of the
format) or absolute URIs (pointers rewritten by partial exports). This base class holds what
every store shares (paths, retries, the attempt seam, batches); a backend says how one attempt
of each operation is done on its store, and answers what kind of store it is.

Every operation retries transient errors (connection resets, timeouts, EIO, S3 503 SlowDown and
other 5xx/throttling answers) with jittered exponential backoff, a bounded number of times,
through the one retry helper `trinitylake.storage.retry.call` (tenacity); what still fails, and
every permanent error (403, ENOSPC, ...), is raised as a typed `StorageError` (an OSError with
the original errno). FileNotFoundError and FileExistsError keep their meaning, never retried.
"""

from __future__ import annotations

import builtins
import errno
import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from trinitylake.errors import StorageError, UnknownOutcomeError
from trinitylake.storage import (  # noqa: F401 - importing a backend registers its schemes
    dir_spread,
    local_storage,
    object_storage,
    requests,
    retry,
)
from trinitylake.storage.backend import FileInfo, StorageBackend
from trinitylake.storage.background_sizes import BackgroundSizes
from trinitylake.storage.filesystem import HeadInfo, as_bytes
from trinitylake.storage.object_io import ConditionalConflict, Listed, ObjectIO
from trinitylake.storage.options import StorageOptions, check_storage_options, s3_options_from_env
from trinitylake.storage.retry import (  # noqa: F401 - part of this module's API
    RETRY_ATTEMPTS,
    is_conditional_conflict,
    is_precondition_failed,
    is_transient,
    typed_error,
)
from trinitylake.storage.uri import ParsedURI, is_absolute, is_plain_relative, join_uri, parse_uri

if TYPE_CHECKING:
    import fsspec

_R = TypeVar("_R")
log = logging.getLogger(__name__)


def _result_of(fn: Callable[..., _R], *args: object) -> _R | Exception:
    """``fn(*args)``, or the error it raised (a batch's per-file result)."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - returned per file
        return e


class Storage:
    """Files under one root URI.

    One backend per kind of store does each operation's single attempt
    (`trinitylake.storage.local_storage.LocalBackend`: plain ``os`` calls;
    `trinitylake.storage.object_storage.S3Backend`: the asynchronous engine or s3fs;
    `FsspecBackend`: ``memory://`` and other fsspec filesystems). This class wraps every
    attempt in the one seam, the retries and the typed errors, and answers what kind of store
    it is as capabilities (`on_local_disk`, `path_on_disk`, `engine`, `head_gives_md5`,
    `copies_server_side_from`): callers never test a scheme.

    The object is picklable (the filesystem is rebuilt lazily), so Spark executors receive it
    in closures and reach the same storage through the same code.
    """

    def __init__(self, root: str, options: StorageOptions | None = None):
        self._parsed: ParsedURI = parse_uri(root)
        self.root: str = self._parsed.uri
        self.scheme: str = self._parsed.scheme
        self.options: StorageOptions = dict(options or {})
        if self.scheme == "s3":
            # Checked once here, whoever gave them (a flag, YAML, the environment, an export's
            # target, the catalog's properties, a Python caller): an unknown key or a value of
            # the wrong type is one ConfigError line, never a traceback from the client.
            self.options = s3_options_from_env(check_storage_options(self.options))
        self._backend = StorageBackend.for_root(self._parsed, self.options)
        self._stores: dict[str, Storage] = {}

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_stores"] = {}  # the URI-to-storage cache is per process
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_stores", {})

    def __repr__(self) -> str:
        return f"Storage({self.root!r})"

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The fsspec filesystem: shared per process by storages with equal options, never across fork."""
        return self._backend.fs

    @property
    def engine(self) -> ObjectIO | None:
        """The asynchronous S3 engine (`trinitylake.storage.object_io`) serving this storage's
        requests, or None (not S3, or options only s3fs understands: s3fs serves them)."""
        return self._backend.engine

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
        return self._backend.fs_path(path, self.root)

    # ---- what kind of store -------------------------------------------------------------
    @property
    def on_local_disk(self) -> bool:
        """Whether the files are on the local filesystem (plain system calls reach them, and
        threads only add overhead: there is no round trip to hide)."""
        return self._backend.on_local_disk

    @property
    def head_gives_md5(self) -> bool:
        """Whether one HEAD (`head_s3`) gives a file's size and an ETag that, for a single-part
        upload, is the MD5 of its bytes (S3): a copy can be verified without reading it back."""
        return self._backend.head_gives_md5

    def reaches(self, location: str | ParsedURI) -> bool:
        """Whether this storage addresses the absolute `location` itself (the same kind of
        store: its operations take that URI as a path)."""
        p = location if isinstance(location, ParsedURI) else parse_uri(location)
        return p.scheme == self.scheme

    def for_store_of(self, location: str | ParsedURI) -> Storage:
        """A storage rooted at the top of the store that holds the absolute `location` (its
        bucket; ``file:///`` for local files), sharing these options when the scheme matches.

        The one URI-to-storage cache: one storage per store, kept by this storage (per
        process: a pickled storage starts with none)."""
        p = location if isinstance(location, ParsedURI) else parse_uri(location)
        st = self._stores.get(p.store_uri)
        if st is None:
            st = self._stores[p.store_uri] = self.for_uri(p.store_uri)
        return st

    def storage_of(self, location: str) -> tuple[Storage, str]:
        """The storage that reads `location` and the path to give it: this one for a path
        relative to the root or a URI on this kind of store, else the (cached) storage of
        the store that holds it (`for_store_of`)."""
        if not is_absolute(location):
            return self, location
        p = parse_uri(location)
        if self.reaches(p):
            return self, p.uri
        return self.for_store_of(p), p.uri

    @property
    def remote(self) -> bool:
        """Whether every request is a round trip to a store across the network (an object
        store): requests are worth keeping in flight together, and placement weighs their
        latency. Local files answer in system calls (threads only add overhead)."""
        return not self._backend.on_local_disk

    @property
    def batches_in_flight(self) -> bool:
        """Whether this storage's batch operations (`read_many`, `create_exclusive_many`,
        `head_many`, `copy_many_from`) send their requests in flight together (the I/O engine
        serves the store): a caller with many files gives them as one batch, not a loop."""
        return self.engine is not None

    def spread_new_tree(self) -> bool:
        """Before a new tree of many folders is written under this root: ask the store to
        spread its subfolders apart (a local ext2/3/4 folder: ``chattr +T``, see
        `trinitylake.storage.dir_spread`); True when it did, False where nothing applies."""
        fp = self.path_on_disk("")
        return fp is not None and dir_spread.spread_subdirectories(fp)

    def sizes_in_background(self, start_after: int | None = None) -> BackgroundSizes:
        """Sizes of many files, fed as the caller finds them and taken by a child process
        meanwhile (local files: the ``stat``s run on another core); inactive (`active` False:
        the caller sizes with `sizes`) on any other store."""
        return BackgroundSizes(self, start_after)

    @property
    def reads_on_threads(self) -> bool:
        """Whether reading many files (`read_many`, `sizes`) gains from a thread pool lent by
        the caller: a store with latency whose requests the I/O engine does not batch."""
        return self.remote and self.engine is None

    @property
    def batch_files(self) -> int:
        """Files a batch (`read_many`) holds to keep this store busy: a few times the requests
        the I/O engine keeps in flight where it serves the store, else 64."""
        eng = self.engine
        return max(64, 4 * eng.in_flight.limit()) if eng is not None else 64

    def path_on_disk(self, path: str) -> str | None:
        """The local filesystem path of `path` (relative to the root, or an absolute URI on
        this storage) for the fast paths that use ``os`` calls, or None on any other store."""
        return self._fs_path(path) if self.on_local_disk else None

    def _io(self, op: str, path: str, fn: Callable[..., _R], *args: object) -> _R:
        """One attempt of operation `op` on `path`: ``fn(*args)``. Every attempt of every
        storage operation goes through this one call (the retries around it), nothing else."""
        return fn(*args)

    def attempt(self, op: str, path: str, fn: Callable[..., _R], *args: object) -> _R:
        """One attempt of storage operation `op` on `path`, ``fn(*args)``, through the seam that
        every attempt goes through (fault injection hooks into it); no retry."""
        return self._io(op, path, fn, *args)

    def retrying(self, op: str, path: str, fn: Callable[..., _R], *args: object) -> _R:
        """``fn(*args)`` as storage operation `op` on `path`: each attempt through the attempt
        seam, retried while it fails transiently, failures typed (`StorageError`). For fast
        paths outside this class that make their own system calls (e.g. a local ``scandir``)."""
        out: _R = retry.call(lambda _n: self._io(op, path, fn, *args),
                             fail=lambda e, n: typed_error(op, self._uri_quiet(path), e, n))
        return out

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
            data: bytes = self.retrying("read", path, self._backend.read, fp)
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {self.uri(path)}") from None
        if not self.on_local_disk:
            requests.observe(self.scheme, time.perf_counter() - t0)  # the store's latency (placement)
        return data

    def exists(self, path: str) -> bool:
        """True when `path` is a file. A directory (or an S3 key prefix) is not a file."""
        return self.retrying("exists", path, self._backend.exists, self._fs_path(path))

    def head_s3(self, path: str) -> HeadInfo | None:
        """S3 only: ``{"size", "mtime", "ETag"}`` of `path` from one HEAD, None when missing."""
        if not self.head_gives_md5:
            raise StorageError(f"head_s3 needs an s3:// storage, this one is {self.root}")
        return self.retrying("info", path, self._backend.head, self._fs_path(path))

    def info(self, path: str) -> FileInfo:
        """Size and mtime of a file. Raises FileNotFoundError for a missing file or a directory."""
        st = self.retrying("info", path, self._backend.stat, self._fs_path(path))
        if st is None:
            raise FileNotFoundError(f"no such file: {self.uri(path)}")
        return FileInfo(path, st[0], st[1])

    # ---- writes -----------------------------------------------------------------------
    def write(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Create or overwrite a file (hint files, plans). Atomic replace on local disk."""
        data = as_bytes(data)
        self.retrying("write", path, self._backend.write, self._fs_path(path), data)

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
                etag = self._io("create_exclusive", path, self._backend.create_exclusive, fp, data, self.uri(path),
                                lambda read: self.holds(path, data, read=read))
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

    def write_many(self, files: dict[str, bytes]) -> None:
        """`write` of each ``path: bytes``; on a store with latency (`remote`) several at a time
        on threads (a commit's new node files), local files one after the other."""
        if not self.remote or len(files) < 4:
            for p, data in files.items():
                self.write(p, data)
            return
        with ThreadPoolExecutor(max_workers=min(16, len(files))) as pool:
            list(pool.map(lambda kv: self.write(*kv), files.items()))

    def remove_empty_dirs(self, paths: Iterable[str]) -> None:
        """Remove each folder of `paths` (relative to the root) that is empty, deepest first:
        local filesystems keep a folder after its files are deleted (object stores have no
        folders: nothing to do). A folder that is not empty stays (``rmdir`` refuses it)."""
        if not self._backend.on_local_disk:
            return
        for d in sorted(paths, key=lambda x: x.count("/"), reverse=True):
            try:
                os.rmdir(self._fs_path(d))
            except OSError as e:
                log.debug("could not remove %s: %s", self._uri_quiet(d), e)

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
        # The seam sees ``fn(resolved)``, as fault injection cuts a bulk delete in parts.
        return self.retrying("delete", what, functools.partial(self._backend.delete, uri_of=self.uri), resolved)

    # ---- batches: many files a call ------------------------------------------------------
    # On S3 through the engine (requests in flight by latency, retried per file); elsewhere a
    # loop of the single-file operations. Per file the result or its error, never a raise for
    # one file; the batch itself goes through the attempt seam once (a fault there fails it).
    def read_many(self, paths: Sequence[str], pool: ThreadPoolExecutor | None = None, max_bytes: int | None = None
                  ) -> builtins.list[bytes | BaseException]:
        """The bytes of each path (FileNotFoundError and typed errors per file).

        Local files are opened relative to one descriptor of the root (no storage call per
        file; a failed one is asked again through `read`), and with `max_bytes` only the
        first ones, up to the file whose bytes reach it (a shorter list: a caller bounding
        what it holds); an object store the I/O engine serves gets the requests in flight
        together; any other store reads one by one, on `pool`'s threads when one is lent
        (`reads_on_threads`)."""
        if not paths:
            return []
        eng = self.engine
        if eng is None:
            fast: builtins.list[Any] = self._backend.read_many(paths, max_bytes)
            todo = [i for i, d in enumerate(fast) if d is None]
            if todo:
                def one(i: int) -> bytes | Exception:
                    return _result_of(self.read, paths[i])
                use_pool = pool is not None and len(todo) > 1 and self.reads_on_threads
                got = list(pool.map(one, todo)) if use_pool and pool is not None else [one(i) for i in todo]
                for i, g in zip(todo, got, strict=True):
                    fast[i] = g
            return fast
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

    def sizes(self, paths: Sequence[str], pool: ThreadPoolExecutor | None = None) -> builtins.list[int]:
        """Size in bytes of each path, -1 for a missing one: local files by ``stat`` relative
        to a descriptor of the root in large chunks; through the I/O engine the HEADs in
        flight together; elsewhere one request each (on `pool`'s threads when lent)."""
        if not paths:
            return []
        if self.engine is not None and len(paths) > 1:
            out: builtins.list[int] = []
            for h in self.head_many(paths):
                if isinstance(h, FileNotFoundError):
                    out.append(-1)
                elif isinstance(h, BaseException):
                    raise h
                else:
                    out.append(int(h.size))
            return out
        got = self._backend.sizes_many(paths)
        todo = [i for i, s in enumerate(got) if s is None]
        if todo:
            def one(i: int) -> int:
                try:
                    return self.info(paths[i]).size
                except FileNotFoundError:
                    return -1
            use_pool = pool is not None and len(todo) > 1
            more = list(pool.map(one, todo, chunksize=64)) if use_pool and pool is not None else [one(i) for i in todo]
            for i, s in zip(todo, more, strict=True):
                got[i] = s
        return [int(s) for s in got]  # type: ignore[arg-type]

    def list_columns(self, prefix: str) -> tuple[builtins.list[str], builtins.list[int], builtins.list[float]]:
        """Every file under the folder `prefix` (relative keys, sizes, mtimes) as columns:
        local folders scanned directly (the whole tree one retried operation), any other
        store through `list`."""
        base = self._fs_path(prefix) if prefix else self._parsed.fs_path
        got = self._backend.list_columns(base, prefix, lambda where, fn: self.retrying("list", where or prefix, fn))
        if got is not None:
            return got
        paths: builtins.list[str] = []
        sizes: builtins.list[int] = []
        mtimes: builtins.list[float] = []
        for f in self.list(prefix):
            paths.append(f.path)
            sizes.append(int(f.size))
            mtimes.append(float(f.mtime))
        return paths, sizes, mtimes

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
        yield from self._backend.list_files(base, self._parsed.fs_path, recursive,
                                            lambda where, fn: self.retrying("list", where or prefix, fn))

    def names_after(self, prefix: str, after: str) -> builtins.list[str]:
        """The names of the files directly in the folder `prefix` that sort after the name
        `after`, in order: on an object store one listing from `after` on (S3's StartAfter:
        what a folder holds before it costs nothing), elsewhere the folder's names filtered.

        Why: a Delta log's next versions are listed this way (as Delta's own ``listFrom``); a
        listing of the whole folder grows with every commit the log keeps."""
        base = self._fs_path(prefix) if prefix else self._parsed.fs_path
        return self.retrying("list", prefix, self._backend.names_after, base, after)

    def list_dirs(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[FileInfo]]:
        """Immediate children of `prefix`: (sub-directory paths, files), relative to the root."""
        base = self._fs_path(prefix) if prefix else self._parsed.fs_path
        return self.retrying("list_dirs", prefix, self._backend.list_dirs, base, prefix)


