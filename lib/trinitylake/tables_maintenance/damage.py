"""Damaged tables: a table whose metadata JSON, manifest list or manifest cannot be read
(missing, truncated, not JSON or Avro) does not stop the maintenance of the others.

Both jobs read with `TableFiles.tolerant` on: a file that cannot be read is recorded
(`TableFiles.broken`) instead of raising. `assess` then names, from everything the run read,
the tables that need such a file: a table of the latest version needs its current metadata
and every snapshot it keeps; a retained lakehouse version (or pinned export) needs the
metadata its table points at and that metadata's current snapshot. For each damaged table it
says which files cannot be read and which lakehouse versions need them (`DamagedTable`).

A damaged table's live set is unknown, so **none of its files is deleted** by either job:

* it is not expired (no commit) and its location is not listed for orphans;
* every file under a location it has or had (the ``location`` and data paths of each of its
  metadata files that reads, and the folder its metadata files lie in) is kept, the other
  tables' pending and orphan files there too (`Damage.holds`);
* what its readable files reach counts as live for every other table (a file it shares).

A file that only an unreadable file names, outside those locations, cannot be known: Iceberg's
``gc.enabled=false`` is the switch for tables that share files across locations.

A metadata pointer to a file that does not exist, in a folder that holds no file at all, is a
placeholder (a table registered before its first write), not damage: nothing of it exists.
A run that found damage ends ``partial`` (`PARTIAL`): the job runner's exit status 3, an audit
row whose state is ``partial``, and the damaged tables in the result's details.
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trinitylake.lakehouse.view import LakehouseView
from trinitylake.tables_maintenance.files import TableFileError, TableFiles, current_snapshot
from trinitylake.tables_maintenance.live import table_live

if TYPE_CHECKING:
    from collections.abc import Callable

    from trinitylake.lakehouse import Lakehouse
    from trinitylake.lakehouse.roots import RootRef
    from trinitylake.runs.results import JobResult
    from trinitylake.tables_maintenance.live import TablePointers, TableRef, VersionLive

log = logging.getLogger(__name__)

#: The status of a run that skipped damaged tables and maintained the others.
PARTIAL = "partial"
#: Damaged tables named in a result's one-line notes (the audit row's ``changes``).
NOTES_MAX = 20


@dataclass
class DamagedTable:
    """One table the run left alone: the files it cannot read and the versions that need them."""

    name: str
    files: dict[str, str] = field(default_factory=dict)  # unreadable file -> why
    versions: list[str] = field(default_factory=list)  # labels of the lakehouse roots that need them
    locations: set[str] = field(default_factory=set)  # folders whose files are kept (no trailing slash)
    metadata: set[str] = field(default_factory=set)  # its metadata files that need an unreadable file

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": dict(sorted(self.files.items())[:20]),
            "files_unreadable": len(self.files),
            "versions": self.versions[:50],
            "versions_needing": len(self.versions),
            "locations_kept": sorted(self.locations),
        }

    def line(self) -> str:
        """One line for logs and the audit row."""
        first = sorted(self.files)[0]
        more = f" (+{len(self.files) - 1} more)" if len(self.files) > 1 else ""
        vs = ", ".join(self.versions[:5]) + (f" (+{len(self.versions) - 5} more)" if len(self.versions) > 5 else "")
        return f"table {self.name} skipped: {self.files[first]}{more}; needed by {vs or 'no retained version'}"


@dataclass
class Damage:
    """The damaged tables of one run, and the placeholders (metadata never written)."""

    tables: dict[str, DamagedTable] = field(default_factory=dict)
    #: Folders of tables whose metadata pointer names no file: nothing exists there to keep,
    #: but whatever appears there is kept as well.
    placeholder_locations: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.tables)

    def table(self, name: str) -> DamagedTable:
        return self.tables.setdefault(name, DamagedTable(name))

    def prefixes(self) -> list[str]:
        return sorted({p.rstrip("/") + "/" for t in self.tables.values() for p in t.locations}
                      | {p.rstrip("/") + "/" for p in self.placeholder_locations})

    def holds(self, uri: str, prefixes: list[str] | None = None) -> str | None:
        """The damaged table (or ``placeholder``) whose location holds `uri`, if any."""
        for t in self.tables.values():
            for p in t.locations:
                if uri.startswith(p.rstrip("/") + "/"):
                    return t.name
        for p in prefixes if prefixes is not None else sorted(self.placeholder_locations):
            if uri.startswith(p.rstrip("/") + "/"):
                return "placeholder"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {n: t.to_dict() for n, t in sorted(self.tables.items())}

    def lines(self) -> list[str]:
        return [t.line() for _, t in sorted(self.tables.items())][:NOTES_MAX]


def report(dmg: Damage, result: JobResult) -> None:
    """Record `dmg` in `result`: ``tables_damaged`` and ``held`` counts, the damaged tables in
    the details (``damaged_tables``, and one line each in ``partial``), status `PARTIAL`."""
    result.counts["tables_damaged"] = len(dmg.tables)
    if not dmg:
        return
    result.details["damaged_tables"] = dmg.to_dict()
    result.details["partial"] = dmg.lines()
    result.status = PARTIAL
    for line in dmg.lines():
        log.warning("%s %s: %s", result.job, result.run_id, line)


def table_folder(metadata_uri: str) -> str:
    """The folder a table's metadata file implies: ``<location>`` for
    ``<location>/metadata/<file>`` (Iceberg's layout), else the file's own folder."""
    head, sep, _ = metadata_uri.rpartition("/metadata/")
    return head if sep else posixpath.dirname(metadata_uri)


def unreadable_of(files: TableFiles, meta: dict[str, Any], ids: set[int] | None) -> dict[str, str]:
    """The files the snapshots `ids` of `meta` (None: all) need that cannot be read: manifest
    lists, and the manifests the readable lists (or the snapshot itself) name."""
    out: dict[str, str] = {}
    for s in meta.get("snapshots") or []:
        if ids is not None and int(s["snapshot-id"]) not in ids:
            continue
        manifests = [files.canon(m) for m in s.get("manifests") or []]
        if s.get("manifest-list"):
            ml = files.canon(s["manifest-list"])
            if ml in files.broken:
                out[ml] = files.broken[ml]
            manifests.extend(files.lists.get(ml, ()))
        for m in manifests:
            if m in files.broken:
                out[m] = files.broken[m]
    return out


def scan_tables(files: TableFiles, tables: list[TableRef], contents: bool = True,
                snapshots: Callable[[TableRef], set[int] | None] | None = None) -> Damage:
    """Read the snapshots of the current metadata of `tables` (lists, and with `contents`
    their manifests) and name the damaged ones: the check before a job changes anything.
    `snapshots`: which snapshots of a table to read (None, or a None answer: every one)."""
    files.load_metadata([t.metadata for t in tables], missing_ok=True)
    files.prefetch([(files.metadata[t.metadata], snapshots(t) if snapshots else None)
                    for t in tables if t.metadata in files.metadata], contents=contents)
    out = Damage()
    for t in tables:
        _check_current(files, t, out)
    return out


def _check_current(files: TableFiles, t: TableRef, out: Damage) -> None:
    if t.metadata in files.broken:
        why = {t.metadata: files.broken[t.metadata]}
    elif t.metadata in files.metadata:
        why = unreadable_of(files, files.metadata[t.metadata], None)
    else:
        return  # missing: judged by `assess` (a placeholder or damage)
    if why:
        d = out.table(t.name)
        d.files.update(why)
        d.metadata.add(t.metadata)


def assess(
    lakehouse: Lakehouse,
    files: TableFiles,
    pointers: TablePointers,
    current: list[TableRef],
    vl: VersionLive,
    latest: int,
) -> Damage:
    """The damaged tables among everything the run read (see the module doc): the tables of
    the latest version (`current`, every snapshot) and what the retained roots point at
    (`vl`, the current snapshots).

    Raises:
        TableFileError: a file that cannot be read belongs to no table the run can name, so
            what it reaches is unknown (nothing may be deleted).
    """
    out = Damage()
    for t in current:
        _check_current(files, t, out)
        if t.metadata in files.missing:
            _missing(files, t.name, t.metadata, out)
    for loc, name in vl.names.items():
        if loc in files.missing:
            _missing(files, name, loc, out)
            continue
        if loc in files.broken:
            why = {loc: files.broken[loc]}
        else:
            meta = files.metadata.get(loc)
            cur = current_snapshot(meta) if meta is not None else None
            why = unreadable_of(files, meta, {cur}) if meta is not None and cur is not None else {}
        if why:
            d = out.table(name)
            d.files.update(why)
            d.metadata.add(loc)
    attributed = {u for t in out.tables.values() for u in t.files}
    stray = sorted(set(files.broken) - attributed)
    if stray:
        raise TableFileError(
            f"{files.broken[stray[0]]}; no table of the latest version or a retained version needs it, so what it "
            f"reaches is unknown ({len(stray)} such files): nothing was deleted"
        )
    if out.tables:
        _locations(files, current, vl, out)
        _versions(lakehouse, pointers, current, vl, latest, out)
    return out


#: The names Iceberg gives metadata files (plain or gzip).
_METADATA_SUFFIXES = (".metadata.json", ".metadata.json.gz", ".gz.metadata.json")


def salvage(files: TableFiles, dmg: Damage) -> dict[str, str]:
    """What the damaged tables' readable metadata reaches, counted live for every other table:
    every metadata file in the folders their damaged metadata files lie in (their own history:
    older versions of a lost or truncated file name the files it shared), every snapshot of
    each, read tolerantly (an unreadable part adds nothing). Costs a listing and the reads of
    those files, for damaged tables only."""
    folders = {posixpath.dirname(m): t for t in dmg.tables.values() for m in t.metadata}
    found: dict[str, DamagedTable] = {m: t for t in dmg.tables.values() for m in t.metadata}
    for folder, t in sorted(folders.items()):
        st, rel = files.store(folder + "/_")
        sub = posixpath.dirname(rel)
        if not sub:
            continue  # a store's top level: not a table's folder
        for f in st.list(sub, recursive=False):
            if f.path.endswith(_METADATA_SUFFIXES):
                found.setdefault(st.uri(f.path), t)
    files.load_metadata(list(found), missing_ok=True)
    metas = sorted(m for m in found if m in files.metadata)
    files.prefetch([(files.metadata[m], None) for m in metas])
    out: dict[str, str] = {}
    for m in metas:
        out.update(table_live(files, m, files.metadata[m]))
        found[m].locations.update(_folders_of(files, files.metadata[m]))
    return out


#: Table properties that place data files outside ``<location>/data`` (Iceberg's).
_DATA_PATHS = ("write.data.path", "write.object-storage.path", "write.folder-storage.path")


def _folders_of(files: TableFiles, meta: dict[str, Any]) -> set[str]:
    """The folders a table's metadata says its files lie in: its ``location`` and data paths."""
    props = meta.get("properties") or {}
    raw = [meta.get("location"), *(props.get(k) for k in _DATA_PATHS)]
    return {files.canon(str(p)).rstrip("/") for p in raw if isinstance(p, str) and p}


def _missing(files: TableFiles, name: str, loc: str, out: Damage) -> None:
    """A metadata pointer to a missing file: damage when its folder holds other files (the
    table existed), a placeholder when the folder is empty."""
    st, rel = files.store(loc)
    folder = posixpath.dirname(rel)
    try:
        others = bool(folder) and any(True for _ in st.list(folder))
    except FileNotFoundError:
        others = False
    if others:
        d = out.table(name)
        d.files[loc] = f"table metadata {loc} cannot be read (FileNotFoundError: missing)"
        d.metadata.add(loc)
    elif folder:  # (a pointer at a store's top level protects nothing: it would hold every file)
        out.placeholder_locations.add(table_folder(loc))


def _locations(files: TableFiles, current: list[TableRef], vl: VersionLive, out: Damage) -> None:
    """Every folder a damaged table has or had: each of its metadata files' ``location`` and
    the folder those files lie in."""
    metas: dict[str, set[str]] = {}
    for t in current:
        metas.setdefault(t.name, set()).add(t.metadata)
    for loc, name in vl.names.items():
        metas.setdefault(name, set()).add(loc)
    for name, d in out.tables.items():
        for m in metas.get(name, set()) | d.metadata:
            d.locations.add(table_folder(m))
            meta = files.metadata.get(m)
            if meta is not None:
                d.locations.update(_folders_of(files, meta))


def _versions(
    lakehouse: Lakehouse, pointers: TablePointers, current: list[TableRef], vl: VersionLive, latest: int,
    out: Damage,
) -> None:
    """For each damaged table, the retained roots whose pointer names one of its damaged
    metadata files (one lookup of the table a root; a root without it is skipped)."""
    keys = {t.name: t.key for t in current}
    keys.update({n: k for n, k in vl.keys.items() if n not in keys})
    for label, ref in vl.refs:
        view = LakehouseView(lakehouse, ref)
        for name, d in out.tables.items():
            key = keys.get(name)
            loc = _pointer_of(view, pointers, ref, key) if key else None
            if loc is not None and loc in d.metadata:
                d.versions.append(label + (" (latest)" if label == f"version {latest}" else ""))
    for d in out.tables.values():
        if not d.versions and any(t.name == d.name and t.metadata in d.metadata for t in current):
            d.versions.append(f"version {latest} (latest)")


def _pointer_of(view: LakehouseView, pointers: TablePointers, ref: RootRef, key: tuple[str, ...]) -> str | None:
    try:
        if not view.table_exists(key[0], key[-1]):
            return None
        return pointers.pointer(ref, view.load_table(key[0], key[-1]))
    except Exception as e:  # noqa: BLE001 - a version that cannot say is left out of the report, not fatal
        log.debug("table %s of %s: pointer unknown (%s)", ".".join(key), ref.path, e)
        return None
