"""The live set of table files, at both levels.

A table file is live when any of these reaches it:

* a retained snapshot of the table's current metadata (`table_live`: every snapshot the
  table's latest metadata keeps, its statistics files, the metadata file itself and the
  previous metadata files its log names);
* the metadata file that any retained lakehouse version points at, or the root of a pinned
  export (`VersionLive`): that metadata file, its current snapshot, and the previous metadata
  files its log names. So time travel to every retained version reads each table as it was in
  that version; older snapshots inside that version's metadata are not kept once the table's
  own expiry removed them.

The retained roots are those the lakehouse's own jobs walk (`trinitylake.maintenance.walk_roots`):
every retained version, every pinned version and the root of every pinned export. Table
definitions are read once per definition file (versions share them, copy-on-write), and a
metadata file once per run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trinitylake.format import definitions as D
from trinitylake.lakehouse.view import LakehouseView
from trinitylake.maintenance import walk_roots as WR
from trinitylake.maintenance.table_pointers import read_table_definitions, table_entries
from trinitylake.storage import is_absolute
from trinitylake.tables_maintenance.files import METADATA, TableFileError, TableFiles, current_snapshot, metadata_log

if TYPE_CHECKING:
    from trinitylake.lakehouse import Lakehouse, RootRef

log = logging.getLogger(__name__)

METADATA_LOCATION = "metadata_location"


def retained_roots(lakehouse: Lakehouse, latest: int | None = None) -> list[tuple[str, RootRef]]:
    """``(label, root)`` of every retained version, pinned version and pinned export root."""
    inp = WR.walk_input(lakehouse, latest=latest)
    out: list[tuple[str, RootRef]] = []
    for v in sorted(set(inp.retained_versions) | set(inp.pinned_versions.values())):
        out.append((f"version {v}", lakehouse.load_root(v)))
    for name in sorted(inp.export_roots):
        out.append((f"export {name}", lakehouse.snapshot_root(name)))
    return out


@dataclass
class TableRef:
    """One Iceberg table of one root: its name and current metadata file (canonical URI)."""

    name: str
    metadata: str


class TablePointers:
    """The Iceberg tables each root names, read once per definition file."""

    def __init__(self, lakehouse: Lakehouse, files: TableFiles, io_threads: int = 8):
        self.lakehouse = lakehouse
        self.files = files
        self.io_threads = io_threads
        self._defs: dict[str, str | None] = {}  # definition URI -> metadata URI (None: no Iceberg pointer)

    def tables(self, ref: RootRef) -> list[TableRef]:
        """The Iceberg tables of `ref` that have a metadata location."""
        view = LakehouseView(self.lakehouse, ref)
        entries = table_entries(view)
        keyed = [(name, path, self._def_key(ref, path)) for name, path in entries]
        todo = [(name, path) for name, path, key in keyed if key not in self._defs]
        for (name, path), (_, d, err) in zip(todo, read_table_definitions(view, todo, self.io_threads), strict=True):
            if d is None:
                raise TableFileError(
                    f"table {name} of {ref.base.uri(ref.path)}: its definition {path} cannot be "
                    f"read ({type(err).__name__}: {err}); its metadata pointer is unknown"
                )
            self._defs[self._def_key(ref, path)] = self._pointer(ref, d)
        out = []
        for name, _path, key in keyed:
            loc = self._defs.get(key)
            if loc is not None:
                out.append(TableRef(name, loc))
        return out

    @staticmethod
    def _def_key(ref: RootRef, path: str) -> str:
        return ref.base.uri(path)

    def _pointer(self, ref: RootRef, d: Any) -> str | None:
        if D.table_format_name(d) != "ICEBERG":
            return None
        loc = d.format_properties.get(METADATA_LOCATION)
        if not loc:
            return None
        return self.files.canon(loc) if is_absolute(loc) else ref.base.uri(loc)


@dataclass
class VersionLive:
    """The files the retained lakehouse roots keep (see the module doc)."""

    files: dict[str, str] = field(default_factory=dict)  # URI -> kind
    pointers: dict[str, list[str]] = field(default_factory=dict)  # metadata URI -> labels of roots naming it
    roots: list[str] = field(default_factory=list)


def version_live(
    lakehouse: Lakehouse, files: TableFiles, pointers: TablePointers, latest: int | None = None
) -> VersionLive:
    """Every file the retained lakehouse roots keep: the metadata files they point at, those
    files' current snapshots and their metadata logs.

    Raises:
        TableFileError: a metadata file, manifest list or manifest they need cannot be read.
        UnsafeOperationError: a pinned export whose roots cannot be enumerated.
    """
    out = VersionLive()
    for label, ref in retained_roots(lakehouse, latest):
        out.roots.append(label)
        for t in pointers.tables(ref):
            out.pointers.setdefault(t.metadata, []).append(f"{label} ({t.name})")
    for loc, labels in out.pointers.items():
        files.load_metadata([loc], what=f"table metadata that {labels[0]} points at")
        meta = files.metadata[loc]
        out.files[loc] = METADATA
        for m in metadata_log(meta):
            out.files.setdefault(files.canon(m), METADATA)
        cur = current_snapshot(meta)
        if cur is not None:
            for u, kind in files.reach(meta, [cur]).items():
                out.files.setdefault(u, kind)
    return out


def table_live(
    files: TableFiles,
    location: str,
    meta: dict[str, Any],
    keep: set[int] | None = None,
    extra_metadata: list[str] | None = None,
) -> dict[str, str]:
    """The files a table's metadata `meta` (at `location`) keeps: its snapshots (`keep`, or
    all of them), their statistics, the metadata file, the previous ones its log names, and
    `extra_metadata` (e.g. the log of the metadata an expiry is about to write)."""
    ids = {int(s["snapshot-id"]) for s in meta.get("snapshots") or []} if keep is None else keep
    out = files.reach(meta, ids)
    out[files.canon(location)] = METADATA
    for m in [*metadata_log(meta), *(extra_metadata or [])]:
        out[files.canon(m)] = METADATA
    return out
