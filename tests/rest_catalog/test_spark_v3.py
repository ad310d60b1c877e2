"""Format v3 through the catalog server, checked against Spark 4.1 with Iceberg 1.12's runtime
(`.venv-spark41`, `make spark41`): Spark creates and writes a v3 table (the server applies the
row lineage: ``next-row-id``, a snapshot's ``first-row-id`` and ``added-rows``) and reads its row
ids back; a column the server added with ``initial-default`` reads as its default in old rows."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import requests

from tests.rest_catalog.server import Server, new_lakehouse, start

ROOT = Path(__file__).resolve().parents[2]
SPARK_PY = ROOT / ".venv-spark41" / "bin" / "python"
JAR = ROOT / "build" / "iceberg-spark41" / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
JOB = Path(__file__).with_name("spark_v3_job.py")

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Server:
    base = tmp_path_factory.mktemp("v3")
    srv = start(new_lakehouse(base / "lh", audit=False), base, audit=False)
    yield srv
    srv.stop()


def spark(srv: Server, ns: str, step: str) -> dict:
    env = {**os.environ, "TLAKE_CATALOG_TOKEN": srv.token}
    env.pop("PYTHONPATH", None)
    r = subprocess.run([str(SPARK_PY), str(JOB), str(JAR), srv.url, ns, step], capture_output=True, text=True,
                       timeout=420, env=env)
    result = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert r.returncode == 0 and result, f"the Spark job failed ({r.returncode}): {r.stderr[-4000:]}"
    return json.loads(result[-1][len("RESULT "):])


def test_spark_writes_v3_row_lineage_and_reads_default_values(served):
    missing = [str(p) for p in (SPARK_PY, JAR) if not p.exists()]
    assert not missing, f"the Spark 4.1 environment is not built (run `make spark41`): missing {missing}"
    auth = {"Authorization": f"Bearer {served.token}"}
    ns, tables = "v3", f"{served.url}/v1/namespaces/v3/tables"
    assert requests.post(f"{served.url}/v1/namespaces", json={"namespace": [ns]}, headers=auth, timeout=30).ok
    r = requests.post(tables, headers=auth, timeout=30, json={
        "name": "defaults", "properties": {"format-version": "3"},
        "schema": {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}})
    assert r.status_code == 200, r.text

    out = spark(served, ns, "write")
    assert out["format"] == [["format-version", "3"]]
    # (id, kind, _row_id, _last_updated_sequence_number): ids from each snapshot's first-row-id; the
    # UPDATE keeps row 2's id and moves its sequence number
    assert out["lineage"] == [[1, "a", 0, 1], [2, "B", 1, 3], [3, "c", 2, 1], [4, "d", 3, 2], [5, "e", 4, 2]]
    md = requests.get(f"{tables}/lineage", headers=auth, timeout=30).json()["metadata"]
    assert [(s["first-row-id"], s["added-rows"]) for s in md["snapshots"]] == [(0, 3), (3, 2), (5, 3)]
    assert md["next-row-id"] == 8

    r = requests.post(f"{tables}/defaults", headers=auth, timeout=30, json={"requirements": [], "updates": [
        {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False},
            {"id": 2, "name": "c", "type": "int", "required": False, "initial-default": 12, "write-default": 10}]}},
        {"action": "set-current-schema", "schema-id": -1}]})
    assert r.status_code == 200, r.text
    assert spark(served, ns, "read")["defaults"] == [[1, 12], [2, 12]]
