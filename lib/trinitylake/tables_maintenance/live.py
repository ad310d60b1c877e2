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

The retained roots are those the lakehouse's own jobs walk (`trinitylake.treewalk.walk_roots`):
every retained version, every pinned version, the root of every pinned export, and the running
root of every live distributed transaction. Table
definitions are read once per definition file (versions share them, copy-on-write), and a
metadata file once per run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trinitylake.format import definitions, keys, tree
from trinitylake.format.node import deserialize
from trinitylake.format.paths import root_name
from trinitylake.lakehouse.roots import RootRef
from trinitylake.lakehouse.view import LakehouseView
from trinitylake.storage import is_absolute
from trinitylake.tables_maintenance.files import METADATA, TableFileError, TableFiles, current_snapshot, metadata_log
from trinitylake.treewalk import walk_roots
from trinitylake.treewalk.table_pointers import read_table_definitions, view_metadata_files

if TYPE_CHECKING:
    from trinitylake.format.tree import NodeStore
    from trinitylake.lakehouse import Lakehouse

log = logging.getLogger(__name__)

METADATA_LOCATION = "metadata_location"


def retained_roots(lakehouse: Lakehouse, latest: int | None = None) -> list[tuple[str, RootRef]]:
    """``(label, root)`` of every retained version, pinned version and pinned export root; the
    versions' root files read in batches (one round trip a batch on an object store)."""
    inp = walk_roots.walk_input(lakehouse, latest=latest)
    versions = sorted(set(inp.retained_versions) | set(inp.pinned_versions.values()))
    out: list[tuple[str, RootRef]] = []
    for i in range(0, len(versions), ROOT_BATCH):
        chunk = versions[i : i + ROOT_BATCH]
        for v, data in zip(chunk, lakehouse.storage.read_many([root_name(v) for v in chunk]), strict=True):
            if isinstance(data, BaseException):
                raise TableFileError(
                    f"the root of retained version {v} ({lakehouse.storage.uri(root_name(v))}) cannot be read "
                    f"({type(data).__name__}: {data}); the table metadata it points at is unknown"
                ) from data
            node = deserialize(data, None, lakehouse.storage.uri(root_name(v)))
            def_path = node.system.get(keys.SYS_LAKEHOUSE_DEF) or ""
            d = lakehouse.load_def(def_path)
            out.append((f"version {v}", RootRef(v, root_name(v), node, d, def_path, lakehouse.storage)))
    for name in sorted(inp.export_roots):
        out.append((f"export {name}", lakehouse.snapshot_root(name)))
    # The running roots of live distributed transactions: a table commit they staged may still
    # land, and its metadata file's current snapshot must then read (a lease renewed by every
    # stage can outlive any age floor).
    for path in inp.txn_running_roots:
        try:
            data = lakehouse.storage.read(path)
        except FileNotFoundError:
            continue  # the transaction finished meanwhile: its root is a version now, or gone
        node = deserialize(data, None, lakehouse.storage.uri(path))
        def_path = node.system.get(keys.SYS_LAKEHOUSE_DEF) or ""
        begin = next((v for v, p in inp.roots if p == path), 0)
        ref = RootRef(begin, path, node, lakehouse.load_def(def_path), def_path, lakehouse.storage)
        out.append((f"running root {path}", ref))
    return out


#: Root files read per batch.
ROOT_BATCH = 256


@dataclass
class TableRef:
    """One Iceberg table of one root: its name and current metadata file (canonical URI)."""

    name: str
    metadata: str
    #: ``(namespace, table)`` as the lakehouse keys them (a namespace may hold a dot).
    key: tuple[str, ...] = ()


