"""Refused operations raise typed errors that name what they are about, and leave no version."""

from __future__ import annotations

import os

import pytest

from tests.lakehouse.helpers import local_dir, local_versions, root_name
from trinitylake.errors import (
    AlreadyExistsError,
    CorruptDefinitionError,
    CorruptNodeError,
    InvalidNameError,
    LakehouseNotFoundError,
    ObjectNotFoundError,
    TransactionClosedError,
    UnsupportedVersionError,
    ValidationError,
    VersionNotFoundError,
)
from trinitylake.format import definitions as D
from trinitylake.format.node import Node, serialize
from trinitylake.lakehouse import Lakehouse


@pytest.fixture
def lh(make_lakehouse, tmp_path):
    lh = make_lakehouse(str(tmp_path / "e"))
    lh.create_namespace("ns")
    lh.create_table("ns", "t1")
    return lh


def _unchanged(lh, fn, exc, match=None):
    before = local_versions(local_dir(lh))
    with pytest.raises(exc, match=match):
        fn()
    assert local_versions(local_dir(lh)) == before
    return before


def test_unknown_lakehouse(tmp_path):
    with pytest.raises(LakehouseNotFoundError, match="nowhere"):
        Lakehouse.open(str(tmp_path / "nowhere"), audit=False)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "unrelated.txt").write_text("x")
    with pytest.raises(LakehouseNotFoundError):
        Lakehouse.open(str(tmp_path / "empty"), audit=False)


def test_create_refuses_existing_and_bad_settings(lh, tmp_path):
    with pytest.raises(AlreadyExistsError):
        Lakehouse.create(lh.uri, audit=False)
    for kwargs in ({"order": 2}, {"node_max_bytes": 100}, {"namespace_max": 0}, {"table_max": 5000},
                   {"txn_ttl_millis": 10}, {"isolation": "dirty"}):
        with pytest.raises(ValidationError):
            Lakehouse.create(str(tmp_path / "bad"), audit=False, **kwargs)
    assert not os.path.exists(tmp_path / "bad" / root_name(0))


@pytest.mark.parametrize("name", ["bad name", "tab\there", "a/b", "", "del\x7f", "x" * 101, "é" * 51])
def test_invalid_names_leave_no_version(lh, name):
    _unchanged(lh, lambda: lh.create_namespace(name), InvalidNameError)
    _unchanged(lh, lambda: lh.create_table("ns", name), InvalidNameError)


def test_name_limit_is_in_bytes(make_lakehouse):
    lh = make_lakehouse(namespace_max=6, table_max=6)
    lh.create_namespace("日本")  # 6 bytes
    _unchanged(lh, lambda: lh.create_namespace("日本a"), InvalidNameError, "7 UTF-8 bytes")


def test_duplicates_and_missing_objects(lh):
    _unchanged(lh, lambda: lh.create_namespace("ns"), AlreadyExistsError, "ns")
    _unchanged(lh, lambda: lh.create_table("ns", "t1"), AlreadyExistsError, "ns.t1")
    _unchanged(lh, lambda: lh.create_table("nope", "t1"), ObjectNotFoundError, "nope")
    _unchanged(lh, lambda: lh.drop_table("ns", "t2"), ObjectNotFoundError, "ns.t2")
    _unchanged(lh, lambda: lh.drop_table("nope", "t2"), ObjectNotFoundError, "namespace 'nope'")
    _unchanged(lh, lambda: lh.drop_namespace("nope"), ObjectNotFoundError, "nope")
    _unchanged(lh, lambda: lh.drop_namespace("ns"), ValidationError, "not empty")
    txn = lh.begin()
    with pytest.raises(ObjectNotFoundError):
        txn.alter_table("ns", "zz", set_properties={"a": "b"})
    with pytest.raises(ValidationError, match="metadata_location"):
        txn.create_table("ns", "ext", table_type="external")
    assert txn.commit() is None  # nothing staged: read-only, no version
    with pytest.raises(TransactionClosedError):
        txn.create_namespace("other")


def test_corrupt_child_node_names_the_file(make_lakehouse):
    lh = make_lakehouse()
    lh.create_namespace("ns")
    for i in range(12):
        lh.create_table("ns", f"t{i:02d}")
    root = lh.load_root(lh.latest_version())
    assert root.node.children, "expected a multi-level tree"
    child = root.node.children[-1]
    with open(os.path.join(local_dir(lh), child), "wb") as f:
        f.write(b"garbage, not arrow")
    fresh = Lakehouse.open(lh.uri, audit=False)
    with pytest.raises(CorruptNodeError, match=child.split("/")[-1]):
        fresh.view().list_tables("ns")
    before = local_versions(local_dir(lh))
    with pytest.raises(CorruptNodeError, match=child.split("/")[-1]):
        fresh.create_table("ns", "zzz")  # its existence check reads the corrupt node
    assert local_versions(local_dir(lh)) == before


