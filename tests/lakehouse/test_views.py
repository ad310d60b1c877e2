"""Views as objects of the tree (ViewDef, schema 3): create, alter, rename, drop, list, exists
and load in a version, time travel, and a table and a view never sharing a name."""

from __future__ import annotations

import pytest

from trinitylake.errors import AlreadyExistsError, ObjectNotFoundError, TransactionConflictError
from trinitylake.format import definitions, keys
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
