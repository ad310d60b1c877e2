"""Time travel (version, timestamp), rollback by rolling forward, and version discovery after
old root files were deleted by hand."""

from __future__ import annotations

import os
import time

import pytest

from tests.lakehouse.helpers import local_dir, local_versions, root_name
from trinitylake.errors import LakehouseNotFoundError, TransactionConflictError, ValidationError, VersionNotFoundError
from trinitylake.lakehouse import Lakehouse


@pytest.fixture
def lh(make_lakehouse):
    """v0 empty, v1 ns, v2..v6 tables t0..t4, v7 drop t0, v8 alter t1."""
    lh = make_lakehouse()
    lh.create_namespace("ns")
    for i in range(5):
        lh.create_table("ns", f"t{i}")
    lh.drop_table("ns", "t0")
    x = lh.begin()
    x.alter_table("ns", "t1", set_properties={"k": "v"})
    x.commit()
    return lh


def test_version_time_travel(lh):
    assert lh.latest_version() == 8
    assert lh.view(version=0).list_namespaces() == []
    assert lh.view(version=1).list_tables("ns") == []
    assert lh.view(version=4).list_tables("ns") == ["t0", "t1", "t2"]
    assert lh.view(version=7).list_tables("ns") == ["t1", "t2", "t3", "t4"]
    assert lh.view(version=7).describe_table("ns", "t1")["properties"] == {}
    assert lh.view(version=8).describe_table("ns", "t1")["properties"] == {"k": "v"}
    assert lh.view(version=8).describe_table("ns", "t1")["version"] == 8
    assert lh.describe_changes(7) == ["drop table ns.t0"]
    assert lh.describe_changes(8) == ["alter table ns.t1"]
    assert lh.describe_changes(2) == ["create table ns.t0"]
    assert "create lakehouse" in lh.describe_changes(0)


def test_as_of_timestamps(make_lakehouse):
    lh = make_lakehouse()
    stamps = [lh.load_root(0).created_at_millis]
    for i in range(4):
        time.sleep(0.01)
        lh.create_namespace(f"n{i}")
        stamps.append(lh.load_root(lh.latest_version()).created_at_millis)
    assert stamps == sorted(stamps)
    for v, t in enumerate(stamps):
        assert lh.root_at(as_of=t).version == v
        if v and t - 1 >= stamps[v - 1]:
            assert lh.root_at(as_of=t - 1).version == v - 1
    assert lh.view(as_of=stamps[2]).list_namespaces() == ["n0", "n1"]
    from datetime import UTC, datetime

    assert lh.view(as_of=datetime.fromtimestamp(stamps[3] / 1000, UTC)).list_namespaces() == ["n0", "n1", "n2"]
    assert lh.root_at(as_of=stamps[-1] + 10**6).version == 4
    with pytest.raises(VersionNotFoundError, match="no version was created at or before"):
        lh.root_at(as_of=stamps[0] - 1)


def test_rollback_round_trip(lh):
    assert lh.rollback(4) == 9
    assert lh.view().list_tables("ns") == ["t0", "t1", "t2"]
    assert lh.view().describe_table("ns", "t1")["properties"] == {}
    rows = {r["version"]: r for r in lh.versions()}
    assert rows[9]["rollback_from_version"] == 8 and rows[9]["previous_version"] == 8
    assert rows[8]["rollback_from_version"] is None and rows[8]["previous_version"] == 7
    assert rows[0]["previous_version"] is None
    assert [r["version"] for r in lh.versions()] == list(range(10))
    assert sorted(lh.describe_changes(9)) == sorted(["create table ns.t0", "drop table ns.t3", "drop table ns.t4",
                                                     "alter table ns.t1"])
    # Older versions are untouched, and the rollback itself can be rolled back.
    assert lh.view(version=8).list_tables("ns") == ["t1", "t2", "t3", "t4"]
    assert lh.rollback(8) == 10
    assert lh.view().list_tables("ns") == ["t1", "t2", "t3", "t4"]
    assert lh.view().describe_table("ns", "t1")["properties"] == {"k": "v"}
    # Writers continue on top; the rollback's change set takes part in conflict checks.
    t = lh.begin()
    t.create_table("ns", "t5")
    t.alter_table("ns", "t1", set_properties={"a": "b"})
    assert lh.rollback(1) == 11
    with pytest.raises(TransactionConflictError, match="both wrote ns.t1"):
        t.commit()
    u = lh.begin()  # begun before another rollback, touching nothing the rollback changed
    u.create_namespace("other")
    assert lh.rollback(10) == 12
    assert u.commit() == 13
    assert lh.view().list_namespaces() == ["ns", "other"]
    # Definition pointer of the latest version is kept by a rollback.
    assert lh.load_root(11).def_path == lh.load_root(10).def_path == lh.load_root(13).def_path


def test_rollback_refusals(lh):
    n = local_versions(local_dir(lh))
    with pytest.raises(ValidationError, match="older version"):
        lh.rollback(8)
    with pytest.raises(VersionNotFoundError, match="latest version is 8"):
        lh.rollback(42)
    assert local_versions(local_dir(lh)) == n


def _delete_roots(lh, versions, hint=True):
    d = local_dir(lh)
    for v in versions:
        os.remove(os.path.join(d, root_name(v)))
    if hint:
        os.remove(os.path.join(d, "_latest_hint.txt"))


def test_discovery_after_old_roots_deleted(lh):
    _delete_roots(lh, range(4))
    fresh = Lakehouse.open(lh.uri, audit=False)
    assert fresh.latest_version() == 8
    assert fresh.oldest_version() == 4
    assert [r["version"] for r in fresh.versions()] == [4, 5, 6, 7, 8]
    assert fresh.view(version=4).list_tables("ns") == ["t0", "t1", "t2"]
    with pytest.raises(VersionNotFoundError, match="oldest available version is 4 and the latest is 8"):
        fresh.view(version=2)
    with pytest.raises(VersionNotFoundError, match="does not exist yet; the latest version is 8"):
        fresh.view(version=9)
    t0 = fresh.load_root(4).created_at_millis
    with pytest.raises(VersionNotFoundError, match="oldest available version is 4"):
        fresh.root_at(as_of=t0 - 1)
    assert fresh.root_at(as_of=t0).version == 4
    # Rollback to the oldest retained version works; to an expired one it names the range.
    with pytest.raises(VersionNotFoundError, match="oldest available version is 4"):
        fresh.rollback(3)
    assert fresh.rollback(4) == 9
    assert fresh.versions()[-1]["rollback_from_version"] == 8
    assert fresh.create_table("ns", "after") == 10
    assert open(os.path.join(local_dir(lh), "_latest_hint.txt")).read() == "10"


def test_discovery_with_stale_hint_pointing_at_a_deleted_root(lh):
    _delete_roots(lh, range(4), hint=False)
    with open(os.path.join(local_dir(lh), "_latest_hint.txt"), "w") as f:
        f.write("2")
    fresh = Lakehouse.open(lh.uri, audit=False)
    assert fresh.latest_version() == 8
    assert fresh.create_namespace("x") == 9


def test_all_roots_deleted_is_not_a_lakehouse(lh):
    _delete_roots(lh, range(9))
    with pytest.raises(LakehouseNotFoundError):
        Lakehouse.open(lh.uri, audit=False)
