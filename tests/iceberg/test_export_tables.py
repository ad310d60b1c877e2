"""Exports that carry the tables: the exported lakehouse reads alone, the source deleted, with
the source's rows and snapshot history, and no exported file names the source."""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from tests.iceberg.conftest import SCHEMA, ids, open_catalog, rows
from trinitylake.config import load_job_config
from trinitylake.errors import ValidationError
from trinitylake.iceberg.avro_rewrite import read_records, rewrite_avro
from trinitylake.lakehouse import Lakehouse
from trinitylake.runs.results import JobResult

REGIONS = pa.schema([("id", pa.int64()), ("region", pa.string())])


def export(lh, target: str, name: str, **kw) -> JobResult:
    from trinitylake.jobs.export.job import run_export
    from trinitylake.spark.execution import Execution

    overrides = {"lakehouse": lh.uri, "name": name, "target": target, "with_tables": True, "batch_size": 8, **kw}
    cfg = load_job_config("export", overrides=overrides, env={})
    result = JobResult(job="export", run_id=cfg.run_id, lakehouse=lh.uri)
    record: dict = {}
    result.details["execution"] = record
    return run_export(Execution("local", record=record), lh, cfg, result)


def snapshot_ids(table) -> dict[int, list[int]]:
    """The rows (ids) each snapshot of `table` reads."""
    return {s.snapshot_id: sorted(table.scan(snapshot_id=s.snapshot_id).to_arrow().column("id").to_pylist())
            for s in table.metadata.snapshots}


def history(table) -> list[tuple]:
    m = table.metadata
    return [(s.snapshot_id, s.parent_snapshot_id, s.sequence_number, s.timestamp_ms, s.summary.operation)
            for s in m.snapshots] + [("current", m.current_snapshot_id, str(m.table_uuid))]


def build(catalog, tmp_path) -> None:
    catalog.create_namespace("sales")
    orders = catalog.create_table("sales.orders", schema=SCHEMA)
    orders.append(rows([1, 2, 3]))
    orders.append(rows([4, 5]))
    orders.delete("id == 2")  # a snapshot whose manifests hold deleted entries
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
    ice = Schema(NestedField(1, "id", LongType()), NestedField(2, "region", StringType()))
    regions = catalog.create_table("sales.regions", schema=ice, partition_spec=spec)
    regions.append(pa.table({"id": [1, 2, 3], "region": ["eu", "us", "eu"]}, schema=REGIONS))
    regions.append(pa.table({"id": [4], "region": ["ap"]}, schema=REGIONS))
    catalog.create_namespace("empty_ns")
    # A table whose files live outside the lakehouse's storage: left as a pointer.
    elsewhere = open_catalog(catalog.lakehouse.uri, warehouse="file://" + str(tmp_path / "elsewhere"))
    elsewhere.create_table("sales.outside", schema=SCHEMA).append(rows([42]))


def test_export_with_tables_reads_alone_with_equal_rows_and_history(catalog, lakehouse, tmp_path):
    build(catalog, tmp_path)
    src_dir = str(tmp_path / "src")
    expected = {n: (ids(catalog.load_table(f"sales.{n}")), history(catalog.load_table(f"sales.{n}")),
                    snapshot_ids(catalog.load_table(f"sales.{n}"))) for n in ("orders", "regions")}
    # Every snapshot reads its own rows (the history differs), so a snapshot exported with another's
    # files, or with none, shows below.
    assert len({str(v) for v in expected["orders"][2].values()}) == 3
    target = str(tmp_path / "dr")
    res = export(lakehouse, target, "dr1")
    tables = res.details["tables"]
    assert (tables["tables"], tables["copied_tables"]) == (3, 2)
    assert len(tables["left_as_pointers"]) == 1 and "sales.outside" in tables["left_as_pointers"][0]
    assert tables["snapshots"] == 5 and tables["copied"] == tables["files"] > 0

    shutil.move(src_dir, str(tmp_path / "gone"))
    named = [os.path.join(d, f) for d, _, fs in os.walk(target) for f in fs
             if src_dir.encode() in open(os.path.join(d, f), "rb").read()]
    assert named == []

    dr = open_catalog(target)
    for n, (want_ids, want_history, want_snapshots) in expected.items():
        t = dr.load_table(f"sales.{n}")
        assert t.metadata_location.startswith("file://" + target + "/warehouse/")
        assert ids(t) == want_ids
        assert history(t) == want_history
        assert snapshot_ids(t) == want_snapshots  # every retained snapshot reads its rows from the target
    assert sorted(dr.load_table("sales.regions").scan(row_filter="region == 'eu'").to_arrow()
                  .column("id").to_pylist()) == [1, 3]
    assert ids(dr.load_table("sales.outside")) == [42]  # still read where it lives
    assert dr.list_namespaces() == [("empty_ns",), ("sales",)]
    dr.load_table("sales.orders").append(rows([9]))  # the exported lakehouse takes commits
    assert ids(dr.load_table("sales.orders")) == [1, 3, 4, 5, 9]


