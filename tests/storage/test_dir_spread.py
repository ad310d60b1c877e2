"""The export's "spread my subfolders" hint (``chattr +T``): set where the filesystem has it,
a silent no-op where it does not, and never a reason for a write to fail."""

from __future__ import annotations

import os
import subprocess

import pytest

from trinitylake.storage import dir_spread


def test_marks_a_new_folder_where_the_filesystem_has_the_flag(tmp_path):
    target = tmp_path / "a" / "b"
    marked = dir_spread.spread_subdirectories(str(target))
    assert target.is_dir()
    # The answer agrees with what the filesystem reports back, wherever this runs.
    assert marked == bool(dir_spread.topdir_flag(str(target)))
    if marked:  # and with the system's own tool, where installed
        try:
            out = subprocess.run(["lsattr", "-d", str(target)], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return
        assert "T" in out.split()[0]


def test_marking_twice_keeps_the_other_flags(tmp_path):
    target = tmp_path / "t"
    if not dir_spread.spread_subdirectories(str(target)):
        pytest.skip(f"{tmp_path} has no inode flags (not ext2/3/4)")  # the no-op case is tested below
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        before = dir_spread._flags(fd)
    finally:
        os.close(fd)
    assert dir_spread.spread_subdirectories(str(target)) is True
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert dir_spread._flags(fd) == before
    finally:
        os.close(fd)


def test_a_refusing_filesystem_leaves_the_folder_as_it_is(tmp_path, monkeypatch):
    import errno
    import fcntl

    def refuse(fd, request, arg=0):
        raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")

    monkeypatch.setattr(fcntl, "ioctl", refuse)  # fault injection: tmpfs, xfs, NFS answer so
    target = tmp_path / "x"
    assert dir_spread.spread_subdirectories(str(target)) is False
    assert target.is_dir() and list(target.iterdir()) == []
    assert dir_spread.topdir_flag(str(target)) is None
