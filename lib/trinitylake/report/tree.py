"""What the report reads from the version trees, apart from the control table: the files
reachable from each walked root (`ReachWalker`, one `Reach` per version) and the Iceberg
tables of the latest version with their snapshot counts (`iceberg_tables`, from each table's
current metadata JSON). Nothing here writes.
"""

from __future__ import annotations

import gzip
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trinitylake.format.definitions import table_format_name
from trinitylake.format.keys import SYS_LAKEHOUSE_DEF
from trinitylake.redact import redact_text
from trinitylake.treewalk.table_pointers import read_table_definitions

if TYPE_CHECKING:
    from trinitylake.format.node import Node
    from trinitylake.lakehouse.lakehouse import Lakehouse
    from trinitylake.lakehouse.view import LakehouseView

log = logging.getLogger(__name__)


@dataclass
class Reach:
    """Files reachable from one version's root: node files (the root included) and
    definition files (the lakehouse definition included)."""

    version: int
    node_files: int
    def_files: int
    node_bytes: int
    def_bytes: int
    new_files: int  # not reachable from the previous walked version
    missing: int  # referenced but not found (or unreadable)

    @property
    def files(self) -> int:
        return self.node_files + self.def_files

    @property
    def bytes(self) -> int:
        return self.node_bytes + self.def_bytes


@dataclass
class IcebergTable:
    """An Iceberg table of the latest version, as its current metadata file describes it."""

    name: str  # namespace.table
    metadata_location: str | None
    snapshots: int | None = None  # len(metadata["snapshots"])
    current_snapshot_id: int | None = None
    total_records: int | None = None  # the current snapshot's summary, when it says
    error: str | None = None  # one line: why the metadata (or the definition) could not be read


#: Tables whose metadata the report reads at most (the first ones in key order); beyond this
#: the page says how many were left out.
MAX_REPORT_TABLES = 1000


def iceberg_tables(lh: Lakehouse, view: LakehouseView, entries: list[tuple[str, str]], threads: int = 8
                   ) -> tuple[list[IcebergTable], int]:
    """The Iceberg tables among `entries` (``(name, definition path)``) with their snapshot
    counts, read from each table's current metadata JSON (its ``snapshots`` and
    ``current-snapshot-id``), and the number of tables of another format. A definition or
    metadata file that cannot be read gives the table a one-line `IcebergTable.error`."""


    defs = read_table_definitions(view, entries, threads)
    wanted: list[IcebergTable] = []
    other = 0
    for name, d, err in defs:
        if d is None:
            wanted.append(IcebergTable(name, None, error=one_line(f"definition: {type(err).__name__}: {err}")))
        elif table_format_name(d) != "ICEBERG":
            other += 1
        else:
            loc = d.format_properties.get("metadata_location") or None
            wanted.append(IcebergTable(name, loc, error=None if loc else "no metadata_location: the table has no metadata yet"))

    def fill(t: IcebergTable) -> None:
        if t.error or t.metadata_location is None:
            return
        try:
            _read_metadata(lh, t)
        except Exception as e:  # noqa: BLE001 - one line on the page, never a failed report
            t.error = one_line(f"{type(e).__name__}: {e}")

    todo = [t for t in wanted if t.metadata_location and not t.error]
    if len(todo) > 1:
        with ThreadPoolExecutor(max_workers=min(threads, len(todo))) as pool:
            list(pool.map(fill, todo))
    else:
        for t in todo:
            fill(t)
    return wanted, other


