"""Writing a job's listings (Parquet) to local disk or an object store.

A listing is a folder of ``part-*.parquet`` files plus ``_SUCCESS``:

* held by the **driver** (a phase that ran locally), it is written with pyarrow through the
  job's `Storage`, one file per `ROWS_PER_FILE` rows;
* held by the **executors** (a DataFrame), a local output (``file://``) is written by Spark
  itself (``DataFrameWriter.parquet``: parallel, Spark's commit protocol); any other output
  (``s3://``, ``memory://``, ...) is written by the executors inside ``mapInArrow`` through the
  same picklable `Storage` the jobs read with (Spark's ``s3a://`` would be a second storage
  layer); only file names and row counts come back to the driver, which writes ``_SUCCESS``.

Every layout reads back with ``spark.read.parquet`` (local) or :func:`read_parquet_table`.
"""

from __future__ import annotations

import functools
import io
import json
import math
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from trinitylake.storage import Storage
from trinitylake.storage.uri import parse_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from trinitylake.spark.execution import Execution

ROWS_PER_FILE = 250_000
_PART_SCHEMA = pa.schema([("name", pa.string()), ("rows", pa.int64())])


def _parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _clear(storage: Storage) -> None:
    old = [f.path for f in storage.list("")]
    if old:
        storage.delete(old)


def _write_parts(storage: Storage, token: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: one Parquet file per task (its batches), one row back."""
    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return
    name = f"part-{uuid.uuid4().hex[:8]}-{token}.parquet"
    storage.write(name, _parquet_bytes(table))
    yield pa.RecordBatch.from_pylist([{"name": name, "rows": table.num_rows}], schema=_PART_SCHEMA)


def write_listing(ex: Execution | None, data: pa.Table | DataFrame, uri: str, storage_options: dict[str, Any] | None = None,
                  rows: int | None = None) -> str:
    """Write `data` (an Arrow table held by the driver, or a DataFrame) as Parquet under the
    folder `uri`, replacing an earlier listing there. Returns the canonical URI."""
    p = parse_uri(uri)
    storage = Storage(p.uri, storage_options)
    token = uuid.uuid4().hex[:12]
    if isinstance(data, pa.Table):
        _clear(storage)
        names = []
        for i in range(0, max(1, data.num_rows), ROWS_PER_FILE):
            name = f"part-{i // ROWS_PER_FILE:05d}-{token}.parquet"
            storage.write(name, _parquet_bytes(data.slice(i, ROWS_PER_FILE)))
            names.append(name)
        storage.write("_SUCCESS", json.dumps({"files": names, "rows": data.num_rows}).encode())
        return p.uri
    n_files = max(1, math.ceil((rows or 0) / ROWS_PER_FILE))
    if not storage.remote:
        data.coalesce(n_files).write.mode("overwrite").parquet(p.uri)
        return p.uri
    _clear(storage)
    parts = data.coalesce(n_files).mapInArrow(functools.partial(_write_parts, storage, token),
                                              "name string, rows bigint").collect()
    manifest = {"files": sorted(r["name"] for r in parts), "rows": sum(int(r["rows"]) for r in parts)}
    storage.write("_SUCCESS", json.dumps(manifest).encode())
    return p.uri


def write_parquet(df: DataFrame, uri: str, storage_options: dict[str, Any] | None = None, rows: int | None = None) -> str:
    """:func:`write_listing` of a DataFrame (the name callers used before driver-held listings)."""
    return write_listing(None, df, uri, storage_options, rows)


def read_parquet_table(uri: str, storage_options: dict[str, Any] | None = None) -> pa.Table:
    """Read a listing written by :func:`write_listing` back into one Arrow table (tests, tools)."""
    p = parse_uri(uri)
    storage = Storage(p.uri, storage_options)
    tables = [pq.read_table(io.BytesIO(storage.read(f.path))) for f in sorted(storage.list(""), key=lambda f: f.path)
              if f.path.endswith(".parquet")]
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="default")
