"""The basic lakehouse operations on S3 (the local moto server, with If-None-Match)."""

from __future__ import annotations

import pytest

from tests.format import oracle
from trinitylake.errors import (
    AlreadyExistsError,
    CorruptNodeError,
    LakehouseNotFoundError,
    ObjectNotFoundError,
    TransactionConflictError,
    VersionNotFoundError,
)
from trinitylake.format.paths import LAKEHOUSE_DEF_RE
from trinitylake.lakehouse import Lakehouse

pytestmark = pytest.mark.s3


@pytest.fixture
def s3_lh(s3_bucket, s3_storage_options):
    uri = s3_bucket + "/warehouse/lh"
    return Lakehouse.create(uri, storage_options=s3_storage_options, order=4, node_max_bytes=4096, audit=False)


def _open(lh):
    return Lakehouse.open(lh.uri, storage_options=lh.storage.options, audit=False)


def test_basic_operations_and_layout(s3_lh):
    lh = s3_lh
    assert lh.create_namespace("sales", {"owner": "me"}) == 1
    for i in range(12):
        lh.create_table("sales", f"t{i:02d}", properties={"i": str(i)})
    txn = lh.begin()
    txn.alter_table("sales", "t01", set_properties={"x": "y"}, metadata_location="s3://data/m1.json")
    txn.drop_table("sales", "t02")
    txn.create_namespace("日本")
    assert txn.commit() == 14
    fresh = _open(lh)
    assert fresh.latest_version() == 14
    v = fresh.view()
    assert v.list_namespaces() == ["sales", "日本"]
    assert v.list_tables("sales") == [f"t{i:02d}" for i in range(12) if i != 2]
    d = v.describe_table("sales", "t01")
    assert d["properties"] == {"i": "1", "x": "y"} and d["metadata_location"] == "s3://data/m1.json"
    assert fresh.view(version=5).list_tables("sales") == ["t00", "t01", "t02", "t03"]
    assert fresh.load_root(14).node.children, "expected a multi-level tree"
    # Every object is a root, a definition, the hint or an oracle-matching hash-prefixed path.
    files = [f.path for f in fresh.storage.list("")]
    c = oracle.classify_tree(files)
    assert not c["bad_hash"]
    assert all(f == "_latest_hint.txt" or LAKEHOUSE_DEF_RE.match(f) for f in c["other"]), c["other"]
    assert sorted(oracle.root_version(r) for r in c["roots"]) == list(range(15))
    assert fresh.storage.read("_latest_hint.txt") == b"14"


def test_errors_rollback_and_discovery(s3_lh, s3_bucket, s3_storage_options):
    lh = s3_lh
    lh.create_namespace("ns")
    lh.create_table("ns", "a")
    with pytest.raises(AlreadyExistsError):
        lh.create_table("ns", "a")
    with pytest.raises(ObjectNotFoundError):
        lh.drop_table("ns", "b")
    with pytest.raises(AlreadyExistsError):
        Lakehouse.create(lh.uri, storage_options=s3_storage_options, audit=False)
    with pytest.raises(LakehouseNotFoundError):
        Lakehouse.open(s3_bucket + "/nothing/here", storage_options=s3_storage_options, audit=False)
    assert lh.latest_version() == 2
    # Concurrent transactions: rebase on disjoint keys, conflict on the same key.
    t1, t2, t3 = lh.begin(), lh.begin(), lh.begin()
    t1.create_table("ns", "b")
    t2.create_table("ns", "c")
    t3.create_table("ns", "b")
    assert t1.commit() == 3 and t2.commit() == 4
    with pytest.raises(TransactionConflictError):
        t3.commit()
    # Rollback and a garbage hint.
    assert lh.rollback(2) == 5
    lh.storage.write("_latest_hint.txt", b"not a number")
    fresh = _open(lh)
    assert fresh.latest_version() == 5
    assert fresh.view().list_tables("ns") == ["a"]
    assert fresh.versions()[-1]["rollback_from_version"] == 4
    # Old roots deleted by hand: discovery lists root files.
    fresh.storage.delete([oracle.root_name(v) for v in range(3)] + ["_latest_hint.txt"])
    again = _open(lh)
    assert again.latest_version() == 5 and again.oldest_version() == 3
    with pytest.raises(VersionNotFoundError, match="oldest available version is 3"):
        again.view(version=1)
    assert again.create_table("ns", "z") == 6


def test_corrupt_node_on_s3_names_the_object(s3_lh):
    lh = s3_lh
    lh.create_namespace("ns")
    lh.storage.write(oracle.root_name(1), b"garbage")
    with pytest.raises(CorruptNodeError, match=oracle.root_name(1)):
        _open(lh).view()
