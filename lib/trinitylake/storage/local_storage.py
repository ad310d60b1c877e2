"""Files on the local filesystem, through plain ``os`` calls.

The sandbox's system calls are slow and fsspec adds more of them, so every operation is the
fewest calls that do it: a read is one ``open``; a commit writes a temporary name and hard-links
it into place (``link`` fails when the target exists, like ``O_EXCL``, and readers never see a
partial file); a listing is one ``scandir`` per directory.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import os
import re
import stat
import uuid
from collections.abc import Callable, Iterator
from typing import BinaryIO

from trinitylake.storage.backend import FileInfo, HoldsOurs, Retrying, StorageBackend
from trinitylake.storage.uri import is_plain_relative

# Temporary names of in-flight local writes: ``<target>.tmp-<32 hex>``. Listings skip them.
_TMP_RE = re.compile(r"\.tmp-[0-9a-f]{32}$")


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
        with open(fp, "rb") as f:
            return f.read()

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
