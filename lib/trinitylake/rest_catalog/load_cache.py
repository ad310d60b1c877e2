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
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

from pyiceberg.table.metadata import TableMetadata
from starlette.responses import Response

#: How many rendered answers are kept (least recently used first out).
MAX_ENTRIES = 512


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
