"""What the tables' oracle (`tests.iceberg.table_oracle`) needs from the lakehouse, read by the
oracle's own reader (`tests.oracle.reader`, `tests.oracle.expect`, `tests.oracle.defs`) and
nothing of the library: which roots keep table metadata, and which metadata file each Iceberg
table of each of those roots points at.

**Which roots keep table metadata** (`table_roots`), by the oracle's own reading of the spec
(FORMAT.md §4, §6, §7) and our documented extension:

* every version from the latest definition's ``oldest_retained_version`` to the latest, as the
  oracle lists root files (§7.5: the listing is authoritative; the latest is the highest
  listed root);
* every ``exported_snapshot_pins`` version, listed or not (a pin on a root that is gone is
  reported as a missing root: nothing may expire a pinned version);
* the root of every *pinned* export (its name also in ``exported_snapshot_pins``) that exists:
  a partial or minimal export reads the source's table definitions through its own root;
* every live distributed transaction (open or committing, within ``expire_at`` plus the
  clock-skew margin): its running root (a staged table commit may still land) and, while it is
  listed, its beginning root (§6: every read of a transaction uses the root pinned at begin).

**Table pointers** (`table_pointers`): the merged keys of a root (B-epsilon merge-on-read,
`tests.oracle.expect.merged_keys`), table keys decoded by §3's key encoding, each table's
definition decoded by the oracle's wire reader (`tests.oracle.defs.table_def`); an Iceberg
table (``table_format`` empty or ICEBERG) with a ``metadata_location`` points at it: a full URI
as it is, a relative path against the root's own folder (`tests.oracle.reader.root_base`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tests.format.oracle import root_name
from tests.oracle.defs import DefinitionError, table_def
from tests.oracle.expect import decode, exists, merged_keys, oracle_for
from tests.oracle.reader import NodeFile, Oracle, OracleError, in_one_call, root_base, system_rows

METADATA_LOCATION = "metadata_location"


@dataclass(frozen=True)
class TableRoot:
    """One root whose tables' metadata must stay readable."""

    label: str  # "version 5", "pin p1 (version 3)", "export e1", "txn t1 (running)", "txn t1 (begin)"
    version: int
    uri: str


@in_one_call
def table_roots(o: Oracle, at_ms: int | None = None) -> list[TableRoot]:
    """Every root that keeps table metadata (see the module doc), retained versions first."""
    latest, d = o.latest()
    listed = set(o.listed_versions())
    out = [TableRoot(f"version {v}", v, f"{o.root}/{root_name(v)}")
           for v in sorted(listed) if d.oldest_retained_version <= v <= latest]
    for name, v in sorted(d.exported_snapshot_pins.items()):
        out.append(TableRoot(f"pin {name} (version {v})", int(v), f"{o.root}/{root_name(v)}"))
    for name, uri in sorted(d.exported_snapshots.items()):
        if name in d.exported_snapshot_pins and exists(o, uri):
            out.append(TableRoot(f"export {name}", int(d.exported_snapshot_pins[name]), uri))
    for t in o.live_transactions(at_ms):
        out.append(TableRoot(f"txn {t.id} (running)", t.begin_version, t.running_root))
        if t.begin_version in listed:
            out.append(TableRoot(f"txn {t.id} (begin)", t.begin_version, f"{o.root}/{root_name(t.begin_version)}"))
    return out


@in_one_call
def retained_versions(o: Oracle) -> list[int]:
    """Listed versions from the committed floor to the latest, and every pinned version."""
    return sorted({r.version for r in table_roots(o) if r.label.startswith(("version ", "pin "))})


@in_one_call
def table_pointers(o: Oracle, root_uri: str, cache: dict[str, NodeFile] | None = None,
                   defs: dict[str, str | None] | None = None) -> dict[str, str]:
    """``namespace.table`` -> the metadata URI of every Iceberg table of the tree at `root_uri`.
    `cache` keeps parsed node files, `defs` each definition URI's pointer (both immutable)."""
    system = system_rows(o._read(root_uri, "root node file"), root_uri)
    base = root_base(root_uri)
    lh_def = o.definition(o.resolve(system["lakehouse_def"], base))
    ns_max, t_max = int(lh_def.namespace_name_max_size_bytes or 100), int(lh_def.table_name_max_size_bytes or 100)
    out = {}
    for key, def_uri in merged_keys(o, root_uri, cache).items():
        names = decode(key, ns_max, t_max)
        if names is None or names[1] is None:
            continue
        if defs is not None and def_uri in defs:
            loc = defs[def_uri]
        else:
            try:
                td = table_def(o._read(def_uri, f"definition of table {names[0]}.{names[1]} of {root_uri}"), def_uri)
            except DefinitionError as e:
                raise OracleError(str(e)) from None
            loc = td.format_properties.get(METADATA_LOCATION) if td.format_name == "ICEBERG" else None
            loc = o.resolve(loc, base) if loc else None
            if defs is not None:
                defs[def_uri] = loc
        if loc is not None:
            out[f"{names[0]}.{names[1]}"] = loc
    return out


@in_one_call
def retained_pointers(o: Oracle, roots: Iterable[TableRoot] | None = None) -> dict[str, str]:
    """metadata URI -> ``"<root label>: <table>"`` of the first root naming it, for every
    Iceberg table of every root in `roots` (default `table_roots`)."""
    cache: dict[str, NodeFile] = {}
    defs: dict[str, str | None] = {}
    out: dict[str, str] = {}
    for r in table_roots(o) if roots is None else roots:
        for name, loc in sorted(table_pointers(o, r.uri, cache, defs).items()):
            out.setdefault(loc, f"{r.label}: {name}")
    return out


def pointers_of(uri: str, options: dict | None = None) -> dict[str, str]:
    """`retained_pointers` of the lakehouse at `uri`."""
    return retained_pointers(oracle_for(uri, options))


def versions_of(uri: str, options: dict | None = None) -> list[int]:
    """`retained_versions` of the lakehouse at `uri`."""
    return retained_versions(oracle_for(uri, options))


__all__ = ["TableRoot", "pointers_of", "retained_pointers", "retained_versions", "table_pointers", "table_roots",
           "versions_of"]
