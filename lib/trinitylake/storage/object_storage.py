"""Files on an object store (S3 through the asynchronous engine, or s3fs for options only it
knows) and on any other fsspec filesystem (``memory://`` for fast unit tests, honouring
exclusivity as strictly as the others)."""

from __future__ import annotations

import builtins
import logging
import threading
from collections.abc import Callable, Iterable, Iterator

from trinitylake.storage import requests, retry
from trinitylake.storage.backend import FileInfo, HoldsOurs, Retrying, StorageBackend, one_result
from trinitylake.storage.filesystem import (
    _S3_CONFLICT_RETRIES,
    HeadInfo,
    ListingEntry,
    delete_batches,
    delete_objects,
    head_object,
    mtime_of,
    put_if_absent,
)
from trinitylake.storage.object_io import ConditionalConflict, Listed, ObjectIO
from trinitylake.storage.options import StorageOptions
from trinitylake.storage.retry import is_conditional_conflict
from trinitylake.storage.uri import ParsedURI

log = logging.getLogger(__name__)

_MEMORY_LOCK = threading.Lock()
_UNSET = object()  # `S3Storage.engine` not looked up yet
# Attempts of a conditional PUT while S3 answers 409 ConditionalRequestConflict: the same bound
# through the engine as through s3fs (`filesystem.put_if_absent`).
_S3_CONFLICT_ATTEMPTS = _S3_CONFLICT_RETRIES + 1


def _is_conflict(e: BaseException) -> bool:
    return is_conditional_conflict(e) or isinstance(e, ConditionalConflict)


class FsspecBackend(StorageBackend, fallback=True):
    """Any fsspec filesystem, one call per operation (schemes we have no backend of our own for;
    s3fs under `S3Backend`): commits are a conditional create (``mode="create"``)."""

    def read(self, fp: str) -> bytes:
        # max_concurrency=1: else s3fs first sends a HEAD for the size (to split big files into
        # ranged GETs), a second round trip per read of our small files.
        data: bytes = self.fs.cat_file(fp, max_concurrency=1)
        requests.record("bytes_read", len(data))
        return data

    def exists(self, fp: str) -> bool:
        try:
            d = self.fs.info(fp)
        except FileNotFoundError:
            return False
        return bool(d.get("type") != "directory")

    def stat(self, fp: str) -> tuple[int, float] | None:
        try:
            d = self.fs.info(fp)
        except FileNotFoundError:
            return None
        if d.get("type") == "directory":
            return None
        return int(d.get("size") or 0), mtime_of(d)

    def write(self, fp: str, data: bytes | bytearray) -> None:
        self.fs.pipe_file(fp, data)

    def create_exclusive(self, fp: str, data: bytes | bytearray, uri: str, holds_ours: HoldsOurs) -> str | None:
        def raise_unless_ours() -> None:
            # A 412 after the client retried a PUT whose first attempt succeeded unseen is our
            # own win, not a lost race: the stored bytes are ours (every commit file we write
            # carries a unique transaction id or UUID). Anything else is another writer's file.
            if not holds_ours(lambda: self.read(fp)):
                raise FileExistsError(f"already exists: {uri}")

        etag: str | None = put_if_absent(self.fs, fp, data, raise_unless_ours)
        return etag

    def delete(self, resolved: builtins.list[tuple[str, str]], uri_of: Callable[[str], str]
               ) -> builtins.list[tuple[str, str]]:
        # One by one: fsspec's bulk rm stops at the first missing file and would leave the rest.
        failures: builtins.list[tuple[str, str]] = []
        for p, fp in resolved:
            try:
                self.fs.rm_file(fp)
            except FileNotFoundError:
                pass
            except Exception as e:  # noqa: BLE001 - reported per file
                failures.append((p, str(e)))
        return failures

    def list_files(self, base: str, root_fp: str, recursive: bool,
                   retrying: Retrying
                   ) -> Iterator[FileInfo]:
        yield from retrying("", lambda: self.list_once(base, root_fp, recursive))

    def list_once(self, base: str, root_fp: str, recursive: bool) -> builtins.list[FileInfo]:
        try:
            if recursive:
                found = self.fs.find(base, detail=True)
                items = found.values() if isinstance(found, dict) else found
            else:
                items = self.fs.ls(base, detail=True)
        except FileNotFoundError:
            return []
        out: builtins.list[FileInfo] = []
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

    def _ls(self, base: str) -> builtins.list[ListingEntry]:
        entries: builtins.list[ListingEntry] = self.fs.ls(base, detail=True)
        return entries

    def list_dirs(self, base: str, prefix: str) -> tuple[builtins.list[str], builtins.list[FileInfo]]:
        dirs: builtins.list[str] = []
        files: builtins.list[FileInfo] = []
        pre = (prefix.rstrip("/") + "/") if prefix else ""
        try:
            entries = self._ls(base)
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


class MemoryBackend(FsspecBackend, schemes=("memory",)):
    """fsspec's process-local ``memory://`` (fast unit tests), exclusive under one lock: its dict
    is not safe under concurrent writers, and it has no conditional create."""

    def write(self, fp: str, data: bytes | bytearray) -> None:
        with _MEMORY_LOCK:
            self.fs.pipe_file(fp, data)

    def create_exclusive(self, fp: str, data: bytes | bytearray, uri: str, holds_ours: HoldsOurs) -> str | None:
        with _MEMORY_LOCK:
            if self.fs.exists(fp):
                raise FileExistsError(f"already exists: {uri}")
            self.fs.pipe_file(fp, data)
        return None


