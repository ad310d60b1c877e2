"""Views as objects of the tree (ViewDef, schema 3): create, alter, rename, drop, list, exists
and load in a version, time travel, and a table and a view never sharing a name."""

from __future__ import annotations

import pytest

from trinitylake.errors import AlreadyExistsError, ObjectNotFoundError, TransactionConflictError
from trinitylake.format import definitions, keys
from trinitylake.lakehouse import Lakehouse
from trinitylake.lakehouse.view import VIEW_METADATA_LOCATION, VIEW_PREVIOUS_METADATA_LOCATION


@pytest.fixture
def lh(make_lakehouse):
    lh = make_lakehouse()
    lh.create_namespace("ns")
    lh.create_namespace("other")
    return lh


def test_view_lifecycle_and_time_travel(lh):
    v_created = lh.create_view("ns", "v", metadata_location="file:///w/ns/v/metadata/00000-a.metadata.json")
    assert lh.view().list_views("ns") == ["v"]
    assert lh.view().list_tables("ns") == []  # a view is no table
    assert lh.view().view_exists("ns", "v") and not lh.view().table_exists("ns", "v")
    d = lh.view().load_view("ns", "v")
    assert isinstance(d, definitions.ViewDef)
    assert d.properties[VIEW_METADATA_LOCATION].endswith("00000-a.metadata.json")
    # the key is schema 3's
    assert any(k.startswith(keys.VIEW_PREFIX) for k, _ in lh.view().all_items())

    x = lh.begin()
    x.alter_view("ns", "v", metadata_location="file:///w/ns/v/metadata/00001-b.metadata.json")
    v_altered = x.commit()
    d2 = lh.view().load_view("ns", "v")
    assert d2.id == d.id
    assert d2.properties[VIEW_METADATA_LOCATION].endswith("00001-b.metadata.json")
    assert d2.properties[VIEW_PREVIOUS_METADATA_LOCATION].endswith("00000-a.metadata.json")

    x = lh.begin()
    x.rename_view("ns", "v", "other", "w")
    v_renamed = x.commit()
    assert lh.view().list_views("ns") == [] and lh.view().list_views("other") == ["w"]
    assert lh.view().load_view("other", "w").id == d.id  # the same definition, moved

    v_dropped = lh.drop_view("other", "w")
    assert lh.view().list_views("other") == []
    assert lh.describe_changes(v_dropped) == ["drop view other.w"]

    # every version reads the view as it was then
    assert lh.view(version=v_created).load_view("ns", "v").properties[VIEW_METADATA_LOCATION].endswith("00000-a.metadata.json")
    assert lh.view(version=v_altered).describe_view("ns", "v")["metadata_location"].endswith("00001-b.metadata.json")
    assert lh.view(version=v_renamed).view_exists("other", "w")
    assert not lh.view(version=v_renamed).view_exists("ns", "v")
    with pytest.raises(ObjectNotFoundError, match=r"view ns\.v does not exist"):
        lh.view().load_view("ns", "v")


def test_errors_name_the_object(lh):
    with pytest.raises(ObjectNotFoundError, match="namespace 'nope' does not exist"):
        lh.create_view("nope", "v", metadata_location="file:///m.json")
    with pytest.raises(ObjectNotFoundError, match="namespace 'nope' does not exist"):
        lh.view().list_views("nope")
    with pytest.raises(ObjectNotFoundError, match=r"view ns\.v does not exist"):
        lh.drop_view("ns", "v")
    lh.create_view("ns", "v", metadata_location="file:///m.json")
    with pytest.raises(AlreadyExistsError, match=r"view ns\.v already exists"):
        lh.create_view("ns", "v", metadata_location="file:///m.json")
    x = lh.begin()
    with pytest.raises(ObjectNotFoundError, match="namespace 'nope' does not exist"):
        x.rename_view("ns", "v", "nope", "v")
    x.rollback()


def test_a_table_and_a_view_never_share_a_name(lh):
    lh.create_table("ns", "t")
    lh.create_view("ns", "v", metadata_location="file:///m.json")
    with pytest.raises(AlreadyExistsError, match=r"^Table with same name already exists: ns\.t$"):
        lh.create_view("ns", "t", metadata_location="file:///m.json")
    with pytest.raises(AlreadyExistsError, match=r"^View with same name already exists: ns\.v$"):
        lh.create_table("ns", "v")
    x = lh.begin()
    with pytest.raises(AlreadyExistsError, match=r"Table with same name already exists: ns\.t"):
        x.rename_view("ns", "v", "ns", "t")
    x.rollback()