def test_truncated_root_names_the_file(lh):
    latest = lh.latest_version()
    path = os.path.join(local_dir(lh), root_name(latest))
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    fresh = Lakehouse.open(lh.uri, audit=False)
    with pytest.raises(CorruptNodeError, match=root_name(latest)):
        fresh.view()
    _unchanged(fresh, lambda: fresh.create_namespace("x"), CorruptNodeError, root_name(latest))
    # Older versions stay readable.
    assert fresh.view(version=latest - 1).list_namespaces() == ["ns"]


def test_corrupt_definition_file(lh):
    path = lh.load_root(lh.latest_version()).node.system["lakehouse_def"]
    with open(os.path.join(local_dir(lh), path), "wb") as f:
        f.write(b"\xff\xff\xff\xff")
    fresh = Lakehouse.open(lh.uri, audit=False)
    with pytest.raises(CorruptDefinitionError, match=path):
        fresh.view()


def test_unsupported_major_version(tmp_path):
    uri = str(tmp_path / "future")
    os.makedirs(uri)
    d = D.new_lakehouse_def(order=4)
    d.major_version = 1
    def_name = "_lakehouse_def_00000000-0000-4000-8000-000000000000.binpb"
    with open(os.path.join(uri, def_name), "wb") as f:
        f.write(D.dumps(d))
    root = Node(system={"created_at_millis": "1", "lakehouse_def": def_name})
    with open(os.path.join(uri, root_name(0)), "wb") as f:
        f.write(serialize(root, 4))
    lh = Lakehouse.open(uri, audit=False)
    with pytest.raises(UnsupportedVersionError, match="major version 1"):
        lh.view()
    with pytest.raises(UnsupportedVersionError):
        lh.create_namespace("ns")
    assert local_versions(uri) == [0]


@pytest.mark.parametrize("hint", [b"garbage", b"", b"-3", b"\xff\xfe", b"12 13", b"99999", b"0"])
def test_bad_or_stale_hint_falls_back_to_probing(lh, hint):
    latest = lh.latest_version()
    with open(os.path.join(local_dir(lh), "_latest_hint.txt"), "wb") as f:
        f.write(hint)
    fresh = Lakehouse.open(lh.uri, audit=False)
    assert fresh.latest_version() == latest
    assert fresh.create_table("ns", "t2") == latest + 1
    assert open(os.path.join(local_dir(lh), "_latest_hint.txt"), "rb").read() == str(latest + 1).encode()


def test_missing_hint(lh):
    os.remove(os.path.join(local_dir(lh), "_latest_hint.txt"))
    fresh = Lakehouse.open(lh.uri, audit=False)
    assert fresh.latest_version() == 2
    assert fresh.view().list_tables("ns") == ["t1"]


def test_version_not_found_names_the_range(lh):
    with pytest.raises(VersionNotFoundError, match="latest version is 2"):
        lh.view(version=9)
    with pytest.raises(VersionNotFoundError, match="negative"):
        lh.view(version=-1)
    with pytest.raises(ValidationError):
        lh.root_at(version=1, as_of=0)


def test_a_handle_looks_above_the_version_it_committed_and_sees_other_writers(lh, monkeypatch):
    """The handle that committed version V finds the latest from V (V and V+1 probed together,
    the hint not read); another handle's commits since, or an expiry past V, send it by the
    hint as before: never an older version than the latest."""
    from trinitylake.storage import Storage

    other = Lakehouse.open(lh.uri, audit=False)
    v = lh.create_table("ns", "mine")
    reads: list[str] = []
    read = Storage.read
    monkeypatch.setattr(Storage, "read", lambda self, path, *a, **k: (reads.append(path), read(self, path, *a, **k))[1])
    assert lh.latest_version() == v and "_latest_hint.txt" not in reads
    assert other.create_table("ns", "theirs") == v + 1
    assert other.create_table("ns", "theirs2") == v + 2
    reads.clear()
    assert lh.latest_version() == v + 2 and "_latest_hint.txt" in reads
    assert lh.create_table("ns", "mine2") == v + 3  # the hint is raised to it, as ever
    os.remove(os.path.join(local_dir(lh), root_name(v + 3).lstrip("/")))  # as if gone, next not written
    assert lh.latest_version() == v + 2
