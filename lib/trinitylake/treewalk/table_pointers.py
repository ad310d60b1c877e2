"""Table pointers by kind: the tables of one version and the ``metadata_location`` pointers of
their definitions, counted from the definitions alone (no table metadata is read); the views'
pointers at their Iceberg view metadata beside them (``view_pointers``).

The walk job (`trinitylake.jobs.walk.job`) reports these counts next to its reachability counts;
`trinitylake.report` reads the table definitions with :func:`read_table_definitions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from trinitylake.errors import TrinityLakeError
from trinitylake.format import definitions as format_definitions
from trinitylake.format import tree
from trinitylake.format.keys import VIEW_PREFIX
from trinitylake.storage.uri import is_absolute

if TYPE_CHECKING:
    from trinitylake.lakehouse.lakehouse import Lakehouse
    from trinitylake.lakehouse.view import LakehouseView


#: The walk counts table pointers only while it reached at most this many definition files in
#: all: counting reads each table definition of the latest version on the driver (the walk
#: itself never reads a definition), which stays a fraction of the walk's own reads below it.
TABLE_POINTER_DEF_LIMIT = 20_000


def table_entries(view: LakehouseView, kind_wanted: str = "table") -> list[tuple[str, str]]:
    """``(namespace.table, definition path)`` of every table (or, with ``kind_wanted="view"``,
    every view) of `view`'s version, in key order (one pass over its tree; no definition is read)."""
    out: list[tuple[str, str]] = []
    for key, path in view.all_items():
        try:
            kind, names = view.codec.decode(key)
        except Exception:  # noqa: BLE001 - a key of another kind is no table
            continue
        if kind == kind_wanted:
            out.append((".".join(names), path))
    return out


def view_metadata_locations(view: LakehouseView, io_threads: int = 8) -> list[tuple[str, str | None, Exception | None]]:
    """``(namespace.view, metadata location, None)`` of every view of `view`'s version: the
    Iceberg view metadata file its ViewDef points at (``properties["metadata_location"]``), as a
    table's TableDef points at the table's; ``(name, None, error)`` for a definition that cannot
    be read."""
    entries = table_entries(view, "view")

    def one(item: tuple[str, str]) -> tuple[str, str | None, Exception | None]:
        name, path = item
        try:
            return name, view.read_def(format_definitions.ViewDef, path).properties.get("metadata_location"), None
        except Exception as e:  # noqa: BLE001 - reported per view, never fatal
            return name, None, e

    if len(entries) < 2 or io_threads <= 1:
        return [one(v) for v in entries]
    with ThreadPoolExecutor(max_workers=min(io_threads, len(entries))) as pool:
        return list(pool.map(one, entries))


def read_table_definitions(view: LakehouseView, entries: Sequence[tuple[str, str]], io_threads: int = 8
                           ) -> list[tuple[str, format_definitions.TableDef | None, Exception | None]]:
    """``(name, TableDef, None)`` for each of `entries` (from `table_entries`), in order, read
    on `io_threads` threads; ``(name, None, error)`` for a definition that cannot be read."""

    def one(item: tuple[str, str]) -> tuple[str, format_definitions.TableDef | None, Exception | None]:
        name, path = item
        try:
            return name, view.read_def(format_definitions.TableDef, path), None
        except Exception as e:  # noqa: BLE001 - reported per table, never fatal
            return name, None, e

    if len(entries) < 2 or io_threads <= 1:
        return [one(t) for t in entries]
    with ThreadPoolExecutor(max_workers=min(io_threads, len(entries))) as pool:
        return list(pool.map(one, entries))


