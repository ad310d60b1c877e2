"""Deterministic interleavings of two transactions in one process: the conflict rules of
FORMAT.md §6 (SNAPSHOT: write-write and the namespace rule; SERIALIZABLE: the read set)."""

from __future__ import annotations

import pytest

from trinitylake.errors import TransactionConflictError, TransactionExpiredError, ValidationError


@pytest.fixture
def lh(make_lakehouse):
    lh = make_lakehouse()
    lh.create_namespace("ns")
    lh.create_namespace("other")
    lh.create_table("ns", "base")
    return lh


def _write_skew(lh, isolation):
    """Two on-call doctors: each checks that the other's table exists... and creates its own
    only if the other's does not exist yet (at most one of a/b may exist)."""
    t1 = lh.begin(isolation=isolation)
    t2 = lh.begin(isolation=isolation)
    assert not t1.table_exists("ns", "b")
    t1.create_table("ns", "a")
    assert not t2.table_exists("ns", "a")
    t2.create_table("ns", "b")
    v = t1.commit()
    return v, t2


def test_write_skew_allowed_by_snapshot(lh):
    v, t2 = _write_skew(lh, "snapshot")
    assert t2.commit() == v + 1
    assert lh.view().list_tables("ns") == ["a", "b", "base"]


def test_write_skew_rejected_by_serializable(lh):
    v, t2 = _write_skew(lh, "serializable")
    with pytest.raises(TransactionConflictError, match="ns.a"):
        t2.commit()
    assert lh.latest_version() == v
    assert lh.view().list_tables("ns") == ["a", "base"]
    with pytest.raises(Exception, match="closed"):
        t2.commit()


def test_lakehouse_default_isolation_is_used(make_lakehouse):
    lh = make_lakehouse(isolation="serializable")
    lh.create_namespace("ns")
    v, t2 = _write_skew(lh, None)
    assert t2.isolation == "serializable"
    with pytest.raises(TransactionConflictError):
        t2.commit()


def test_doc_example_rebase_on_disjoint_tables(lh):
    # T1 (t1) and T2 (t2) both begin at v3; T1 commits v4; T2 rebases and commits v5.
    v = lh.latest_version()
    t1, t2 = lh.begin(), lh.begin()
    t1.create_table("ns", "t1")
    t2.create_table("ns", "t2")
    assert t1.commit() == v + 1
    assert t2.commit() == v + 2
    assert t2.attempts == 2
    assert lh.view().list_tables("ns") == ["base", "t1", "t2"]
    # T2's version holds only T2's change set, on top of T1's.
    assert set(lh.change_set(v + 2).keys) == {t2.codec.table_key("ns", "t2")}
    assert lh.view(version=v + 1).list_tables("ns") == ["base", "t1"]


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_write_write_conflict_no_lost_update(lh, isolation):
    t1, t2 = lh.begin(isolation=isolation), lh.begin(isolation=isolation)
    t1.alter_table("ns", "base", set_properties={"a": "1"})
    t2.alter_table("ns", "base", set_properties={"b": "2"})
    v = t1.commit()
    with pytest.raises(TransactionConflictError, match="both wrote ns.base"):
        t2.commit()
    assert lh.latest_version() == v
    assert lh.view().describe_table("ns", "base")["properties"] == {"a": "1"}


def test_conflict_is_found_several_versions_back(lh):
    t = lh.begin()
    t.drop_table("ns", "base")
    lh.create_table("other", "x")
    x = lh.begin()
    x.alter_table("ns", "base", set_properties={"k": "v"})
    x.commit()
    lh.create_table("other", "y")
    with pytest.raises(TransactionConflictError, match="version"):
        t.commit()


def test_namespace_drop_conflicts_with_table_create_inside(lh):
    t1, t2 = lh.begin(), lh.begin()
    t1.drop_namespace("other")
    t2.create_table("other", "t")
    t1.commit()
    with pytest.raises(TransactionConflictError, match="namespace 'other'"):
        t2.commit()
    assert lh.view().list_namespaces() == ["ns"]


def test_table_create_conflicts_with_later_namespace_drop(lh):
    t1, t2 = lh.begin(), lh.begin()
    t1.create_table("other", "t")
    t2.drop_namespace("other")  # empty in t2's snapshot
    t1.commit()
    with pytest.raises(TransactionConflictError, match="other.t"):
        t2.commit()
    assert lh.view().list_tables("other") == ["t"]


def test_cascade_drop_conflicts_with_concurrent_table_create(lh):
    t1, t2 = lh.begin(), lh.begin()
    t1.drop_namespace("ns", cascade=True)
    t2.create_table("ns", "late")
    t2.commit()
    with pytest.raises(TransactionConflictError):
        t1.commit()
    assert lh.view().list_tables("ns") == ["base", "late"]


