"""Spark SQL through the catalog server: Spark 4.1 with Iceberg's runtime from Maven
(``iceberg-spark-runtime-4.1_2.13:1.12.0``, `type=rest`) creates, inserts, deletes, merges and
time-travels a table of the lakehouse; PyIceberg's RestCatalog, the lakehouse's own catalog and
`tlake table describe` then read the same table.

The main environment's pyspark (4.2) cannot load any Iceberg runtime Maven serves (both 4.0's
1.10.0 and 4.1's 1.12.0 fail at the first statement with IncompatibleClassChangeError on
SparkView), so Spark runs in its own environment, `.venv-spark41` with pyspark 4.1 and the
runtime JAR under build/iceberg-spark41 (`make spark41`, part of the tests' set-up).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog

from tests.rest_catalog.server import TLAKE

ROOT = Path(__file__).resolve().parents[2]
SPARK_PY = ROOT / ".venv-spark41" / "bin" / "python"
JAR = ROOT / "build" / "iceberg-spark41" / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
JOB = Path(__file__).with_name("spark_sql_job.py")

pytestmark = pytest.mark.spark


def test_spark_sql_create_insert_delete_merge_time_travel_then_read_back_everywhere(served):
    missing = [str(p) for p in (SPARK_PY, JAR) if not p.exists()]
    assert not missing, f"the Spark 4.1 environment is not built (run `make spark41`): missing {missing}"
    cat = RestCatalog("tl", uri=served.url, token=served.token)
    cat.create_namespace("sparkns")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("who", pa.string())])
    cat.create_table("sparkns.from_py", schema=schema).append(pa.table({"id": [1, 2], "who": ["p", "q"]}, schema=schema))

    env = {**os.environ, "TLAKE_CATALOG_TOKEN": served.token}
    env.pop("PYTHONPATH", None)
    r = subprocess.run([str(SPARK_PY), str(JOB), str(JAR), served.url, "sparkns", "from_py"], capture_output=True,
                       text=True, timeout=420, env=env)
    result = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert r.returncode == 0 and result, f"the Spark job failed ({r.returncode}): {r.stderr[-4000:]}"
    out = json.loads(result[-1][len("RESULT "):])

    assert out["current"] == [[1, "a"], [3, "C"], [4, "d"]]  # after DELETE id 2 and MERGE (3 updated, 4 inserted)
    assert out["as_of_first"] == [[1, "a"], [2, "b"], [3, "c"]]  # VERSION AS OF the INSERT's snapshot
    assert out["snapshots"] >= 3
    assert out["tables"] == ["events", "from_py"]
    assert out["from_pyiceberg"] == [[1], [2]]

    # the same tables, read back by PyIceberg over REST and by the lakehouse's own catalog
    events = cat.load_table("sparkns.events")
    got = events.scan().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == [1, 3, 4] and got.column("kind").to_pylist() == ["a", "C", "d"]
    first = events.scan(snapshot_id=out["first_snapshot"]).to_arrow()
    assert sorted(first.column("id").to_pylist()) == [1, 2, 3]
    own = load_catalog("own", **{"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog",
                                 "lakehouse": served.lakehouse, "audit": "false"})
    assert sorted(own.load_table("sparkns.events").scan().to_arrow().column("id").to_pylist()) == [1, 3, 4]
    assert sorted(own.load_table("sparkns.from_py").scan().to_arrow().column("id").to_pylist()) == [1, 2, 100]

    described = subprocess.run([TLAKE, "--lakehouse", served.lakehouse, "table", "describe", "sparkns.events",
                                "--json"], capture_output=True, text=True, timeout=120)
    assert described.returncode == 0, described.stderr
    assert events.metadata_location in described.stdout
    assert served.token not in served.output()