def test_concurrent_table_and_view_of_one_name_conflict(lh):
    """Each transaction saw the name free in its own snapshot: the second to commit conflicts."""
    a, b = lh.begin(), lh.begin()
    a.create_table("ns", "x")
    b.create_view("ns", "x", metadata_location="file:///m.json")
    a.commit()
    with pytest.raises(TransactionConflictError, match=r"created concurrently"):
        b.commit()
    assert lh.view().table_exists("ns", "x") and not lh.view().view_exists("ns", "x")


def test_drop_namespace_cascade_drops_views(lh):
    lh.create_view("ns", "v", metadata_location="file:///m.json")
    with pytest.raises(Exception, match="not empty"):
        lh.drop_namespace("ns")
    lh.drop_namespace("ns", cascade=True)
    assert not lh.view().namespace_exists("ns")


# ---- views through the lakehouse's Iceberg catalog: exports, the walk --------------------------------
SCHEMA_JSON = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def _version(sql: str) -> dict:
    return {"version-id": 1, "schema-id": 0, "timestamp-ms": 1, "summary": {}, "default-namespace": ["sales"],
            "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}]}


def _catalog_with_a_view(tmp_path):
    from tests.iceberg.conftest import SCHEMA, open_catalog, rows
    from trinitylake.iceberg import views

    lakehouse = Lakehouse.create(str(tmp_path / "src" / "lh"), audit=False)
    catalog = open_catalog(lakehouse.uri)
    catalog.create_namespace("sales")
    catalog.create_table("sales.orders", schema=SCHEMA).append(rows([1, 2]))
    first = views.create_view(catalog, "sales", "big", SCHEMA_JSON, _version("select * from sales.orders"))
    uid = first.metadata["view-uuid"]
    views.replace_view(catalog, "sales", "big", [{"type": "assert-view-uuid", "uuid": uid}], [
        {"action": "add-view-version", "view-version": {**_version("select * from sales.orders where id > 1"),
                                                        "version-id": 2}},
        {"action": "set-current-view-version", "view-version-id": -1}])
    return lakehouse, catalog, first


def test_export_with_tables_carries_the_views(tmp_path):
    import os
    import shutil

    from tests.iceberg.conftest import open_catalog
    from tests.iceberg.test_export_tables import export
    from trinitylake.iceberg import views

    lakehouse, catalog, first = _catalog_with_a_view(tmp_path)
    want = views.load_view(catalog, "sales", "big").metadata
    target = str(tmp_path / "dr")
    res = export(lakehouse, target, "dr1")
    assert (res.details["tables"]["views"], res.details["tables"]["copied_views"]) == (1, 1)
    src_dir = str(tmp_path / "src")
    shutil.move(src_dir, str(tmp_path / "gone"))
    named = [os.path.join(d, f) for d, _, fs in os.walk(target) for f in fs
             if src_dir.encode() in open(os.path.join(d, f), "rb").read()]
    assert named == []  # neither the ViewDef nor the view metadata names the source

    dr = open_catalog(target)
    got = views.load_view(dr, "sales", "big")
    assert got.metadata_location.startswith("file://" + target + "/")
    assert got.metadata["location"].startswith("file://" + target + "/")
    assert got.metadata["versions"] == want["versions"] and got.metadata["view-uuid"] == want["view-uuid"]
    d = dr.lakehouse_view().load_view("sales", "big")
    assert d.properties[VIEW_PREVIOUS_METADATA_LOCATION].startswith("file://" + target + "/")
    assert os.path.exists(d.properties[VIEW_PREVIOUS_METADATA_LOCATION][len("file://"):])
    assert dr.load_view(("sales", "big")).metadata.current_version_id == 2  # PyIceberg reads it too


def test_pinned_catalog_reads_views_as_of_its_version(tmp_path):
    from trinitylake.iceberg import views

    lakehouse, catalog, first = _catalog_with_a_view(tmp_path)
    before = lakehouse.latest_version() - 1  # the version the view was created in
    old = views.load_view(catalog.at_version(before), "sales", "big")
    assert old.metadata_location == first.metadata_location and old.metadata["current-version-id"] == 1
    views.drop_view(catalog, "sales", "big")
    assert views.load_view(catalog.at_version(before), "sales", "big").metadata["current-version-id"] == 1
    with pytest.raises(Exception, match="read-only"):
        views.drop_view(catalog.at_version(before), "sales", "big")


def test_walk_counts_view_pointers(tmp_path):
    from trinitylake.config import load_job_config
    from trinitylake.jobs.runner import run_job

    lakehouse, _catalog, _first = _catalog_with_a_view(tmp_path)
    cfg = load_job_config("walk", overrides={"lakehouse": lakehouse.uri, "execution": "local"}, env={})
    res = run_job("walk", cfg, audit=False)
    assert res.status == "succeeded"
    assert (res.counts["view_pointers"], res.counts["view_pointers_outside"]) == (1, 0)
    assert res.counts["table_pointers_iceberg"] == 1 and res.details["table_pointers"]["views"] == 1


def test_orphans_keep_every_retained_versions_view_metadata(tmp_path):
    """A view whose files live inside a table's location: the metadata files that retained
    versions point at are live, a stray file beside them is an orphan."""
    import json
    import os
    import time as _time

    from tests.iceberg.conftest import SCHEMA, open_catalog, rows
    from trinitylake.iceberg import views
    from trinitylake.runs.results import JobResult
    from trinitylake.tables_maintenance.orphans import OrphanOptions, remove_orphans

    lakehouse = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    catalog = open_catalog(lakehouse.uri)
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.orders", schema=SCHEMA)
    table.append(rows([1]))
    inside = table.metadata.location.rstrip("/") + "/views/big"
    first = views.create_view(catalog, "sales", "big", SCHEMA_JSON, _version("select 1"), location=inside)
    second = views.replace_view(catalog, "sales", "big", [{"type": "assert-view-uuid", "uuid": first.metadata["view-uuid"]}], [
        {"action": "add-view-version", "view-version": {**_version("select 2"), "version-id": 2}},
        {"action": "set-current-view-version", "view-version-id": -1}])
    stray = os.path.join(inside[len("file://"):], "metadata", "stray.metadata.json")
    with open(stray, "w") as f:
        f.write("{}")
    now = int(_time.time() * 1000) + 10 * 86400_000  # every file older than the age floor
    res = remove_orphans(lakehouse, OrphanOptions(dry_run=True, reference_ms=now),
                         JobResult("tables remove-orphans", "o1", lakehouse.uri))
    plan = json.loads(lakehouse.storage.read(lakehouse.storage.relative(res.plan_location) or res.plan_location))
    deleted = {u[len("file://"):] if u.startswith("file://") else u for u in plan["delete"]}
    assert stray in deleted
    for loaded in (first, second):
        assert loaded.metadata_location[len("file://"):] not in deleted


def test_the_lakehouse_catalog_is_a_pyiceberg_view_catalog(tmp_path):
    from pyiceberg.exceptions import NoSuchViewError, TableAlreadyExistsError
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField
    from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

    from tests.iceberg.conftest import SCHEMA, open_catalog

    lakehouse = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    cat = open_catalog(lakehouse.uri)
    cat.create_namespace("s")
    vv = ViewVersion(version_id=1, schema_id=0, default_namespace=("s",), representations=[
        ViewRepresentation(SQLViewRepresentation(type="sql", sql="select 1 as id", dialect="spark"))])
    v = cat.create_view(("s", "v"), Schema(NestedField(1, "id", LongType(), required=False)), vv)
    assert v.metadata.current_version_id == 1 and v.metadata.location.endswith("/s.db/v")
    assert cat.list_views("s") == [("s", "v")] and cat.view_exists("s.v") and not cat.table_exists("s.v")
    assert cat.load_view("s.v").metadata.view_uuid == v.metadata.view_uuid
    with pytest.raises(TableAlreadyExistsError, match=r"^View with same name already exists: s\.v$"):
        cat.create_table("s.v", schema=SCHEMA)
    before = lakehouse.latest_version()
    cat.drop_view("s.v")
    assert not cat.view_exists("s.v")
    with pytest.raises(NoSuchViewError, match=r"^View does not exist: s\.v$"):
        cat.load_view("s.v")
    assert cat.at_version(before).load_view("s.v").metadata.view_uuid == v.metadata.view_uuid
