"""The definitions the oracle reads, decoded by its own wire reader (`tests.oracle.wire`).

Field numbers are the spec's and our documented extension's (../shared/FORMAT.md §4, §7):

* **LakehouseDef**: id 1, major_version 2, order 3, namespace/table/view name widths 4/5/6,
  node_file_max_size_bytes 7, properties 8, txn_ttl_millis 9, txn_isolation_level 10; the
  extension maximum_version_age_millis 100, minimum_versions_to_keep 101, the per-version age
  overrides 102, exported_snapshots 103 (name -> root URI), oldest_retained_version 104,
  exported_snapshot_pins 105 (name -> version).
* **TransactionDef**: id 1, isolation_level 2, beginning_root_node_file_path 3,
  running_root_node_file_path 4, began_at_millis 5, expire_at_millis 6; the extension
  state_number 100, state 101 (empty = open), committed_version 102, ttl_millis 106.
* **TableDef** (what the tables' oracle needs, FORMAT.md §4 schema 2): id 1, table_type 7,
  table_format 8 (strings, empty = MANAGED / ICEBERG; files written before the strings hold a
  varint enum there: 0 MANAGED, 1 EXTERNAL, 2 FEDERATED; 0 ICEBERG), format_properties 9
  (``metadata_location`` for Iceberg), properties 10. The schema and key lists (2-6) are skipped.

proto3 rules: an absent scalar reads as 0 or ""; the last occurrence of a scalar wins; map
entries accumulate, a later entry for a key replacing an earlier one. Unknown fields are
skipped (the read sets, 103-105 of a TransactionDef, are not needed here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.oracle.wire import WireError, as_int, as_str, fields, map_entry


class DefinitionError(AssertionError):
    """A definition file the oracle cannot decode: a test failure, never a library error."""


@dataclass
class LakehouseDef:
    id: str = ""
    major_version: int = 0
    order: int = 0
    namespace_name_max_size_bytes: int = 0
    table_name_max_size_bytes: int = 0
    view_name_max_size_bytes: int = 0
    node_file_max_size_bytes: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    txn_ttl_millis: int = 0
    txn_isolation_level: int = 0
    maximum_version_age_millis: int = 0
    minimum_versions_to_keep: int = 0
    maximum_version_age_millis_overrides: dict[int, int] = field(default_factory=dict)
    exported_snapshots: dict[str, str] = field(default_factory=dict)
    oldest_retained_version: int = 0
    exported_snapshot_pins: dict[str, int] = field(default_factory=dict)


@dataclass
class TransactionDef:
    id: str = ""
    isolation_level: int = 0
    beginning_root_node_file_path: str = ""
    running_root_node_file_path: str = ""
    began_at_millis: int = 0
    expire_at_millis: int = 0
    state_number: int = 0
    state: str = ""
    committed_version: int = 0
    ttl_millis: int = 0


@dataclass
class TableDef:
    id: str = ""
    table_type: str = ""
    table_format: str = ""
    format_properties: dict[str, str] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def format_name(self) -> str:
        """The table format, upper case; empty means ICEBERG (the only format)."""
        return (self.table_format or "ICEBERG").upper()


#: The enum numbers of TableDef fields 7 and 8 in files written before they became strings.
_LEGACY_TABLE_ENUMS = {7: ("table_type", ("MANAGED", "EXTERNAL", "FEDERATED")), 8: ("table_format", ("ICEBERG",))}

_LH_INTS = {
    2: "major_version",
    3: "order",
    4: "namespace_name_max_size_bytes",
    5: "table_name_max_size_bytes",
    6: "view_name_max_size_bytes",
    7: "node_file_max_size_bytes",
    9: "txn_ttl_millis",
    10: "txn_isolation_level",
    100: "maximum_version_age_millis",
    101: "minimum_versions_to_keep",
    104: "oldest_retained_version",
}
_TXN_INTS = {
    2: "isolation_level",
    5: "began_at_millis",
    6: "expire_at_millis",
    100: "state_number",
    102: "committed_version",
    106: "ttl_millis",
}
_TXN_STRS = {1: "id", 3: "beginning_root_node_file_path", 4: "running_root_node_file_path", 101: "state"}


def _s(v: int | bytes | None, number: int) -> str:
    return "" if v is None else as_str(v, number)


def _i(v: int | bytes | None, number: int) -> int:
    return 0 if v is None else as_int(v, number)


def lakehouse_def(data: bytes, where: str) -> LakehouseDef:
    """The LakehouseDef in `data` (the file at `where`, for the error)."""
    d = LakehouseDef()
    try:
        for n, _, v in fields(data):
            if n == 1:
                d.id = as_str(v, n)
            elif n in _LH_INTS:
                setattr(d, _LH_INTS[n], as_int(v, n))
            elif n == 8:
                k, val = map_entry(v, n)
                d.properties[_s(k, n)] = _s(val, n)
            elif n == 102:
                k, val = map_entry(v, n)
                d.maximum_version_age_millis_overrides[_i(k, n)] = _i(val, n)
            elif n == 103:
                k, val = map_entry(v, n)
                d.exported_snapshots[_s(k, n)] = _s(val, n)
            elif n == 105:
                k, val = map_entry(v, n)
                d.exported_snapshot_pins[_s(k, n)] = _i(val, n)
    except WireError as e:
        raise DefinitionError(f"lakehouse definition {where} does not decode: {e}") from None
    return d


def transaction_def(data: bytes, where: str) -> TransactionDef:
    """The TransactionDef in `data` (the file at `where`, for the error)."""
    d = TransactionDef()
    try:
        for n, _, v in fields(data):
            if n in _TXN_STRS:
                setattr(d, _TXN_STRS[n], as_str(v, n))
            elif n in _TXN_INTS:
                setattr(d, _TXN_INTS[n], as_int(v, n))
    except WireError as e:
        raise DefinitionError(f"transaction definition {where} does not decode: {e}") from None
    return d


def table_def(data: bytes, where: str) -> TableDef:
    """The TableDef in `data` (the file at `where`, for the error)."""
    d = TableDef()
    try:
        for n, _, v in fields(data):
            if n == 1:
                d.id = as_str(v, n)
            elif n in _LEGACY_TABLE_ENUMS:
                name, values = _LEGACY_TABLE_ENUMS[n]
                if isinstance(v, int):
                    if v >= len(values):
                        raise WireError(f"field {n}: legacy {name} enum value {v} is unknown")
                    setattr(d, name, values[v])
                else:
                    setattr(d, name, as_str(v, n))
            elif n in (9, 10):
                k, val = map_entry(v, n)
                (d.format_properties if n == 9 else d.properties)[_s(k, n)] = _s(val, n)
    except WireError as e:
        raise DefinitionError(f"table definition {where} does not decode: {e}") from None
    return d
