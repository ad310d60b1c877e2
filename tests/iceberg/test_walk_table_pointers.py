"""The walk reports the table definitions' pointers of the latest version by kind (issue 31,
part 3): counted from the definitions alone, never from the tables' metadata."""

from __future__ import annotations

import uuid

from tests.iceberg.conftest import SCHEMA, open_catalog, rows
from trinitylake.config import load_job_config
from trinitylake.format import definitions as D
from trinitylake.format.paths import table_def_path
from trinitylake.jobs.runner import run_job
from trinitylake.lakehouse import Lakehouse
from trinitylake.treewalk import table_pointers as TP


def walk(lh: Lakehouse):
    cfg = load_job_config("walk", overrides={"lakehouse": lh.uri, "execution": "local"}, env={})
    return run_job("walk", cfg, audit=False)


def build(tmp_path) -> Lakehouse:
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    cat = open_catalog(lh.uri)
    cat.create_namespace("s")
    cat.create_table("s.a", schema=SCHEMA).append(rows([1, 2]))
    cat.create_table("s.b", schema=SCHEMA)
    # Outside the lakehouse root: an Iceberg pointer, counted as outside.
    lh.create_table("s", "ext", metadata_location=f"file://{tmp_path}/elsewhere/v1.metadata.json")
    lh.create_table("s", "bare")  # a managed table with no metadata yet: no pointer
    t = lh.begin()  # a table of another format (the API creates only Iceberg ones)
    d = D.TableDef(id=str(uuid.uuid4()), table_type="EXTERNAL", table_format="DELTA",
                   format_properties={"metadata_location": f"{lh.uri}/delta/t/_delta_log"})
    t.writes[t._table_key("s", "delta")] = t._write_def(table_def_path("s", "delta"), d)
    t.ops.append("create table s.delta")
    t.commit()
    lh.drop_table("s", "b")  # older versions still hold it; the latest does not
    return lh


def test_walk_counts_table_pointers_by_kind(tmp_path):
    lh = build(tmp_path)
    res = walk(lh)
    assert res.status == "succeeded"
    assert {k: v for k, v in res.counts.items() if k.startswith("table_pointers")} == {
        "table_pointers_iceberg": 2, "table_pointers_other": 1, "table_pointers_none": 1,
        "table_pointers_outside": 1}
    det = res.details["table_pointers"]
    assert det["version"] == lh.latest_version() and det["tables"] == 4
    assert det["by_format"] == {"ICEBERG": 2, "DELTA": 1} and det["unreadable"] == 0


def test_table_pointers_read_no_table_metadata(tmp_path):
    lh = build(tmp_path)
    (tmp_path / "lh" / "warehouse").rename(tmp_path / "gone")  # every table's files gone: still counted
    counts, det = TP.table_pointer_counts(lh, lh.latest_version(), reached_definitions=10)
    assert counts["table_pointers_iceberg"] == 2 and "skipped" not in det


def test_table_pointers_skipped_past_the_limit(tmp_path, monkeypatch):
    lh = build(tmp_path)
    monkeypatch.setattr(TP, "TABLE_POINTER_DEF_LIMIT", 3)
    res = walk(lh)
    assert res.status == "succeeded" and not any(k.startswith("table_pointers") for k in res.counts)
    assert "more than 3" in res.details["table_pointers"]["skipped"]


def test_unreadable_definition_is_counted_not_fatal(tmp_path):
    lh = build(tmp_path)
    view = lh.view(lh.latest_version())
    storage, p = lh.resolve(view._table_path("s", "a"))
    storage.delete([p])
    counts, det = TP.table_pointer_counts(lh, lh.latest_version(), reached_definitions=10)
    assert det["unreadable"] == 1 and "s.a" in det["unreadable_first"][0]
    assert counts["table_pointers_iceberg"] == 1
