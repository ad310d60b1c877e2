"""Load-table answers kept by metadata location, with ``ETag`` / ``If-None-Match``.

A table's metadata file never changes once written (`trinitylake.iceberg.metadata_cache`), so
the answer to load-table is a function of the table's current metadata location (and the
``snapshots`` mode asked). The server still reads the latest root on every load (the
lakehouse's hint plus a probe of the next root name, then the tree's nodes, which are
immutable and cached), so another process's commit is seen at the next load; what it keeps
is the rendered answer of each location it served.

The ETag names that location: the Iceberg REST spec lets loadTable answer ``ETag`` and a
request whose ``If-None-Match`` holds it ``304 Not Modified`` with no body, so a client
holding the current metadata skips it.

`LatestTables` keeps, for the latest version this process read, each loaded table's metadata
and location: while no next version's root exists (one ``exists`` of its name: a stat on
local disk, a HEAD on an object store) the latest is still the one read, so a load answers
from it without reading the hint, probing and walking the tree again. A version never changes
once written and the latest is never expired, so the probe is the whole check.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

from pyiceberg.table.metadata import TableMetadata
from starlette.responses import Response

from trinitylake.format.paths import root_name
from trinitylake.storage import Storage
from trinitylake.thread_pools import ForkSafePool

#: How many rendered answers are kept (least recently used first out).
MAX_ENTRIES = 512
#: How many tables `LatestTables` keeps for the latest version (beyond: loads read the tree).
MAX_TABLES = 4096
#: Where `LatestTables.get` checks a kept location beside its probe of the next root.
_BESIDE = ForkSafePool(8, "load-check")


def etag_of(location: str, variant: str = "") -> str:
    """The (strong) ETag of the answer for the metadata at `location` in mode `variant`."""
    return '"' + hashlib.sha256(f"{variant}\0{location}".encode()).hexdigest()[:40] + '"'


def matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header holds `etag` (weak comparison, as RFC 9110 asks for it)."""
    if not if_none_match:
        return False
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or any(t.removeprefix("W/") == etag for t in tags)


class LoadCache:
    """Rendered load-table answers by ETag; `render` makes one from (metadata, location)."""

    def __init__(self, render: Callable[[TableMetadata, str], str], max_entries: int = MAX_ENTRIES):
        self._render = render
        self._max = max_entries
        self._lock = threading.Lock()
        self._answers: OrderedDict[str, str] = OrderedDict()
        self.hits = self.misses = self.not_modified = 0

    def answer(self, metadata: TableMetadata, location: str, if_none_match: str | None = None,
               variant: str = "") -> Response:
        """The load-table response: 304 when `if_none_match` holds the current ETag, else the
        answer (rendered once per location and variant), each with its ``ETag``."""
        etag = etag_of(location, variant)
        if matches(if_none_match, etag):
            self.not_modified += 1
            return Response(status_code=304, headers={"ETag": etag})
        with self._lock:
            text = self._answers.get(etag)
            if text is not None:
                self._answers.move_to_end(etag)
                self.hits += 1
        if text is None:
            text = self._render(metadata, location)
            with self._lock:
                self.misses += 1
                self._answers[etag] = text
                while len(self._answers) > self._max:
                    self._answers.popitem(last=False)
        return Response(text, media_type="application/json", headers={"ETag": etag})


class LatestTables:
    """The tables' (metadata, location) in the latest version this process read, valid while
    no next version exists (see the module doc). Thread-safe."""

    def __init__(self, storage: Storage, max_tables: int = MAX_TABLES):
        self._storage = storage
        self._max = max_tables
        self._lock = threading.Lock()
        self._version: int | None = None
        self._tables: dict[tuple[str, str], tuple[TableMetadata, str]] = {}
        self.hits = self.misses = 0

    def get(self, key: tuple[str, str], beside: Callable[[str], bool] | None = None
            ) -> tuple[TableMetadata, str] | None:
        """`key`'s (metadata, location) in the latest version, when kept and still the latest.

        `beside`: a check of the kept location (that its metadata file exists) made on another
        thread while the next root is probed; the hit counts only when it passes too. On an
        object store the two requests then cost one round trip, not two: at 20 ms a request a
        load answered 20 ms sooner."""
        with self._lock:
            version, hit = self._version, self._tables.get(key)
        if version is None or hit is None:
            self.misses += 1
            return None
        check = _BESIDE.get().submit(beside, hit[1]) if beside is not None else None
        try:
            newer = self._storage.exists(root_name(version + 1))
        finally:
            there = check.result() if check is not None else True
        if newer or not there:
            self.misses += 1
            return None
        self.hits += 1
        return hit

    def put(self, version: int, key: tuple[str, str], metadata: TableMetadata, location: str) -> None:
        """Keep what a load read of `key` in `version` (ignored when a newer version is kept)."""
        with self._lock:
            if self._version != version:
                if self._version is not None and version < self._version:
                    return
                self._version, self._tables = version, {}
            if len(self._tables) < self._max or key in self._tables:
                self._tables[key] = (metadata, location)