def test_namespace_alter_does_not_conflict_with_table_changes_under_snapshot(lh):
    # The namespace rule covers creates and drops (FORMAT.md §6), not property changes.
    t1, t2 = lh.begin(), lh.begin()
    t1.alter_namespace("ns", {"owner": "me"})
    t2.create_table("ns", "t2")
    t2.alter_table("ns", "base", set_properties={"x": "1"})
    v = t1.commit()
    assert t2.commit() == v + 1
    v2 = lh.view()
    assert v2.describe_namespace("ns")["properties"] == {"owner": "me"}
    assert v2.list_tables("ns") == ["base", "t2"]
    # ...and the other way round.
    t3, t4 = lh.begin(), lh.begin()
    t3.create_table("ns", "t3")
    t4.alter_namespace("ns", {"owner": "you"})
    t3.commit()
    t4.commit()
    assert lh.view().describe_namespace("ns")["properties"] == {"owner": "you"}
    assert "t3" in lh.view().list_tables("ns")


def test_namespace_alter_conflicts_with_table_create_under_serializable(lh):
    # SERIALIZABLE: creating ns.t read the namespace's key, which the alter changed.
    t1, t2 = lh.begin("serializable"), lh.begin("serializable")
    t1.alter_namespace("ns", {"owner": "me"})
    t2.create_table("ns", "t2")
    t1.commit()
    with pytest.raises(TransactionConflictError, match="read ns"):
        t2.commit()


def test_serializable_prefix_scan_conflicts_with_create_in_range(lh):
    t1 = lh.begin("serializable")
    assert t1.list_tables("ns") == ["base"]
    t1.create_table("other", "summary")
    lh.create_table("ns", "new")
    with pytest.raises(TransactionConflictError, match="scanned a range"):
        t1.commit()
    # Outside the scanned range there is no conflict.
    t2 = lh.begin("serializable")
    t2.list_tables("ns")
    t2.create_table("other", "summary")
    lh.create_table("other", "unrelated")
    assert t2.commit() == lh.latest_version()


def test_snapshot_ignores_reads(lh):
    t1 = lh.begin("snapshot")
    t1.list_tables("ns")
    t1.load_table("ns", "base")
    t1.create_table("other", "x")
    x = lh.begin()
    x.alter_table("ns", "base", set_properties={"p": "q"})
    x.commit()
    lh.create_table("ns", "new")
    assert t1.commit() == lh.latest_version()


def test_own_writes_are_visible_and_not_read_tracked(lh):
    t = lh.begin("serializable")
    t.create_namespace("fresh")
    t.create_table("fresh", "a")
    assert t.list_tables("fresh") == ["a"]
    assert t.namespace_exists("fresh") and t.table_exists("fresh", "a")
    t.drop_table("fresh", "a")
    assert not t.table_exists("fresh", "a")
    # Reads of keys this txn already wrote are not in the read set (they cannot conflict).
    assert t.codec.namespace_key("fresh") in t.read_keys  # read once by create_namespace's existence check
    assert t.codec.table_key("fresh", "a") in t.read_keys
    assert t.codec.tables_prefix("fresh") in t.read_prefixes
    v = t.commit()
    assert lh.view(version=v).list_tables("fresh") == []


def test_rollback_abandons(lh):
    t = lh.begin()
    t.create_table("ns", "gone")
    v = lh.latest_version()
    t.rollback()
    assert lh.latest_version() == v
    assert not lh.view().table_exists("ns", "gone")


def test_ttl_expired_transaction_cannot_commit(lh, monkeypatch):
    import trinitylake.lakehouse.transaction as tx

    t = lh.begin(ttl_millis=1000)
    t.create_table("ns", "late")
    now = tx._now_ms()
    monkeypatch.setattr(tx, "_now_ms", lambda: now + 1001)
    v = lh.latest_version()
    with pytest.raises(TransactionExpiredError, match="expired"):
        t.commit()
    assert lh.latest_version() == v
    monkeypatch.undo()
    with pytest.raises(ValidationError, match="ttl"):
        lh.begin(ttl_millis=0)
    with pytest.raises(ValidationError, match="ttl"):
        lh.begin(ttl_millis=10**12)


def test_ttl_with_real_sleep(make_lakehouse):
    import time

    lh = make_lakehouse(txn_ttl_millis=1000)
    t = lh.begin(ttl_millis=50)
    t.create_namespace("late")
    time.sleep(0.1)
    with pytest.raises(TransactionExpiredError):
        t.commit()
    assert lh.latest_version() == 0
    assert t.expire_at_millis - t.began_at_millis == 50
    t2 = lh.begin()
    assert t2.expire_at_millis - t2.began_at_millis == 1000


def test_drop_and_recreate_namespace_in_one_txn_conflicts_with_table_create(lh):
    # The txn's net write on the namespace key looks like an alter, but it dropped the
    # namespace (cascade): a concurrent table create inside it must not survive the rebase.
    t1, t2 = lh.begin(), lh.begin()
    t1.drop_namespace("ns", cascade=True)
    t1.create_namespace("ns")
    t2.create_table("ns", "sneaky")
    t2.commit()
    with pytest.raises(TransactionConflictError, match="ns.sneaky"):
        t1.commit()