class S3Backend(FsspecBackend, schemes=("s3",)):
    """S3 (and S3-compatible stores): requests through the asynchronous engine when the options
    allow, else s3fs; commits with ``If-None-Match: *``; bulk deletes with DeleteObjects."""

    def __init__(self, parsed: ParsedURI, options: StorageOptions):
        super().__init__(parsed, options)
        self._engine: ObjectIO | None | object = _UNSET

    def __getstate__(self) -> dict[str, object]:
        state = super().__getstate__()
        state["_engine"] = _UNSET
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        state["_engine"] = _UNSET
        super().__setstate__(state)

    @property
    def engine(self) -> ObjectIO | None:
        """The asynchronous S3 engine, or None for options only s3fs understands (s3fs serves them)."""
        eng = self._engine
        if eng is _UNSET:
            eng = self._engine = ObjectIO.for_options(self.options)
        return eng if isinstance(eng, ObjectIO) else None

    head_gives_md5 = True

    def read(self, fp: str) -> bytes:
        eng = self.engine
        if eng is not None:
            data: bytes = one_result(eng.get_many([fp], attempts=1))
            return data
        return super().read(fp)

    def exists(self, fp: str) -> bool:
        return self.head(fp) is not None

    def head(self, fp: str) -> HeadInfo | None:
        """One HEAD of the S3 object `fp` (bucket/key): size, mtime, ETag; None when missing."""
        eng = self.engine
        if eng is None:
            return head_object(self.fs, fp)
        try:
            h = one_result(eng.head_many([fp], attempts=1))
        except FileNotFoundError:
            return None
        return {"size": h.size, "mtime": h.mtime, "ETag": h.etag}

    def stat(self, fp: str) -> tuple[int, float] | None:
        h = self.head(fp)
        return None if h is None else (h["size"], mtime_of(h))

    def write(self, fp: str, data: bytes | bytearray) -> None:
        eng = self.engine
        if eng is not None:
            one_result(eng.put_many([(fp, bytes(data))], exclusive=False, attempts=1))
            return
        self.fs.pipe_file(fp, data)

    def create_exclusive(self, fp: str, data: bytes | bytearray, uri: str, holds_ours: HoldsOurs) -> str | None:
        eng = self.engine
        if eng is None:  # s3fs: `FsspecBackend`'s conditional create
            return super().create_exclusive(fp, data, uri, holds_ours)

        def raise_unless_ours() -> None:  # as `FsspecBackend.create_exclusive` says
            if not holds_ours(lambda: self.read(fp)):
                raise FileExistsError(f"already exists: {uri}")

        return self._put_if_absent(eng, fp, data, raise_unless_ours)

    def _put_if_absent(self, eng: ObjectIO, fp: str, data: bytes | bytearray,
                       raise_unless_ours: Callable[[], None]) -> str | None:
        """One PUT with ``If-None-Match: *`` through the engine, retried while S3 answers 409
        ConditionalRequestConflict (another conditional write to the key in flight); a 412 is
        ours when the stored bytes are ours (see `_raise_unless_ours`)."""

        def put(_n: int) -> str | None:
            try:
                out: str | None = one_result(eng.put_many([(fp, bytes(data))], exclusive=True, attempts=1))
                return out
            except FileExistsError:
                raise_unless_ours()
                return None

        etag: str | None = retry.call(put, retry_on=_is_conflict, attempts=_S3_CONFLICT_ATTEMPTS)
        return etag

    def delete(self, resolved: builtins.list[tuple[str, str]], uri_of: Callable[[str], str]
               ) -> builtins.list[tuple[str, str]]:
        # DeleteObjects through the engine, 1,000 keys a request, in flight together; a request
        # that fails, or whose answer refuses a key, is sent again through botocore, which names
        # every refused key (obstore raises on the first). So a job that deletes never imports
        # botocore on the happy path: its client cost 0.9 s of CPU a run (tables expire-snapshots
        # of 50 tables at 20 ms: a fifth of the run). A missing bucket has nothing to delete.
        eng = self.engine
        if eng is None:
            return list(delete_objects(self.fs, resolved, uri_of))
        batches, failures = delete_batches(resolved, uri_of)
        results = eng.delete_many([(b, list(dict.fromkeys(k for _, k in items))) for b, items in batches])
        for (bucket, items), err in zip(batches, results, strict=True):
            if err is not None:
                log.info("bulk delete of %d keys in %s failed (%s); sent again through botocore", len(items), bucket, err)
                failures.extend(delete_objects(self.fs, [(p, f"{bucket}/{k}") for p, k in items], uri_of))
        return failures

    def list_once(self, base: str, root_fp: str, recursive: bool) -> builtins.list[FileInfo]:
        eng = self.engine
        if eng is None:
            return super().list_once(base, root_fp, recursive)
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

    def _ls(self, base: str) -> builtins.list[ListingEntry]:
        entries: builtins.list[ListingEntry] = self.fs.ls(base, detail=True, refresh=True)
        return entries

    def names_after(self, base: str, after: str) -> builtins.list[str]:
        eng = self.engine
        if eng is None:
            return super().names_after(base, after)
        bucket, _, folder = base.strip("/").partition("/")
        under = folder + "/" if folder else ""
        try:
            objs = list(eng.list_objects(base, start_after=under + after))
        except FileNotFoundError:
            return []
        # The listing is recursive (a sub-folder's keys are dropped here), and the client takes
        # its start as a path (a trailing "/" dropped): filtered again.
        names = (o.key[len(under):] for o in objs if o.key.startswith(under))
        return [n for n in names if "/" not in n and n > after]

    def list_dirs(self, base: str, prefix: str) -> tuple[builtins.list[str], builtins.list[FileInfo]]:
        eng = self.engine
        if eng is None:
            return super().list_dirs(base, prefix)
        dirs: builtins.list[str] = []
        files: builtins.list[FileInfo] = []
        pre = (prefix.rstrip("/") + "/") if prefix else ""
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