class TablePointers:
    """The Iceberg tables roots name, each definition file read once.

    Versions share subtrees (copy-on-write), so `union` walks each subtree once for all the
    roots it is given: a subtree's items depend only on its node and the buffered messages its
    ancestors push into it, and a pair of both already walked is skipped."""

    def __init__(self, lakehouse: Lakehouse, files: TableFiles, io_threads: int = 8):
        self.lakehouse = lakehouse
        self.files = files
        self.io_threads = io_threads
        self._defs: dict[str, str | None] = {}  # definition URI -> metadata URI (None: no Iceberg pointer)
        self._seen: set[tuple[str, str, tuple[tuple[str, str | None], ...]]] = set()

    def tables(self, ref: RootRef) -> list[TableRef]:
        """The Iceberg tables of `ref` that have a metadata location."""
        view = LakehouseView(self.lakehouse, ref)
        return self._resolve(ref, _tables_of(view, view.all_items()))

    def union(self, ref: RootRef) -> list[TableRef]:
        """The Iceberg tables of `ref` not already returned for an earlier root through the
        same subtrees (see the class doc)."""
        view = LakehouseView(self.lakehouse, ref)
        return self._resolve(ref, _tables_of(view, _new_items(view.store, ref, self._seen)))

    def _resolve(self, ref: RootRef, entries: list[tuple[tuple[str, ...], str]]) -> list[TableRef]:
        view = LakehouseView(self.lakehouse, ref)
        keyed = [(names, path, ref.base.uri(path)) for names, path in entries]
        todo: dict[str, tuple[str, str]] = {}
        for names, path, key in keyed:
            if key not in self._defs:
                todo.setdefault(key, (".".join(names), path))
        items = list(todo.values())
        for (name, path), (_, d, err) in zip(items, read_table_definitions(view, items, self.io_threads), strict=True):
            if d is None:
                raise TableFileError(
                    f"table {name} of {ref.base.uri(ref.path)}: its definition {path} cannot be "
                    f"read ({type(err).__name__}: {err}); its metadata pointer is unknown"
                )
            self._defs[ref.base.uri(path)] = self._pointer(ref, d)
        out = []
        for names, _path, key in keyed:
            loc = self._defs.get(key)
            if loc is not None:
                out.append(TableRef(".".join(names), loc, names))
        return out

    def pointer(self, ref: RootRef, d: definitions.TableDef) -> str | None:
        """The metadata location (canonical URI) of the Iceberg table `d` of `ref`, if any."""
        return self._pointer(ref, d)

    def _pointer(self, ref: RootRef, d: definitions.TableDef) -> str | None:
        if definitions.table_format_name(d) != "ICEBERG":
            return None
        loc = d.format_properties.get(METADATA_LOCATION)
        if not loc:
            return None
        return self.files.canon(loc) if is_absolute(loc) else ref.base.uri(loc)


def _tables_of(view: LakehouseView, items: Iterable[tuple[str, str]]) -> list[tuple[tuple[str, ...], str]]:
    """``(names, definition path)`` of the table keys among `items`."""
    out = []
    for key, path in items:
        try:
            kind, names = view.codec.decode(key)
        except Exception:  # noqa: BLE001 - a key of another kind is no table
            continue
        if kind == "table":
            out.append((tuple(names), path))
    return out


def _new_items(
    store: NodeStore, ref: RootRef, seen: set[tuple[str, str, tuple[tuple[str, str | None], ...]]]
) -> Iterator[tuple[str, str]]:
    """The live ``(key, value)`` pairs of `ref`'s tree (`trinitylake.format.tree.iter_items`),
    skipping every subtree that `seen` says was walked with the same pushed-down messages."""
    base = ref.base.root

    def enter(path: str, pushed: dict[str, str | None]) -> bool:
        memo = (base, path, tuple(sorted(pushed.items())))
        if memo in seen:
            return False
        seen.add(memo)
        return True

    if not enter(ref.path, {}):
        return iter(())
    return tree.iter_items(store, ref.node, enter=enter)


