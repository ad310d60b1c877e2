"""The walk's rules: what a row of the reachable-file listing says about its file. Pure: no
I/O, no Spark session, no storage.

A row (`trinitylake.treewalk.walk_rows.OUTPUT_SCHEMA`) holds ``path, kind, size, depth,
first_version``. Two rules read it, and every job that reads a walk (walk, expire, orphans)
applies them from here:

* **present**: the file exists and its size is known when ``size >= 0``; the walk writes
  `UNKNOWN_SIZE` (-1) for a definition file found missing, for a node file not read, and for
  every definition when it was asked not to size them. A file's bytes count only when it is
  present.
* **outside**: a reachable file lies outside the lakehouse root (an export's own file, or a
  reference through another scheme or authority) when its key is an absolute URI, i.e. holds
  ``://``; keys inside the root are relative paths.

Each rule is written once, as data (`PRESENT_MIN_SIZE`, `OUTSIDE_MARK`); the functions below
only apply it to a Python value, an Arrow array or a Spark column (whose operators Spark
overloads, so the column adapters need no session).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import Column

#: The size the walk writes where it does not know a file's size.
UNKNOWN_SIZE = -1
#: The rule "present": a size at least this is a known size of an existing file.
PRESENT_MIN_SIZE = 0
#: The rule "outside": a key holding this is an absolute URI, outside the lakehouse root.
OUTSIDE_MARK = "://"

ArrowArray: TypeAlias = pa.Array | pa.ChunkedArray


# ---- present ------------------------------------------------------------------------------
def present(size: int | None) -> bool:
    """The rule on one Python value (None is not present)."""
    return size is not None and size >= PRESENT_MIN_SIZE


def present_arrow(sizes: ArrowArray) -> ArrowArray:
    """The rule on an Arrow array of sizes: a boolean array (null where the size is null)."""
    return pc.greater_equal(sizes, PRESENT_MIN_SIZE)


def present_column(size: Column) -> Column:
    """The rule on a Spark column of sizes: a boolean column."""
    return size >= PRESENT_MIN_SIZE


def known_bytes(size: int | None) -> int:
    """The bytes a row counts: its size when present, else 0."""
    return int(size) if size is not None and present(size) else 0


def known_bytes_arrow(sizes: ArrowArray) -> ArrowArray:
    """`known_bytes` on an Arrow array of sizes."""
    return pc.if_else(present_arrow(sizes), sizes, pa.scalar(0, sizes.type))


def known_bytes_column(F: ModuleType, size: Column) -> Column:  # noqa: N803 - the session's functions module
    """`known_bytes` on a Spark column: the size when present, else null (which ``sum`` skips)."""
    return F.when(present_column(size), size)


# ---- outside ------------------------------------------------------------------------------
def outside(path: str) -> bool:
    """The rule on one key."""
    return OUTSIDE_MARK in path


def outside_arrow(paths: ArrowArray) -> ArrowArray:
    """The rule on an Arrow array of keys: a boolean array."""
    return pc.match_substring(paths, OUTSIDE_MARK)


def outside_column(path: Column) -> Column:
    """The rule on a Spark column of keys: a boolean column."""
    return path.contains(OUTSIDE_MARK)
