"""Table files ride the export's copy phase (issue 31): data and delete files are copied where
the export's placement puts its copies (here forced onto Spark executors), verified, resumably
(a run killed mid table copy is finished by a re-run), with the root written last; the exported
lakehouse then reads, its source gone, the rows and snapshot history PyIceberg read from the
source before the export."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from tests.iceberg.conftest import IMPL
from trinitylake.config import load_job_config
from trinitylake.lakehouse import Lakehouse
from trinitylake.runs.results import JobResult

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVENTS = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64())])
NAMES = ("shop.events", "shop.orders", "ops.log")


def catalog_at(uri: str, name: str = "tl", **props: str):
    from pyiceberg.catalog import load_catalog

    return load_catalog(name, **{"py-catalog-impl": IMPL, "lakehouse": uri, "audit": "false", **props})


def events(lo: int, hi: int) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({"id": ids, "region": [("eu", "us", "ap")[i % 3] for i in ids],
                     "amount": [i * 0.5 for i in ids]}, schema=EVENTS)


def build(cat) -> None:
    """Three tables, several data files each: a partitioned one (a file per region per append),
    one with a delete (a rewritten file, a snapshot whose manifests hold deleted entries)."""
    cat.create_namespace("shop")
    cat.create_namespace("ops")
    ice = Schema(NestedField(1, "id", LongType()), NestedField(2, "region", StringType()),
                 NestedField(3, "amount", DoubleType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
    ev = cat.create_table("shop.events", schema=ice, partition_spec=spec)
    for k in range(3):
        ev.append(events(k * 30, k * 30 + 30))
    orders = cat.create_table("shop.orders", schema=EVENTS)
    for k in range(4):
        orders.append(events(1000 + k * 10, 1010 + k * 10))
    orders.delete("id == 1012")
    log = cat.create_table("ops.log", schema=EVENTS)
    log.append(events(5000, 5005))
    log.append(events(5005, 5007))


def snapshot_rows(table) -> dict:
    """Every snapshot's rows (sorted) and the history, as PyIceberg reads them."""
    m = table.metadata
    rows = {s.snapshot_id: table.scan(snapshot_id=s.snapshot_id).to_arrow().sort_by("id").to_pylist()
            for s in m.snapshots}
    history = [(s.snapshot_id, s.parent_snapshot_id, s.sequence_number, s.timestamp_ms, s.summary.operation)
               for s in m.snapshots]
    return {"current": table.scan().to_arrow().sort_by("id").to_pylist(), "snapshots": rows, "history": history,
            "current_id": m.current_snapshot_id, "uuid": str(m.table_uuid)}


def read_all(cat) -> dict:
    return {n: snapshot_rows(cat.load_table(n)) for n in NAMES}


def run(lh, target: str, name: str, execution: str, spark=None, target_storage_options=None, **kw) -> JobResult:
    from trinitylake.jobs.export.job import run_export
    from trinitylake.spark.execution import Execution

    overrides = {"lakehouse": lh.uri, "name": name, "target": target, "with_tables": True, "batch_size": 8, **kw}
    cfg = load_job_config("export", overrides=overrides, env={})
    result = JobResult(job="export", run_id=cfg.run_id, lakehouse=lh.uri)
    record: dict = {}
    result.details["execution"] = record
    ex = Execution(execution, spark=spark, record=record)
    return run_export(ex, lh, cfg, result, target_storage_options=target_storage_options)


def root_files(target_dir: str) -> list[str]:
    return [f for f in os.listdir(target_dir) if re.fullmatch(r"_[01]{64}\.arrow", f)] \
        if os.path.isdir(target_dir) else []


@pytest.mark.spark
def test_table_files_are_copied_on_the_executors_and_read_alone(spark, tmp_path):
    src = tmp_path / "src"
    lh = Lakehouse.create(str(src / "lh"), audit=False)
    cat = catalog_at(lh.uri)
    build(cat)
    want = read_all(cat)  # PyIceberg's reads of the source, before the export
    target = str(tmp_path / "dr")

    res = run(lh, target, "dr1", "distributed", spark=spark)
    ex = res.details["execution"]
    assert ex["export.table_copy"]["where"] == "distributed" and res.details["tables"]["where"] == "executors"
    assert ex["export.table_plan"]["where"] == ex["export.table_metadata"]["where"] == "local"
    t = res.details["tables"]
    assert t["copied_tables"] == 3 and t["data_files"] == ex["export.table_copy"]["items"] >= 3 * 3 + 4 + 2
    assert res.counts["table_data_files"] == t["data_files"] and res.counts["table_files_copied"] == t["files"]
    assert t["verified"] == t["files"] and res.bytes["table_data"] > 0
    assert {"tables_plan", "tables_copy", "tables_metadata"} <= set(res.seconds)
    # The table parts sit beside the export's own, each finished part with its result manifest.
    exdir = os.path.join(target, "_export", "dr1")
    parts = sorted(f for f in os.listdir(os.path.join(exdir, "plan")) if f.startswith("tables-"))
    assert len(parts) == t["data_parts"] > 1
    assert {p.replace(".parquet", ".json") for p in parts} <= set(os.listdir(os.path.join(exdir, "copied")))

    shutil.move(str(src), str(tmp_path / "gone"))
    assert read_all(catalog_at(target, "dr")) == want


