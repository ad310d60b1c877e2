"""Export plan files and source reads: the plan's Parquet parts, the copy's manifests, JSON
records, and the two functions that read a source file (`plan_node`, `export_bytes`). What an
export copies and how it rewrites files are the pure rules of `trinitylake.jobs.export.rules`
(see its module doc for the choices): import them from there.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trinitylake.jobs.export.rules import (
    ACTION_REWRITE,
    FORMAT_TAG,
    PLAN_COLUMNS,
    PLAN_SCHEMA,
    ExportSpec,
    NodeRefs,
    PlanRow,
    exported_bytes,
    plan_node_bytes,
)
from trinitylake.storage import Storage


def plan_node(source: Storage, path: str, depth: int, spec: ExportSpec) -> tuple[PlanRow, NodeRefs]:
    """Read one node of the source and plan it: its row (with its exported bytes) and what it references."""
    data = source.read(path)
    return plan_node_bytes(source, path, depth, spec, data)


def export_bytes(row: PlanRow, source: Storage, spec: ExportSpec) -> tuple[bytes, bool]:
    """The bytes a planned file has at the target, and whether they differ from the source's:
    a node's from the plan, a definition file's read (once) from the source and rewritten by
    `trinitylake.jobs.export.rules.exported_bytes`."""
    if row.data is not None:
        return row.data, row.action == ACTION_REWRITE
    data = source.read(row.target)
    out = exported_bytes(row, data, source, spec)
    return out, out is not data


# ---- plan files ------------------------------------------------------------------------------------
def plan_table(rows: Iterable[PlanRow]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) or [() for _ in PLAN_COLUMNS]
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, PLAN_SCHEMA, strict=True)],
                                schema=PLAN_SCHEMA)


def table_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def plan_part_bytes(rows: Iterable[PlanRow]) -> bytes:
    return table_bytes(plan_table(rows))


def read_plan_part(data: bytes) -> list[PlanRow]:
    # ParquetFile, not read_table: read_table goes through pyarrow.dataset, whose import (with
    # pandas) cost each export copy worker 0.4 s before its first file.
    table = pq.ParquetFile(pa.BufferReader(data)).read()
    cols = [table.column(n).to_pylist() if n in table.column_names else [None] * table.num_rows
            for n in PLAN_COLUMNS]
    return [PlanRow(*vals) for vals in zip(*cols, strict=True)]


def manifest_bytes(part: str, files: dict[str, tuple[int, str]]) -> bytes:
    obj = {"format": FORMAT_TAG, "part": part, "files": {k: list(v) for k, v in sorted(files.items())}}
    return json.dumps(obj, separators=(",", ":")).encode()


def read_manifest(storage: Storage, path: str) -> dict[str, tuple[int, str]] | None:
    obj = read_json(storage, path)
    if obj is None or obj.get("format") != FORMAT_TAG or not isinstance(obj.get("files"), dict):
        return None
    try:
        return {k: (int(v[0]), str(v[1])) for k, v in obj["files"].items()}
    except (TypeError, ValueError, IndexError):
        return None


def json_bytes(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()


def read_json(storage: Storage, path: str) -> dict[str, Any] | None:
    try:
        data = storage.read(path)
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
