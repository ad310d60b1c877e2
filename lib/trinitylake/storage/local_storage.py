"""Files on the local filesystem, through plain ``os`` calls.

The sandbox's system calls are slow and fsspec adds more of them, so every operation is the
fewest calls that do it: a read is one ``open`` into a reusable per-thread buffer; a commit
writes a temporary name and hard-links it into place (``link`` fails when the target exists,
like ``O_EXCL``, and readers never see a partial file); a listing is one ``scandir`` per
directory. Batches (`read_many`, `sizes_many`) open and ``stat`` relative to one descriptor of
the root folder: one path component to resolve per file instead of the whole path.

This module is the one place that reads local files fast: `Storage` batches, its lean view
`trinitylake.storage.local_files.LocalFiles` and the walk's node reads all come here.
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
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from trinitylake.storage.backend import FileInfo, HoldsOurs, Retrying, StorageBackend
from trinitylake.storage.uri import is_plain_relative

# Temporary names of in-flight local writes: ``<target>.tmp-<32 hex>``. Listings skip them.
_TMP_RE = re.compile(r"\.tmp-[0-9a-f]{32}$")


#: Reusable read buffer per thread: most lakehouse files (nodes, definitions) are a few KiB, and
#: a fresh buffer per file costs an ``mmap``/``munmap`` and page faults, more than the read.
READ_BUFFER = 1 << 16
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_tls = threading.local()
#: Keys a sizing thread stats per task: large, because a ``stat`` of a cached inode takes a few
#: microseconds and a thread hand-over per key costs more than that (8 threads handing over
#: every 64 keys sized 200k definitions in 9.3 s here, 2 threads over chunks of 4096 in 0.5 s).
SIZE_CHUNK = 2048
#: Threads for local ``stat``s: enough to overlap cold inode-table reads (100k cold stats took
#: 1.5 s on one thread and 1.0 s on four here), few enough to keep the GIL from convoying.
LOCAL_SIZE_THREADS = 4


def _buffer() -> memoryview:
    mv = getattr(_tls, "buf", None)
    if mv is None:
        mv = _tls.buf = memoryview(bytearray(READ_BUFFER))
    return mv


def read_fd(fd: int) -> bytes:
    """The whole content of the open file `fd`: one ``readv`` into the thread's buffer for a
    small file (a short read of a regular file is its end), more reads for a bigger one."""
    buf = _buffer()
    n = os.readv(fd, [buf])
    if n < len(buf):
        return bytes(buf[:n])
    parts = [bytes(buf)]
    while b := os.read(fd, 1 << 20):
        parts.append(b)
    return b"".join(parts)


def read_file(fp: str, dir_fd: int | None = None) -> bytes:
    """The content of the file `fp` (relative to `dir_fd` when given): ``open, readv, close``."""
    fd = os.open(fp, os.O_RDONLY | _CLOEXEC, dir_fd=dir_fd)
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def _open_dir(fp: str) -> int | None:
    try:
        return os.open(fp, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except OSError:
        return None


def _is_below(path: str) -> bool:
    """A key the root's descriptor reaches: relative, no scheme."""
    return ":" not in path and not path.startswith("/")


def tmp_name(fp: str) -> str:
    return f"{fp}.tmp-{uuid.uuid4().hex}"


def is_tmp(name: str) -> bool:
    """Whether `name` is the temporary name of a local write in flight."""
    return bool(_TMP_RE.search(name))