def test_export_of_the_current_snapshot_only(catalog, lakehouse, tmp_path):
    build(catalog, tmp_path)
    want = ids(catalog.load_table("sales.orders"))
    target = str(tmp_path / "dr")
    res = export(lakehouse, target, "dr1", table_snapshots="current")
    assert res.details["tables"]["snapshots"] == 2
    t = open_catalog(target).load_table("sales.orders")
    assert len(t.metadata.snapshots) == 1 and ids(t) == want


def test_export_with_tables_is_rerunnable_and_full_only(catalog, lakehouse, tmp_path):
    build(catalog, tmp_path)
    target = str(tmp_path / "dr")
    export(lakehouse, target, "dr1")
    again = export(lakehouse, target, "dr1", version=lakehouse.latest_version() - 1)  # recorded: nothing to do
    assert again.details["recorded"] is False
    assert again.details["tables"]["copied"] == 0 and again.details["tables"]["skipped"] > 0
    with pytest.raises(ValidationError, match="full export"):
        export(lakehouse, str(tmp_path / "dr2"), "dr2", mode="minimal")


def test_avro_rewrite_keeps_everything_but_the_paths(catalog, lakehouse, tmp_path):
    build(catalog, tmp_path)
    t = catalog.load_table("sales.regions")
    ml = t.metadata.current_snapshot().manifest_list
    data = t.io.new_input(ml).open().read()
    meta, recs = read_records(data)
    out = rewrite_avro(data, lambda r: {**r, "manifest_path": r["manifest_path"].replace("/src/", "/dst/")})
    meta2, recs2 = read_records(out)
    assert meta2 == meta
    assert [r["manifest_path"] for r in recs2] == [r["manifest_path"].replace("/src/", "/dst/") for r in recs]
    assert [{k: v for k, v in r.items() if k != "manifest_path"} for r in recs2] == \
        [{k: v for k, v in r.items() if k != "manifest_path"} for r in recs]
    assert rewrite_avro(data, lambda r: r) == rewrite_avro(data, lambda r: r)  # deterministic


def test_export_cli_with_tables(catalog, lakehouse, tmp_path):
    from click.testing import CliRunner

    from trinitylake.cli import cli

    build(catalog, tmp_path)
    exported_version = lakehouse.latest_version()  # the export then records itself in the source
    target = str(tmp_path / "dr")
    r = CliRunner().invoke(cli, ["--lakehouse", lakehouse.uri, "--no-audit", "export", "--name", "dr1", "--target",
                                 target, "--with-tables"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "tables: 2 of 3 copied" in r.output and "table left as a pointer: sales.outside" in r.output
    assert ids(open_catalog(target).load_table("sales.orders")) == ids(catalog.load_table("sales.orders"))
    # The target is a lakehouse of its own at the exported version, with the source's namespaces and tables.
    exported, source = Lakehouse.open(target, audit=False), Lakehouse.open(lakehouse.uri, audit=False)
    assert exported.latest_version() == exported_version
    assert [(ns, exported.view().list_tables(ns)) for ns in exported.view().list_namespaces()] == \
        [(ns, source.view().list_tables(ns)) for ns in source.view().list_namespaces()] == \
        [("empty_ns", []), ("sales", ["orders", "outside", "regions"])]