@dataclass
class VersionLive:
    """The files the retained lakehouse roots keep (see the module doc)."""

    files: dict[str, str] = field(default_factory=dict)  # URI -> kind
    pointers: dict[str, str] = field(default_factory=dict)  # metadata URI -> first root naming it
    roots: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # pointed-at metadata files that do not exist
    names: dict[str, str] = field(default_factory=dict)  # metadata URI -> the table name the first root gives it
    keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # table name -> its key
    refs: list[tuple[str, RootRef]] = field(default_factory=list)  # (label, root) of every retained root


def version_live(
    lakehouse: Lakehouse, files: TableFiles, pointers: TablePointers, latest: int | None = None, contents: bool = True
) -> VersionLive:
    """Every file the retained lakehouse roots keep: the metadata files they point at, those
    files' current snapshots and their metadata logs (without `contents`: not the data and
    delete files their manifests list, see `TableFiles.reach`).

    Raises:
        TableFileError: a root, definition, metadata file, manifest list or manifest they need
            cannot be read (with `TableFiles.tolerant`, only a root or a definition: a table
            file that cannot be read is recorded, and `damage.assess` names its table).
        UnsafeOperationError: a pinned export whose roots cannot be enumerated.
    """
    out = VersionLive()
    view_defs: dict[str, tuple[str, ...]] = {}
    for label, ref in retained_roots(lakehouse, latest):
        out.roots.append(label)
        out.refs.append((label, ref))
        for loc in view_metadata_files(LakehouseView(lakehouse, ref), view_defs):  # views' metadata files
            out.files.setdefault(files.canon(loc), METADATA)
        for t in pointers.union(ref):
            out.pointers.setdefault(t.metadata, f"{label} ({t.name})")
            out.names.setdefault(t.metadata, t.name)
            out.keys.setdefault(t.name, t.key)
    todo = [loc for loc in out.pointers if loc not in files.metadata]
    for i in range(0, len(todo), ROOT_BATCH):
        chunk = todo[i : i + ROOT_BATCH]
        what = f"table metadata that {out.pointers[chunk[0]]} (or another retained root) points at"
        # A pointer to a metadata file that does not exist reaches nothing anyone can read
        # (that version's table is already unreadable): reported, not a reason to stop.
        files.load_metadata(chunk, what=what, missing_ok=True)
    currents: dict[str, list[int]] = {}
    for loc in out.pointers:
        if loc in files.missing:
            out.missing[loc] = out.pointers[loc]
            continue
        if loc in files.broken:
            continue  # (tolerant reads) its table is damaged: `damage.assess` names it
        meta = files.metadata[loc]
        out.files[loc] = METADATA
        for m in metadata_log(meta):
            out.files.setdefault(files.canon(m), METADATA)
        cur = current_snapshot(meta)
        if cur is not None:
            currents.setdefault(loc, []).append(cur)
    files.prefetch([(files.metadata[loc], ids) for loc, ids in currents.items()], contents=contents)
    for loc, ids in currents.items():
        for u, kind in files.reach(files.metadata[loc], ids, contents=contents).items():
            out.files.setdefault(u, kind)
    return out


def table_live(
    files: TableFiles,
    location: str,
    meta: dict[str, Any],
    keep: set[int] | None = None,
    extra_metadata: list[str] | None = None,
    contents: bool = True,
) -> dict[str, str]:
    """The files a table's metadata `meta` (at `location`) keeps: its snapshots (`keep`, or
    all of them), their statistics, the metadata file, the previous ones its log names, and
    `extra_metadata` (e.g. the log of the metadata an expiry is about to write). Without
    `contents`, not the data and delete files the manifests list (`TableFiles.reach`)."""
    ids = {int(s["snapshot-id"]) for s in meta.get("snapshots") or []} if keep is None else keep
    out = files.reach(meta, ids, contents=contents)
    out[files.canon(location)] = METADATA
    for m in [*metadata_log(meta), *(extra_metadata or [])]:
        out[files.canon(m)] = METADATA
    return out