class LocalBackend(StorageBackend, schemes=("file",)):
    """A root on the local filesystem (``file://``)."""

    on_local_disk = True

    def fs_path(self, path: str, root: str) -> str:
        if is_plain_relative(path):
            # Every key the format writes: a join (parse_uri costs more than a small file's I/O).
            base = self.parsed.fs_path
            return f"{base}{path}" if base.endswith("/") else f"{base}/{path}"
        return super().fs_path(path, root)

    def read(self, fp: str) -> bytes:
        return read_file(fp)

    def read_many(self, paths: Sequence[str], max_bytes: int | None = None) -> builtins.list[bytes | None]:
        """The bytes of each path below the root, opened relative to one descriptor of the root
        (no storage call per file); None for a path to ask again one by one (a URI, an error:
        the storage then gives its typed error and its retries). With `max_bytes`, only the
        first paths, up to the one whose bytes reach it."""
        dfd = _open_dir(self.parsed.fs_path)
        if dfd is None:
            return [None] * len(paths)
        out: builtins.list[bytes | None] = []
        total, limit = 0, (1 << 62) if max_bytes is None else max_bytes
        read = read_file  # the loop's name, looked up once
        try:
            for p in paths:
                data = None
                if _is_below(p):
                    try:
                        data = read(p, dfd)
                        total += len(data)
                    except OSError:
                        pass
                out.append(data)
                if total >= limit:
                    break
        finally:
            os.close(dfd)
        return out

    def sizes_many(self, paths: Sequence[str], pool: ThreadPoolExecutor | None = None
                   ) -> builtins.list[int | None]:
        """Size of each path below the root by ``stat`` relative to a descriptor of the root,
        in large chunks over a few threads (in path order, so that a chunk's files share
        folders and inode-table blocks); -1 for a missing file, None to ask again."""
        out: builtins.list[int | None] = [None] * len(paths)
        dfd = _open_dir(self.parsed.fs_path)
        if dfd is None:
            return out

        def part(idx: Sequence[int]) -> builtins.list[int | None]:
            got: builtins.list[int | None] = []
            for i in idx:
                p = paths[i]
                if not _is_below(p):
                    got.append(None)
                    continue
                try:
                    got.append(os.stat(p, dir_fd=dfd).st_size)
                except FileNotFoundError:
                    got.append(-1)
                except OSError:
                    got.append(None)
            return got

        try:
            if len(paths) <= SIZE_CHUNK:
                return part(range(len(paths)))
            order = sorted(range(len(paths)), key=paths.__getitem__)
            parts = [order[i:i + SIZE_CHUNK] for i in range(0, len(order), SIZE_CHUNK)]
            with ThreadPoolExecutor(max_workers=min(LOCAL_SIZE_THREADS, len(parts))) as threads:
                for idx, got in zip(parts, threads.map(part, parts), strict=True):
                    for i, s in zip(idx, got, strict=True):
                        out[i] = s
            return out
        finally:
            os.close(dfd)

    def list_columns(self, base: str, prefix: str, retrying: Retrying
                     ) -> tuple[builtins.list[str], builtins.list[int], builtins.list[float]]:
        """Every file under the folder `base` as columns (keys ``prefix/...``, sizes, mtimes):
        one ``scandir`` per folder, the whole tree as one retried operation."""
        return retrying(prefix, functools.partial(_scan_tree, base, prefix))

    def exists(self, fp: str) -> bool:
        return os.path.isfile(fp)

    def stat(self, fp: str) -> tuple[int, float] | None:
        try:
            st = os.stat(fp)
        except FileNotFoundError:
            return None
        return (st.st_size, st.st_mtime) if stat.S_ISREG(st.st_mode) else None

    def write(self, fp: str, data: bytes | bytearray) -> None:
        tmp = tmp_name(fp)
        try:
            with _open_creating_dirs(tmp) as f:
                f.write(data)
            os.replace(tmp, fp)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def create_exclusive(self, fp: str, data: bytes | bytearray, uri: str, holds_ours: HoldsOurs) -> str | None:
        tmp = tmp_name(fp)
        try:
            with _open_creating_dirs(tmp) as f:
                f.write(data)
            try:
                os.link(tmp, fp)
                return None
            except FileExistsError:
                raise FileExistsError(f"already exists: {uri}") from None
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV):
                    raise
            # No hard links here (some FUSE/SMB/overlay mounts): plain O_EXCL create.
            try:
                f = open(fp, "xb")  # closed by the `with` below; removed if the write fails
            except FileExistsError:
                raise FileExistsError(f"already exists: {uri}") from None
            try:
                with f:
                    f.write(data)
            except BaseException:
                _unlink_quietly(fp)
                raise
            return None
        finally:
            _unlink_quietly(tmp)

    def delete(self, resolved: builtins.list[tuple[str, str]], uri_of: Callable[[str], str]
               ) -> builtins.list[tuple[str, str]]:
        """``unlink`` relative to each open folder (one path component to resolve per file, not
        the whole path: most of an unlink's cost on sandboxed filesystems)."""
        if os.unlink not in os.supports_dir_fd:
            return _unlink_each(resolved)
        failures: builtins.list[tuple[str, str]] = []
        by_dir: dict[str, builtins.list[tuple[str, str]]] = {}
        for p, fp in resolved:
            d, _, name = fp.rpartition("/")
            by_dir.setdefault(d or "/", []).append((p, name))
        for d, items in by_dir.items():
            try:
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                continue  # the folder is gone, so are its files
            except OSError as e:
                failures.extend((p, str(e)) for p, _ in items)
                continue
            try:
                for p, name in items:
                    try:
                        os.unlink(name, dir_fd=fd)
                    except FileNotFoundError:
                        pass
                    except OSError as e:
                        failures.append((p, str(e)))
            finally:
                os.close(fd)
        return failures

    def list_files(self, base: str, root_fp: str, recursive: bool,
                   retrying: Retrying
                   ) -> Iterator[FileInfo]:
        # Lazy across directories (a lakehouse may hold millions of files), each directory
        # read whole and retried on its own.
        stack = [base]
        while stack:
            d = stack.pop()
            subdirs, files = retrying(os.path.relpath(d, root_fp), functools.partial(_scan_once, d, root_fp))
            if recursive:
                stack.extend(subdirs)
            yield from files

    def names_after(self, base: str, after: str) -> builtins.list[str]:
        # Names only: no stat and no path per entry (a Delta log holds thousands).
        try:
            with os.scandir(base) as it:
                return sorted(e.name for e in it
                              if e.name > after and not is_tmp(e.name) and e.is_file(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list_dirs(self, base: str, prefix: str) -> tuple[builtins.list[str], builtins.list[FileInfo]]:
        dirs: builtins.list[str] = []
        files: builtins.list[FileInfo] = []
        pre = (prefix.rstrip("/") + "/") if prefix else ""
        try:
            with os.scandir(base) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        dirs.append(pre + e.name)
                    elif e.is_file(follow_symlinks=False) and not is_tmp(e.name):
                        st = e.stat()
                        files.append(FileInfo(pre + e.name, st.st_size, st.st_mtime))
        except (FileNotFoundError, NotADirectoryError):
            pass
        return sorted(dirs), sorted(files, key=lambda f: f.path)


def _scan_once(d: str, root_fp: str) -> tuple[builtins.list[str], builtins.list[FileInfo]]:
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
            elif e.is_file(follow_symlinks=False) and not is_tmp(e.name):
                try:
                    st = e.stat()
                except FileNotFoundError:  # deleted since the directory was read
                    continue
                files.append(FileInfo(os.path.relpath(e.path, root_fp), st.st_size, st.st_mtime))
    return subdirs, files


def _scan_tree(top: str, prefix: str) -> tuple[builtins.list[str], builtins.list[int], builtins.list[float]]:
    paths: builtins.list[str] = []
    sizes: builtins.list[int] = []
    mtimes: builtins.list[float] = []
    stack = [(top, prefix.rstrip("/"))]
    while stack:
        d, rel = stack.pop()
        try:
            it = os.scandir(d)
        except (FileNotFoundError, NotADirectoryError):
            continue
        with it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append((e.path, f"{rel}/{e.name}" if rel else e.name))
                elif e.is_file(follow_symlinks=False) and not is_tmp(e.name):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except FileNotFoundError:  # deleted since the folder was read
                        continue
                    paths.append(f"{rel}/{e.name}" if rel else e.name)
                    sizes.append(st.st_size)
                    mtimes.append(st.st_mtime)
    return paths, sizes, mtimes


def _unlink_each(resolved: builtins.list[tuple[str, str]]) -> builtins.list[tuple[str, str]]:
    failures: builtins.list[tuple[str, str]] = []
    for p, fp in resolved:
        try:
            os.unlink(fp)
        except FileNotFoundError:
            pass
        except OSError as e:
            failures.append((p, str(e)))
    return failures


def _open_creating_dirs(path: str) -> BinaryIO:
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
