"""Definition files kept by the handle that wrote or read them, and `Transaction.alter_tables`
(the catalog server's group commit: its tables' definitions written in flight together)."""

from __future__ import annotations

import os

import pytest

from trinitylake.errors import ObjectNotFoundError
from trinitylake.lakehouse import Lakehouse


def _tables(lh: Lakehouse, *names: str) -> None:
    txn = lh.begin()
    txn.create_namespace("n")
    for t in names:
        txn.create_table("n", t, metadata_location=f"s3://b/{t}/v0.metadata.json", table_type="managed")
    txn.commit()


def test_alter_tables_updates_each_definition_with_its_previous_location(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"))
    _tables(lh, "a", "b", "c")
    txn = lh.begin()
    txn.alter_tables([("n", "a", "s3://b/a/v1.metadata.json"), ("n", "b", "s3://b/b/v1.metadata.json")])
    assert txn.ops == ["alter table n.a", "alter table n.b"]
    version = txn.commit()
    fresh = Lakehouse.open(lh.uri).view(version)  # another handle: read from the files
    for t in ("a", "b"):
        d = fresh.load_table("n", t)
        assert d.format_properties["metadata_location"] == f"s3://b/{t}/v1.metadata.json"
        assert d.format_properties["previous_metadata_location"] == f"s3://b/{t}/v0.metadata.json"
    assert fresh.load_table("n", "c").format_properties["metadata_location"] == "s3://b/c/v0.metadata.json"


def test_alter_tables_of_a_missing_table_writes_nothing(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"))
    _tables(lh, "a")
    txn = lh.begin()
    with pytest.raises(ObjectNotFoundError):
        txn.alter_tables([("n", "a", "s3://b/a/v1.metadata.json"), ("n", "missing", "s3://b/x.json")])
    assert txn.writes == {} and txn.staged_files == []


def test_a_handle_keeps_the_definitions_it_wrote_and_read(tmp_path):
    """Definition files never change once created: the handle that wrote one reads it back
    without a read, and one that read it once does not read it again."""
    lh = Lakehouse.create(str(tmp_path / "lh"))
    _tables(lh, "a")
    path = lh.view()._table_path("n", "a")
    uri = lh.storage.uri(path)
    assert lh.def_file(uri) is not None  # kept when written
    reader = Lakehouse.open(lh.uri)
    assert reader.def_file(uri) is None
    first = reader.view().load_table("n", "a")
    assert reader.def_file(uri) is not None
    os.remove(tmp_path / "lh" / path)
    assert reader.view().load_table("n", "a") == first  # kept: no read of the (now gone) file
    with pytest.raises(ObjectNotFoundError, match="is missing"):
        Lakehouse.open(lh.uri).view().load_table("n", "a")  # a new handle reads, and names the file
