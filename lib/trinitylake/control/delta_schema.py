"""The control table's schema as Delta and Arrow see it: the types our rows need (to check a
table found at the control location) and rows conformed to the table's own schema."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from deltalake import Schema

from trinitylake.control.records import SCHEMA
from trinitylake.json_data import JsonValue


def norm_type(t: JsonValue) -> JsonValue:
    """A Delta type (from the schema JSON) without nullability flags."""
    if isinstance(t, dict):
        return {k: norm_type(v) for k, v in t.items() if k not in ("containsNull", "valueContainsNull", "metadata")}
    if isinstance(t, list):
        return [norm_type(x) for x in t]
    return t


def type_str(t: JsonValue) -> str:
    t = norm_type(t)
    if isinstance(t, str):
        return t
    if t.get("type") == "map":
        return f"map<{type_str(t['keyType'])},{type_str(t['valueType'])}>"
    if t.get("type") == "array":
        return f"array<{type_str(t['elementType'])}>"
    if t.get("type") == "struct":
        return "struct<" + ",".join(f"{f['name']}:{type_str(f['type'])}" for f in t.get("fields", [])) + ">"
    return json.dumps(t, sort_keys=True)


EXPECTED_TYPES: dict[str, Any] = {
    f["name"]: norm_type(f["type"]) for f in json.loads(Schema.from_arrow(SCHEMA).to_json())["fields"]
}


def conform(data: pa.Table, target: pa.Schema) -> pa.Table:
    """`data` in the table's schema: extra table columns (from newer writers) are null."""
    if data.schema.equals(target, check_metadata=False):
        return data  # the usual case; rebuilding it cost 0.6 ms an append, under the lock
    names = set(data.column_names)
    arrays = []
    for f in target:
        if f.name in names:
            col = data.column(f.name)
            arrays.append(col if col.type == f.type else col.cast(f.type))
        else:
            arrays.append(pa.nulls(data.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=target)
