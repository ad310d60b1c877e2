"""Lean per-file I/O on a local `Storage`, for jobs that touch every file (export copies).

Copying a small file is nothing but system calls, and in our sandboxes they are slow; cp -r is
the yardstick. `LocalFiles` keeps the storage's contract (typed errors, the `_io` seam that
fault injection hooks into, the retry policy, exclusive create that never overwrites) with
as few calls per file as the contract allows:

- **read**: ``open, read, close`` into a reusable per-thread buffer
  (`trinitylake.storage.local_storage.read_file`, the one fast local read).
- **exclusive create**: ``open(dir, O_TMPFILE)``, ``write``, ``linkat`` of the anonymous inode
  to its name, ``close``. The name appears atomically with its full content (``linkat`` fails
  with EEXIST rather than replace anything), a crash leaves no half-written file and no
  temporary name behind, and the directory is changed once instead of three times (create,
  link, unlink of a named temporary). Where ``O_TMPFILE`` or ``/proc`` is missing (some
  network filesystems, containers without /proc) the named temporary + hard link of
  `Storage.create_exclusive` is used instead, and where hard links are refused, the storage
  itself.
- **paths**: joined directly for clean relative keys (`Storage.local_path`).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import uuid
from collections.abc import Iterable
from typing import Any

from trinitylake.errors import StorageError
from trinitylake.storage import retry
from trinitylake.storage.local_storage import READ_BUFFER, read_file
from trinitylake.storage.retry import typed_error
from trinitylake.storage.storage import FileInfo, Storage

__all__ = ["READ_BUFFER", "LocalFiles"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
#: Errors that say "this filesystem has no hard links" rather than "this file failed".
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV}
#: ... or no ``O_TMPFILE`` (kernels before 3.11 read the flag as O_DIRECTORY: EISDIR).
_NO_TMPFILE = _NO_LINKS | {errno.EISDIR, errno.EINVAL}


def _proc_fd() -> int | None:
    """A descriptor of /proc, for ``linkat`` of an ``O_TMPFILE`` inode (None without /proc)."""
    try:
        return os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except OSError:
        return None


_PROC = _proc_fd() if _O_TMPFILE else None


class LocalFiles:
    """A view of a local `Storage` with lean per-file ``read``, ``info``, ``create_exclusive``
    and ``ensure_dirs``; every other attribute is the storage's own."""

    def __init__(self, storage: Storage):
        if storage.scheme != "file":
            raise StorageError(f"LocalFiles needs local storage, not {storage.root}")
        self._st = storage
        self.scheme = storage.scheme
        self.root = storage.root
        self._dirs: set[str] = set()
        self._dirs_lock = threading.Lock()
        # One switch for the view: the first "unsupported" answer moves every later create to
        # the named-temporary path (it would fail the same way for every file).
        self._anonymous = _PROC is not None
        self._tmp_prefix = uuid.uuid4().hex[:16]
        self._counter = iter(range(1 << 62))

    @classmethod
    def of(cls, storage: Storage) -> Storage:
        """`storage` itself unless it is local, else a `LocalFiles` view of it."""
        if not storage.on_local_disk or isinstance(storage, LocalFiles):
            return storage
        return cls(storage)  # type: ignore[return-value]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._st, name)

    def _fp(self, path: str) -> str:
        fp = self._st.path_on_disk(path)
        assert fp is not None, "a LocalFiles view is of a local storage"
        return fp

    # ---- reads ------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        try:
            return self._st.retrying("read", path, read_file, self._fp(path))
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {self._st.uri(path)}") from None

    @staticmethod
    def _stat(fp: str, path: str) -> FileInfo:
        st = os.stat(fp)
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(fp)
        return FileInfo(path, st.st_size, st.st_mtime)

    def info(self, path: str) -> FileInfo:
        try:
            return self._st.retrying("info", path, self._stat, self._fp(path), path)
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {self._st.uri(path)}") from None

    # ---- writes -----------------------------------------------------------------------
    def ensure_dirs(self, paths: Iterable[str]) -> None:
        """Create the parent directories of `paths` this view has not seen yet, top down, one
        ``mkdir`` each (a create into a missing directory would first fail, then retry)."""
        todo = []
        with self._dirs_lock:
            for p in paths:
                d = p.rpartition("/")[0]
                while d and d not in self._dirs:
                    todo.append(d)
                    self._dirs.add(d)
                    d = d.rpartition("/")[0]
        for d in sorted(todo):  # parents sort before their children
            try:
                os.mkdir(self._fp(d))
            except OSError:  # exists, or let the create find out (and report) what is wrong
                pass

    @staticmethod
    def _write_all(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def _open_anonymous(self, fp: str) -> int:
        d = os.path.dirname(fp)
        try:
            return os.open(d, _O_TMPFILE | os.O_WRONLY | _CLOEXEC, 0o644)
        except FileNotFoundError:
            os.makedirs(d, exist_ok=True)
            return os.open(d, _O_TMPFILE | os.O_WRONLY | _CLOEXEC, 0o644)

    def _create_anonymous(self, fp: str, data: bytes, path: str) -> None:
        fd = self._open_anonymous(fp)
        try:
            self._write_all(fd, data)
            try:
                # linkat(AT_SYMLINK_FOLLOW) of /proc/self/fd/N names the anonymous inode.
                os.link(f"self/fd/{fd}", fp, src_dir_fd=_PROC, follow_symlinks=True)
            except FileExistsError:
                raise FileExistsError(f"already exists: {self._st.uri(path)}") from None
        finally:
            os.close(fd)

    def _create_named(self, fp: str, data: bytes, path: str) -> None:
        # Named like the storage's own temporaries (``.tmp-<32 hex>``) so listings skip them.
        tmp = f"{fp}.tmp-{self._tmp_prefix}{next(self._counter):016x}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(fp), exist_ok=True)
            fd = os.open(tmp, flags, 0o644)
        try:
            try:
                self._write_all(fd, data)
            finally:
                os.close(fd)
            try:
                os.link(tmp, fp)
            except FileExistsError:
                raise FileExistsError(f"already exists: {self._st.uri(path)}") from None
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def _create_once(self, fp: str, data: bytes, path: str) -> None:
        if self._anonymous:
            try:
                return self._create_anonymous(fp, data, path)
            except OSError as e:
                if e.errno not in _NO_TMPFILE or isinstance(e, FileExistsError):
                    raise
                self._anonymous = False
        return self._create_named(fp, data, path)

    def create_exclusive(self, path: str, data: bytes) -> None:
        if not data:
            raise ValueError(f"refusing to create empty file {self._st.uri(path)} exclusively")
        fp = self._fp(path)

        def attempt(n: int) -> None:
            try:
                self._st.attempt("create_exclusive", path, self._create_once, fp, data, path)
            except FileExistsError:
                if n > 1 and self._st.holds(path, data):
                    return  # an earlier attempt of ours took effect before it failed
                raise

        def no_links(e: BaseException) -> bool:
            return isinstance(e, OSError) and e.errno in _NO_LINKS and not isinstance(e, FileExistsError)

        try:
            retry.call(attempt, fail=lambda e, n: e if no_links(e) else typed_error(
                "create_exclusive", self._st.uri(path), e, n))
        except OSError as e:
            if not no_links(e):
                raise
            self._st.create_exclusive(path, data)  # no hard links here: the storage's own way
