"""Ask a local filesystem to spread a new folder's subfolders apart (``chattr +T``).

Why an export needs it. Our files sit under hash-prefix folders: unrelated by design. ext2/3/4
otherwise places each new folder, and the files in it, in its parent's block group. On ext4
without a journal (common for VM and container root disks, including the machines our checks
run on) a new inode also skips every inode of its group deleted in the last 60 s (360 s while
the inode table is not yet written back), scanning them again for every file it creates: after
a mass delete near the target (an earlier export removed, a ``cp -r`` copy cleaned up, an
orphan purge), creating 21k files cost 20 s of kernel time here against 1.3-3 s with the target
marked, and ``cp -r`` into the same place took as long as our export. The mark
(``FS_TOPDIR_FL``, the Orlov allocator's "top of a hierarchy" hint) makes each subfolder of the
target start in a roomy group of its own; elsewhere it is a no-op.

The hint is best effort: filesystems without the flag (tmpfs, xfs, btrfs, network mounts),
non-Linux systems and refused ioctls leave the folder as it is, and nothing else changes.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import sys

log = logging.getLogger(__name__)

# linux/fs.h, for the architectures whose _IOR/_IOW use the generic encoding (x86, arm, riscv);
# elsewhere the numbers differ and the call fails with ENOTTY, which is the documented no-op.
FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_TOPDIR_FL = 0x00020000


def _flags(fd: int) -> int:

    return int(struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("i", 0)))[0])


def topdir_flag(path: str) -> bool | None:
    """Whether `path` carries the mark (None where the filesystem has no such flags)."""
    if not sys.platform.startswith("linux"):
        return None
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return bool(_flags(fd) & FS_TOPDIR_FL)
    except OSError:
        return None
    finally:
        os.close(fd)


def spread_subdirectories(path: str) -> bool:
    """Create local folder `path` if missing and mark it so its new subfolders are spread apart.

    Returns whether the mark is set. Never raises for a filesystem that refuses it.
    """
    os.makedirs(path, exist_ok=True)
    if not sys.platform.startswith("linux"):
        return False

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = _flags(fd)
        if not flags & FS_TOPDIR_FL:
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags | FS_TOPDIR_FL))
        return True
    except OSError as e:  # ENOTTY/EOPNOTSUPP: no such flags here; EPERM: not ours to mark
        log.debug("left %s unmarked (%s): its subfolders are placed as the filesystem chooses", path, e)
        return False
    finally:
        os.close(fd)
