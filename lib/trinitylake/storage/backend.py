"""What one kind of store does in one attempt of each storage operation, and what kind of
store it is. `trinitylake.storage.storage.Storage` holds one backend and wraps its calls in
retries, the attempt seam, typed errors and batches; callers never see a backend.

A backend works on filesystem paths (``fp``: ``/abs/path`` on disk, ``bucket/key`` on S3) and
is picklable: Spark executors receive it inside a `Storage`."""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

from trinitylake.errors import StorageError
from trinitylake.storage.filesystem import HeadInfo, filesystem
from trinitylake.storage.options import StorageOptions
from trinitylake.storage.uri import ParsedURI, is_absolute, join_uri, parse_uri

if TYPE_CHECKING:
    import fsspec

    from trinitylake.storage.object_io import ObjectIO

_R = TypeVar("_R")

class Retrying(Protocol):
    """``fn()``, one listing call under `where`, with the storage's retries and attempt seam."""

    def __call__(self, where: str, fn: Callable[[], _R]) -> _R: ...


#: Whether the bytes now at a path are the ones a commit wrote, given a function reading them
#: (`Storage.holds`): a retried create that finds its own bytes succeeded.
HoldsOurs = Callable[[Callable[[], bytes]], bool]


def one_result(results: builtins.list[_R | BaseException]) -> _R:
    """The one result of a one-item engine batch, raising its error."""
    r = results[0]
    if isinstance(r, BaseException):
        raise r
    return r


@dataclass(frozen=True)
class FileInfo:
    """One listed file: `path` relative to the storage root, size in bytes, mtime in epoch seconds."""

    path: str
    size: int
    mtime: float


class StorageBackend:
    """One kind of store under one root. Subclasses register the URI schemes they serve."""

    _by_scheme: ClassVar[dict[str, type[StorageBackend]]] = {}
    _fallback: ClassVar[type[StorageBackend] | None] = None

    def __init_subclass__(cls, *, schemes: tuple[str, ...] = (), fallback: bool = False, **kw: object) -> None:
        super().__init_subclass__(**kw)
        for s in schemes:
            StorageBackend._by_scheme[s] = cls
        if fallback:
            StorageBackend._fallback = cls

    @staticmethod
    def for_root(parsed: ParsedURI, options: StorageOptions) -> StorageBackend:
        """The backend serving `parsed`'s scheme (fsspec's filesystem for any scheme without
        a backend of its own)."""
        cls = StorageBackend._by_scheme.get(parsed.scheme) or StorageBackend._fallback
        if cls is None:
            raise LookupError(f"no storage backend for {parsed.scheme}:// (import trinitylake.storage)")
        return cls(parsed, options)

    def __init__(self, parsed: ParsedURI, options: StorageOptions):
        self.parsed = parsed
        self.scheme = parsed.scheme
        self.options = options
        self._fs: fsspec.AbstractFileSystem | None = None
        self._fs_pid: int | None = None

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_fs"] = None
        state["_fs_pid"] = None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The fsspec filesystem: shared per process by storages with equal options, never across fork."""
        fs = self._fs
        pid = os.getpid()
        if fs is not None and self._fs_pid == pid:
            return fs
        self._fs, self._fs_pid = filesystem(self.scheme, self.options), pid
        return self._fs

    # ---- what kind of store -------------------------------------------------------------
    #: The files are on the local filesystem: plain system calls reach them, and threads only
    #: add overhead (there is no round trip to hide).
    on_local_disk: ClassVar[bool] = False
    #: One HEAD gives a file's size and an ETag that, for a single-part upload, is the MD5 of
    #: its bytes (S3): a copy can be verified without reading it back.
    head_gives_md5: ClassVar[bool] = False

    @property
    def engine(self) -> ObjectIO | None:
        """The asynchronous object-store engine serving this store's requests, or None."""
        return None

    def fs_path(self, path: str, root: str) -> str:
        """The filesystem path of `path`: relative to the root (`root` is its URI), or an
        absolute URI on this store (a StorageError names one on another store)."""
        if is_absolute(path):
            p = parse_uri(path)
            if p.scheme != self.scheme:
                raise StorageError(f"{path!r} is on {p.scheme}://, this storage is {root}")
            return p.fs_path
        return parse_uri(join_uri(root, path)).fs_path

    # ---- one attempt of each operation ---------------------------------------------------
    def read(self, fp: str) -> bytes:
        raise NotImplementedError

    def exists(self, fp: str) -> bool:
        raise NotImplementedError

    def stat(self, fp: str) -> tuple[int, float] | None:
        """Size and mtime of the file `fp`, None when missing or a directory."""
        raise NotImplementedError

    def head(self, fp: str) -> HeadInfo | None:
        """``{"size", "mtime", "ETag"}`` from one HEAD (stores where `head_gives_md5`)."""
        raise NotImplementedError(f"{self.scheme}:// has no HEAD with an ETag")

    def write(self, fp: str, data: bytes | bytearray) -> None:
        raise NotImplementedError

    def create_exclusive(self, fp: str, data: bytes | bytearray, uri: str, holds_ours: HoldsOurs) -> str | None:
        """Create `fp` only if absent; the ETag the store answered, or None. FileExistsError
        (naming `uri`) when another writer's file is there."""
        raise NotImplementedError

    def delete(self, resolved: builtins.list[tuple[str, str]], uri_of: Callable[[str], str]
               ) -> builtins.list[tuple[str, str]]:
        """Delete each ``(path, fp)``; missing counts as deleted; ``(path, error)`` per failure."""
        raise NotImplementedError

    def list_files(self, base: str, root_fp: str, recursive: bool,
                   retrying: Retrying
                   ) -> Iterator[FileInfo]:
        """Files under `base`, paths relative to `root_fp`; `retrying(dir, fn)` runs one
        listing call with the storage's retries (a local walk retries each directory)."""
        raise NotImplementedError

    def list_dirs(self, base: str, prefix: str) -> tuple[builtins.list[str], builtins.list[FileInfo]]:
        raise NotImplementedError

    def names_after(self, base: str, after: str) -> builtins.list[str]:
        """Names of the files directly in `base` sorting after `after`, in order (`Storage.names_after`)."""
        return sorted(n for n in (f.path.rsplit("/", 1)[-1] for f in self.list_dirs(base, "")[1]) if n > after)

    # ---- fast paths of batches (None: the storage asks file by file) ----------------------
    def read_many(self, paths: Sequence[str], max_bytes: int | None = None) -> builtins.list[bytes | None]:
        """The bytes of each path (relative to the root) this backend reads in one go, None
        for each the storage reads one by one (with its typed errors and retries); with
        `max_bytes` it may stop after the path whose bytes reach it (a shorter list)."""
        return [None] * len(paths)

    def sizes_many(self, paths: Sequence[str], pool: ThreadPoolExecutor | None = None
                   ) -> builtins.list[int | None]:
        """Size of each path (relative to the root) in one go, -1 when missing, None for each
        the storage asks one by one."""
        return [None] * len(paths)

    def list_columns(self, base: str, prefix: str, retrying: Retrying
                     ) -> tuple[builtins.list[str], builtins.list[int], builtins.list[float]] | None:
        """Every file under `base` as columns (keys under `prefix`, sizes, mtimes), or None:
        the storage lists through `list_files`."""
        return None
