"""The control table reads the same with delta-rs and with Spark (Parquet over the Delta file list)."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from trinitylake.control import SCHEMA, ControlTable

from .test_table import full_record

pytestmark = pytest.mark.spark


def _spark_schema():
    from pyspark.sql import types as T

    scalar = {
        "int64": T.LongType(),
        "string": T.StringType(),
        "timestamp[us, tz=UTC]": T.TimestampType(),
    }
    fields = []
    for f in SCHEMA:
        t = str(f.type)
        if t.startswith("map<"):
            st = T.MapType(T.StringType(), T.DoubleType())
        elif t.startswith("list<"):
            st = T.ArrayType(T.StringType())
        else:
            st = scalar[t]
        fields.append(T.StructField(f.name, st, f.nullable))
    return T.StructType(fields)


def test_spark_reads_what_delta_rs_reads(tmp_path, control_spark):
    from chispa import assert_df_equality

    ct = ControlTable(str(tmp_path / "lh" / "_control"))
    ct.append([full_record(1, "begin", version_after=None, ended_at=None), full_record(1)])
    ct.append([full_record(2, "failed", error_class="CommitConflictError", error_message="lost", metrics={})])
    ct.append([full_record(3, changes=[], arguments={})])
    ct.compact(retention_hours=168)  # leaves removed files in the directory: must not be read

    uris = DeltaTable(ct._delta_uri).file_uris()
    got = control_spark.read.parquet(*uris)

    # Expected rows from delta-rs, as Spark rows.
    rows = []
    for r in ct.to_arrow().to_pylist():
        r["metrics"] = dict(r["metrics"]) if r["metrics"] is not None else None
        rows.append(r)
    expected = control_spark.createDataFrame(rows, schema=_spark_schema())
    order = ["txn_seq", "record_type"]
    assert_df_equality(got.orderBy(*order), expected.orderBy(*order), ignore_nullable=True)

    # And the values mean what they should on the Spark side.
    failed = got.filter("record_type = 'failed'").collect()[0]
    assert failed.error_class == "CommitConflictError"
    assert json.loads(failed.arguments)["table"] == "t2"
    first = got.filter("txn_seq = 1 AND record_type = 'committed'").collect()[0]
    assert first.metrics == {"rows": 3.0, "bytes": 1024.0, "seconds_commit": 0.25}
    assert first.changes == ["create table sales.t1"]
    assert got.count() == 4
    # Reading the directory instead would also pick up the files compaction removed.
    assert control_spark.read.parquet(ct._delta_uri).count() > 4
