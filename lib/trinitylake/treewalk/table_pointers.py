"""Table pointers by kind: the tables of one version and the ``metadata_location`` pointers of
their definitions, counted from the definitions alone (no table metadata is read).

The walk job (`trinitylake.jobs.walk.job`) reports these counts next to its reachability counts;
`trinitylake.report` reads the table definitions with :func:`read_table_definitions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from trinitylake.errors import TrinityLakeError
from trinitylake.format import definitions as format_definitions
from trinitylake.storage.uri import is_absolute

if TYPE_CHECKING:
    from trinitylake.lakehouse.lakehouse import Lakehouse


#: The walk counts table pointers only while it reached at most this many definition files in
#: all: counting reads each table definition of the latest version on the driver (the walk
#: itself never reads a definition), which stays a fraction of the walk's own reads below it.
TABLE_POINTER_DEF_LIMIT = 20_000


def table_entries(view: Any) -> list[tuple[str, str]]:
    """``(namespace.table, definition path)`` of every table of `view`'s version, in key order
    (one pass over its tree; no definition is read)."""
    out: list[tuple[str, str]] = []
    for key, path in view.all_items():
        try:
            kind, names = view.codec.decode(key)
        except Exception:  # noqa: BLE001 - a key of another kind is no table
            continue
        if kind == "table":
            out.append((".".join(names), path))
    return out


def read_table_definitions(view: Any, entries: Sequence[tuple[str, str]], io_threads: int = 8
                           ) -> list[tuple[str, Any, Exception | None]]:
    """``(name, TableDef, None)`` for each of `entries` (from `table_entries`), in order, read
    on `io_threads` threads; ``(name, None, error)`` for a definition that cannot be read."""

    def one(item: tuple[str, str]) -> tuple[str, Any, Exception | None]:
        name, path = item
        try:
            return name, view.read_def(format_definitions.TableDef, path), None
        except Exception as e:  # noqa: BLE001 - reported per table, never fatal
            return name, None, e

    if len(entries) < 2 or io_threads <= 1:
        return [one(t) for t in entries]
    with ThreadPoolExecutor(max_workers=min(io_threads, len(entries))) as pool:
        return list(pool.map(one, entries))


def table_definitions(lakehouse: Lakehouse, version: int, io_threads: int = 8
                      ) -> list[tuple[str, Any, Exception | None]]:
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
    if not lakehouse.storage.on_local_disk:
        # On an object store each definition is a GET the walk itself never sends (it sizes
        # definitions from listings): the walk's request count would grow by the table count.
        details["skipped"] = ("on an object store counting table pointers would send one GET per table "
                              "definition; `tlake report` lists the tables")
        return {}, details
    try:
        if version is None:  # not before the skips above: the hint GET and HEAD of an unneeded count
            version = details["version"] = lakehouse.latest_version()
        defs = table_definitions(lakehouse, version, io_threads)
    except Exception as e:  # noqa: BLE001 - a side count never fails the walk
        details["skipped"] = f"the tables of v{version} cannot be listed: {type(e).__name__}: {e}"
        return {}, details
    counts = {"table_pointers_iceberg": 0, "table_pointers_other": 0, "table_pointers_none": 0,
              "table_pointers_outside": 0}
    formats: dict[str, int] = {}
    unreadable: list[str] = []
    root = lakehouse.storage
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