def _read_metadata(lh: Lakehouse, t: IcebergTable) -> None:

    assert t.metadata_location is not None
    storage, p = lh.resolve(t.metadata_location)
    try:
        raw = storage.read(p)
    except FileNotFoundError:
        raise FileNotFoundError(f"metadata file {t.metadata_location} is missing") from None
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    m = json.loads(raw)
    if not isinstance(m, dict):
        raise ValueError(f"metadata file {t.metadata_location} is not a JSON object")
    snaps = m.get("snapshots") or []
    t.snapshots = len(snaps)
    cur = as_int(m.get("current-snapshot-id"))
    t.current_snapshot_id = None if cur is None or cur < 0 else cur
    for sn in snaps:
        if isinstance(sn, dict) and as_int(sn.get("snapshot-id")) == t.current_snapshot_id:
            t.total_records = as_int((sn.get("summary") or {}).get("total-records"))


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(redact_text(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def as_int(v: object) -> int | None:
    if not isinstance(v, int | float | str) or isinstance(v, bool):
        return None
    try:
        return int(v)
    except ValueError:
        return None


class ReachWalker:
    """Counts files reachable from version roots, reading each node file once.

    Node pointers (children) and definition pointers (key-table values and write-buffer
    values) are memoised per node; a version's walk then only touches nodes it has not
    seen before. Sizes are cached by URI.
    """

    def __init__(self, lh: Lakehouse):
        self.lh = lh
        self.store = lh.node_store(lh.storage)
        # node pointer -> (uri, size or None, child pointers, definition URIs); None = unreadable
        self._nodes: dict[str, tuple[str, int | None, tuple[str, ...], tuple[str, ...]] | None] = {}
        self._sizes: dict[str, int | None] = {}
        self._prev: set[str] = set()
        # On object stores one listing (1000 keys a request) is far cheaper than a HEAD per
        # file: sizes under the lakehouse root are taken from it; the rest use Storage.info.
        self._prefill = lh.storage.remote

    def _uri_size(self, pointer: str) -> tuple[str, int | None]:
        storage, p = self.lh.resolve(pointer, self.lh.storage)
        uri = storage.uri(p)
        if uri not in self._sizes and self._prefill and storage is self.lh.storage:
            self._prefill = False
            try:
                for f in storage.list():
                    self._sizes.setdefault(storage.uri(f.path), f.size)
            except Exception as e:  # noqa: BLE001 - fall back to one info() per file
                log.debug("listing %s failed: %s", storage.root, e)
        if uri not in self._sizes:
            try:
                self._sizes[uri] = storage.info(p).size
            except (FileNotFoundError, OSError):
                self._sizes[uri] = None
            except Exception as e:  # noqa: BLE001 - a broken pointer must not stop the page
                log.debug("size of %s unknown: %s", uri, e)
                self._sizes[uri] = None
        return uri, self._sizes[uri]

    def _defs_of(self, node: Node) -> tuple[str, ...]:
        out = []
        for v in node.values:
            if v:
                out.append(self._uri_size(v)[0])
        for m in node.buffer:
            if m.value:
                out.append(self._uri_size(m.value)[0])
        return tuple(out)

    def _node(self, pointer: str) -> tuple[str, int | None, tuple[str, ...], tuple[str, ...]] | None:
        if pointer in self._nodes:
            return self._nodes[pointer]
        uri, size = self._uri_size(pointer)
        try:
            node = self.store.load(pointer)
        except Exception as e:  # noqa: BLE001 - missing or corrupt node: counted as missing
            log.debug("node %s unreadable: %s", pointer, e)
            self._nodes[pointer] = None
            return None
        info = (uri, size, tuple(node.children), self._defs_of(node))
        self._nodes[pointer] = info
        return info

    def version(self, v: int) -> Reach:
        ref = self.lh.load_root(v)
        nodes: dict[str, int | None] = {}
        defs: set[str] = set()
        missing = 0
        root_uri, root_size = self._uri_size(ref.path)
        nodes[root_uri] = root_size
        def_ptr = ref.node.system.get(SYS_LAKEHOUSE_DEF)
        if def_ptr:
            defs.add(self._uri_size(def_ptr)[0])
        defs.update(self._defs_of(ref.node))
        stack = list(ref.node.children)
        while stack:
            ptr = stack.pop()
            info = self._node(ptr)
            if info is None:
                missing += 1
                continue
            uri, size, children, drefs = info
            if uri in nodes:
                continue
            nodes[uri] = size
            defs.update(drefs)
            stack.extend(children)
        missing += sum(1 for s in nodes.values() if s is None)
        def_sizes = [self._sizes.get(u) for u in defs]
        missing += sum(1 for s in def_sizes if s is None)
        here = set(nodes) | defs
        new = len(here - self._prev) if self._prev else len(here)
        self._prev = here
        return Reach(
            version=v,
            node_files=len(nodes),
            def_files=len(defs),
            node_bytes=sum(s or 0 for s in nodes.values()),
            def_bytes=sum(s or 0 for s in def_sizes),
            new_files=new,
            missing=missing,
        )