def view_metadata_files(view: LakehouseView, cache: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """The Iceberg view metadata files the views of `view`'s version point at (current and
    previous, as URIs: a relative location resolves against the root's storage), for the
    tables' live set (a retained version's view metadata is never an orphan). Only the view
    keys' range of the tree is read; `cache` (definition URI -> files) reads each ViewDef once
    across versions sharing it.

    Raises:
        TrinityLakeError: a view's definition cannot be read (its pointers are then unknown).
    """
    cache = {} if cache is None else cache
    base = view.root.base
    out: list[str] = []
    for _key, path in tree.scan_prefix(view.store, view.root.node, VIEW_PREFIX):
        uri = base.uri(path)
        if uri not in cache:
            d = view.read_def(format_definitions.ViewDef, path)
            locs = (d.properties.get("metadata_location"), d.properties.get("previous_metadata_location"))
            cache[uri] = tuple(loc if is_absolute(loc) else base.uri(loc) for loc in locs if loc)
        out.extend(cache[uri])
    return out


def table_definitions(lakehouse: Lakehouse, version: int, io_threads: int = 8
                      ) -> list[tuple[str, format_definitions.TableDef | None, Exception | None]]:
    """`read_table_definitions` of every table of `version`."""
    view = lakehouse.view(version)
    return read_table_definitions(view, table_entries(view), io_threads)


def table_pointer_counts(lakehouse: Lakehouse, version: int | None, reached_definitions: int,
                         limit: int | None = None, io_threads: int = 8) -> tuple[dict[str, int], dict[str, Any]]:
    """The table definitions' pointers of `version` (None: the latest, found only once the
    count is known to run) by kind, from the definitions alone: no table metadata is read.

    Counts: ``table_pointers_iceberg`` (an ICEBERG table with a ``metadata_location``),
    ``table_pointers_other`` (another format's table with a ``metadata_location``),
    ``table_pointers_none`` (a table without one) and ``table_pointers_outside`` (of the
    pointers, those outside the lakehouse root). Returns ``({}, details)`` with a
    ``skipped`` reason when `reached_definitions` exceeds `limit` (default
    `TABLE_POINTER_DEF_LIMIT`; the walk would read every
    definition once more on the driver) or the tables cannot be listed.
    """

    details: dict[str, Any] = {"version": version, "scope": "tables of the latest version"}
    limit = TABLE_POINTER_DEF_LIMIT if limit is None else limit
    if reached_definitions > limit:
        details["skipped"] = (f"{reached_definitions} definition files reached, more than {limit}: counting table "
                              f"pointers would read each table definition again on the driver")
        return {}, details
    if lakehouse.storage.remote:
        # On an object store each definition is a GET the walk itself never sends (it sizes
        # definitions from listings): the walk's request count would grow by the table count.
        details["skipped"] = ("on an object store counting table pointers would send one GET per table "
                              "definition; `tlake report` lists the tables")
        return {}, details
    try:
        if version is None:  # not before the skips above: the hint GET and HEAD of an unneeded count
            version = details["version"] = lakehouse.latest_version()
        defs = table_definitions(lakehouse, version, io_threads)
        view_defs = view_metadata_locations(lakehouse.view(version), io_threads)
    except Exception as e:  # noqa: BLE001 - a side count never fails the walk
        details["skipped"] = f"the tables of v{version} cannot be listed: {type(e).__name__}: {e}"
        return {}, details
    counts = {"table_pointers_iceberg": 0, "table_pointers_other": 0, "table_pointers_none": 0,
              "table_pointers_outside": 0}
    root = lakehouse.storage
    if view_defs:
        # Views point at their Iceberg view metadata as tables at theirs: counted apart.
        counts.update({"view_pointers": 0, "view_pointers_outside": 0})
        for _name, loc, err in view_defs:
            if err is not None or not loc:
                continue
            counts["view_pointers"] += 1
            try:
                counts["view_pointers_outside"] += int(is_absolute(loc) and root.relative(loc) is None)
            except TrinityLakeError:
                counts["view_pointers_outside"] += 1
        details["views"] = len(view_defs)
    formats: dict[str, int] = {}
    unreadable: list[str] = [f"view {name}: {type(err).__name__}: {err}" for name, _, err in view_defs if err is not None]
    for name, d, err in defs:
        if d is None:
            unreadable.append(f"{name}: {type(err).__name__}: {err}")
            continue
        fmt = format_definitions.table_format_name(d)
        loc = d.format_properties.get("metadata_location")
        if not loc:
            counts["table_pointers_none"] += 1
            continue
        formats[fmt] = formats.get(fmt, 0) + 1
        counts["table_pointers_iceberg" if fmt == "ICEBERG" else "table_pointers_other"] += 1
        try:
            outside = is_absolute(loc) and root.relative(loc) is None
        except TrinityLakeError:
            outside = True
        counts["table_pointers_outside"] += int(outside)
    details.update({"tables": len(defs), "by_format": formats, "unreadable": len(unreadable),
                    "unreadable_first": unreadable[:5]})
    return counts, details
