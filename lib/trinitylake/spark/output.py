"""Writing a job's listings (Parquet) to local disk or an object store.

Spark's own writers reach S3 only through ``s3a://`` and hadoop-aws, which do not work on our
machines (and would be a second storage layer besides fsspec). So:

* a **local** output (``file://``) is written by Spark itself (``DataFrameWriter.parquet``:
  parallel, with Spark's commit protocol and ``_SUCCESS`` marker);
* any **other** output (``s3://``, ``memory://``, ...) is written by the executors: each
  partition serializes its rows to one Parquet file with pyarrow and writes it through the
  same picklable `Storage` the jobs read with; only the file names and row counts (one small
  row per partition) come back to the driver, which then writes ``_SUCCESS`` listing them.

Both layouts read back with ``spark.read.parquet`` (local) or ``pyarrow.dataset`` (anywhere).
"""

from __future__ import annotations

import io
import json
import math
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trinitylake.storage import Storage
from trinitylake.storage.uri import parse_uri

ROWS_PER_FILE = 250_000

_ARROW_TYPES = {
    "string": pa.string(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
}


def _arrow_schema(df: Any) -> pa.Schema:
    return pa.schema([pa.field(name, _ARROW_TYPES[t]) for name, t in df.dtypes])


def write_parquet(df: Any, uri: str, storage_options: dict[str, Any] | None = None, rows: int | None = None) -> str:
    """Write `df` as Parquet files under the folder `uri` (replacing an earlier listing there).

    `rows` (the row count, when known) sizes the number of files. Returns the canonical URI.
    """
    p = parse_uri(uri)
    n_files = max(1, math.ceil((rows or 0) / ROWS_PER_FILE))
    if p.scheme == "file":
        df.coalesce(n_files).write.mode("overwrite").parquet(p.uri)
        return p.uri
    storage = Storage(p.uri, storage_options)
    for old in list(storage.list("")):
        storage.delete([old.path])
    schema = _arrow_schema(df)
    columns = list(df.columns)
    token = uuid.uuid4().hex[:12]

    def write_part(index: int, it: Any) -> Any:
        table = pa.Table.from_pylist([dict(zip(columns, r, strict=True)) for r in it], schema=schema)
        buf = io.BytesIO()
        pq.write_table(table, buf)
        name = f"part-{index:05d}-{token}.parquet"
        storage.write(name, buf.getvalue())
        yield name, table.num_rows

    parts = df.coalesce(n_files).rdd.mapPartitionsWithIndex(write_part).collect()
    manifest = {"files": sorted(n for n, _ in parts), "rows": sum(r for _, r in parts)}
    storage.write("_SUCCESS", json.dumps(manifest).encode())
    return p.uri


def read_parquet_table(uri: str, storage_options: dict[str, Any] | None = None) -> pa.Table:
    """Read a listing written by :func:`write_parquet` back into one Arrow table (tests, tools)."""
    p = parse_uri(uri)
    storage = Storage(p.uri, storage_options)
    tables = [pq.read_table(io.BytesIO(storage.read(f.path))) for f in sorted(storage.list(""), key=lambda f: f.path)
              if f.path.endswith(".parquet")]
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="default")
