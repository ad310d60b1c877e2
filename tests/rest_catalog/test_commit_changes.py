"""The catalog-level commit the server maps the REST protocol onto: `TrinityLakeCatalog
.commit_changes` and `MultiTableTransaction.stage_changes` (requirements are the only check;
``assert-create`` creates), on a lakehouse on local files."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSortOrderUpdate,
    AssertCreate,
    AssertRefSnapshotId,
    AssignUUIDUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
    SetLocationUpdate,
    SetPropertiesUpdate,
    UpgradeFormatVersionUpdate,
)

from trinitylake.iceberg import ReadOnlyCatalogError
from trinitylake.lakehouse import Lakehouse

SCHEMA = pa.schema([pa.field("id", pa.int64())])


@pytest.fixture
def cat(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    c = load_catalog("t", **{"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog", "lakehouse": lh.uri,
                             "audit": "false"})
    c.create_namespace("s")
    return c


def test_requirements_are_the_check_not_the_loaded_table(cat):
    t = cat.create_table("s.t", schema=SCHEMA)
    t.append(pa.table({"id": [1]}, schema=SCHEMA))
    snap = cat.load_table("s.t").metadata.current_snapshot_id
    cat.commit_changes(("s", "t"), (), (SetPropertiesUpdate(updates={"a": "1"}),))  # no requirement: applies
    # a property change since `snap` does not fail a commit that only requires main at `snap`
    resp = cat.commit_changes(("s", "t"), (AssertRefSnapshotId(ref="main", snapshot_id=snap),),
                              (SetPropertiesUpdate(updates={"b": "2"}),))
    assert resp.metadata.properties["a"] == "1" and resp.metadata.properties["b"] == "2"
    cat.load_table("s.t").append(pa.table({"id": [2]}, schema=SCHEMA))
    with pytest.raises(CommitFailedException):
        cat.commit_changes(("s", "t"), (AssertRefSnapshotId(ref="main", snapshot_id=snap),),
                           (SetPropertiesUpdate(updates={"c": "3"}),))
    assert "c" not in cat.load_table("s.t").properties


def test_a_missing_table_is_created_only_by_assert_create_in_an_existing_namespace(cat):
    staged = cat.stage_create_table("s.new", schema=SCHEMA)
    assert not cat.table_exists("s.new")
    with pytest.raises(NoSuchTableError):
        cat.commit_changes(("s", "new"), (), (SetPropertiesUpdate(updates={"x": "1"}),))
    with pytest.raises(NoSuchNamespaceError):
        cat.commit_changes(("nope", "new"), (AssertCreate(),), ())
    md = staged.metadata
    updates = (AssignUUIDUpdate(uuid=md.table_uuid), UpgradeFormatVersionUpdate(format_version=md.format_version),
               AddSchemaUpdate(schema_=md.schema()), SetCurrentSchemaUpdate(schema_id=-1),
               AddPartitionSpecUpdate(spec=md.spec()), SetDefaultSpecUpdate(spec_id=-1),
               AddSortOrderUpdate(sort_order=md.sort_order_by_id(md.default_sort_order_id)),
               SetDefaultSortOrderUpdate(sort_order_id=-1),
               SetLocationUpdate(location=md.location), SetPropertiesUpdate(updates={"x": "1"}))
    cat.commit_changes(("s", "new"), (AssertCreate(),), updates)
    assert cat.load_table("s.new").properties["x"] == "1"
    with pytest.raises(CommitFailedException):  # it exists now
        cat.commit_changes(("s", "new"), (AssertCreate(),), updates)


def test_stage_changes_commits_several_tables_in_one_version(cat):
    for n in ("a", "b"):
        cat.create_table(("s", n), schema=SCHEMA)
    v = cat.lakehouse.latest_version()
    with cat.multi_table_transaction() as mtx:
        for n in ("a", "b"):
            mtx.stage_changes(("s", n), (), (SetPropertiesUpdate(updates={"batch": "1"}),))
    assert cat.lakehouse.latest_version() == v + 1
    assert all(cat.load_table(("s", n)).properties["batch"] == "1" for n in ("a", "b"))
    with pytest.raises(ReadOnlyCatalogError):
        cat.at_version(v).commit_changes(("s", "a"), (), (SetPropertiesUpdate(updates={"batch": "2"}),))
