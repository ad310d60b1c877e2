"""Parsed Iceberg table metadata, kept by metadata file location.

A table's metadata file is written once (``create(overwrite=False)``) and never changed, so the
metadata parsed from a location stays that location's for as long as the file exists: a catalog
that reads a table's current location from the lakehouse (always fresh) takes the parsed metadata
from here instead of reading and parsing the file again. A hit still checks that the file
exists (one stat on local disk, one HEAD on an object store), so a deleted metadata file is
reported as missing exactly as without the cache. `TableMetadata` is an immutable model: the
same object is shared by every reader.

A writer that only builds on the metadata (the catalog server's group commit: the next
metadata file names the current one in its log, and nothing reads it) skips that check inside
`trusting()`: on an object store it is a HEAD per table per commit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from pyiceberg.io import FileIO
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata

#: How many locations are kept (least recently used first out).
MAX_ENTRIES = 1024

_lock = threading.Lock()
_cache: OrderedDict[str, TableMetadata] = OrderedDict()
_trust = threading.local()


@contextmanager
def trusting() -> Iterator[None]:
    """In this thread, a cache hit is returned without checking that its file exists."""
    before = getattr(_trust, "on", False)
    _trust.on = True
    try:
        yield
    finally:
        _trust.on = before


def read_table_metadata(io: FileIO, location: str) -> TableMetadata:
    """The metadata in the file at `location` (FileNotFoundError when it does not exist)."""
    with _lock:
        hit = _cache.get(location)
        if hit is not None:
            _cache.move_to_end(location)
    if hit is not None and getattr(_trust, "on", False):
        return hit
    inp = io.new_input(location)
    if hit is not None:
        if not inp.exists():
            forget(location)
            raise FileNotFoundError(location)
        return hit
    metadata = FromInputFile.table_metadata(inp)
    with _lock:
        _cache[location] = metadata
        while len(_cache) > MAX_ENTRIES:
            _cache.popitem(last=False)
    return metadata


def remember(location: str, metadata: TableMetadata) -> None:
    """Keep `metadata`, just written to `location` by this process, as that location's (so the
    next commit or load of the table does not read it back)."""
    with _lock:
        _cache[location] = metadata
        _cache.move_to_end(location)
        while len(_cache) > MAX_ENTRIES:
            _cache.popitem(last=False)


def forget(location: str) -> None:
    """Drop `location` from the cache (its file was deleted)."""
    with _lock:
        _cache.pop(location, None)