@pytest.mark.spark
@pytest.mark.s3
def test_tables_on_s3_are_exported_on_s3_and_read_with_the_source_deleted(spark, s3_server, s3_storage_options,
                                                                          monkeypatch):
    monkeypatch.setenv("TLAKE_S3_ENDPOINT_URL", s3_server.endpoint_url)
    src_bucket, dst_bucket = s3_server.create_bucket(), s3_server.create_bucket()
    io = {"s3.endpoint": s3_server.endpoint_url, "s3.access-key-id": s3_server.key,
          "s3.secret-access-key": s3_server.secret, "s3.region": s3_server.region}
    store = {f"lakehouse.storage.{k}": v for k, v in s3_storage_options.items()}
    lh = Lakehouse.create(f"s3://{src_bucket}/lh", storage_options=s3_storage_options, audit=False)
    cat = catalog_at(lh.uri, **io, **store)
    build(cat)
    want = read_all(cat)
    target = f"s3://{dst_bucket}/dr"

    res = run(lh, target, "dr1", "distributed", spark=spark, target_storage_options=s3_storage_options)
    assert res.details["execution"]["export.table_copy"]["where"] == "distributed"
    assert res.details["tables"]["copied_tables"] == 3 and res.counts["table_files_copied"] > 0

    client = s3_server.client
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=src_bucket)
            for o in page.get("Contents", [])]
    for i in range(0, len(keys), 1000):
        client.delete_objects(Bucket=src_bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})
    client.delete_bucket(Bucket=src_bucket)
    dr = catalog_at(target, "dr", **io, **store)
    assert read_all(dr) == want
    assert all(dr.load_table(n).metadata_location.startswith(f"s3://{dst_bucket}/dr/") for n in NAMES)


def test_an_export_killed_mid_table_copy_is_finished_by_a_rerun(tmp_path):
    from tests.support.faults import ENV, FaultSpec, kill_pids

    src = tmp_path / "src"
    lh = Lakehouse.create(str(src / "lh"), audit=False)
    cat = catalog_at(lh.uri)
    build(cat)
    want = read_all(cat)
    target = str(tmp_path / "dr")
    data = sorted(os.path.relpath(os.path.join(d, f), src / "lh") for d, _, fs in os.walk(src / "lh" / "warehouse")
                  for f in fs if f.endswith(".parquet") and os.sep + "data" + os.sep in os.path.join(d, f))
    assert len(data) > 10

    # The export's own process SIGKILLs itself right after creating its 6th table data file at
    # the target: mid table copy, after the export's own copy and the table plan.
    log_dir = str(tmp_path / "faults")
    kill = FaultSpec(kill_op="create_exclusive", kill_nth=6, kill_when="after", kill_paths=r"/data/[^/]+\.parquet$",
                     log_dir=log_dir)
    env = {**os.environ, ENV: kill.to_json(), "PYTHONPATH": os.pathsep.join((ROOT, os.environ.get("PYTHONPATH", "")))}
    proc = subprocess.run([sys.executable, "-m", "trinitylake", "--lakehouse", lh.uri, "--no-audit", "export",
                           "--name", "dr1", "--target", target, "--with-tables", "--execution", "local"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert len(kill_pids(log_dir)) == 1
    copied = [p for p in data if os.path.exists(os.path.join(target, p))]
    assert len(copied) >= 6, proc.stderr[-1500:]
    # Killed in the table copy: no table's metadata file (written after the copy) is there yet.
    # (Threads copying other parts may finish a few more data files before the kill lands.)
    assert not [f for _, _, fs in os.walk(os.path.join(target, "warehouse")) for f in fs
                if f.endswith(".metadata.json")]
    assert root_files(target) == []  # the root is written last: nothing exported is visible
    assert os.path.exists(os.path.join(target, "_export", "dr1", "plan", "_tables.json"))

    res = run(lh, target, "dr1", "local")
    t = res.details["tables"]
    assert res.details["resumed"] and t["resumed"]
    assert t["data_files"] == len(data) and t["skipped"] >= len(copied) and t["verified"] == t["files"]
    assert len(root_files(target)) == 1

    shutil.move(str(src), str(tmp_path / "gone"))
    assert read_all(catalog_at(target, "dr")) == want
