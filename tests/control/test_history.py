"""build_history: grouping, ordering, recovered versions, filters, read-only runs (pure, no IO)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from trinitylake.control import AuditRecord, HistoryEntry, VersionInfo, build_history

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def millis(minutes: float) -> int:
    return int(at(minutes).timestamp() * 1000)


def rec(seq, rtype, command="table create", **kw) -> AuditRecord:
    kw.setdefault("txn_id", f"txn-{seq}")
    kw.setdefault("started_at", at(seq))
    return AuditRecord(txn_seq=seq, record_type=rtype, command=command, **kw)


def ver(version, seq, changes=(), minutes=None, rollback_from=None) -> VersionInfo:
    return VersionInfo(
        version=version,
        txn_seq=seq,
        txn_id=None if seq is None else f"txn-{seq}",
        created_at_millis=millis(version if minutes is None else minutes),
        rollback_from=rollback_from,
        changes=list(changes),
    )


def seqs(entries: list[HistoryEntry]) -> list[int | None]:
    return [e.txn_seq for e in entries]


# ---- grouping -------------------------------------------------------------------------------
def test_begin_and_committed_rows_become_one_entry():
    records = [
        rec(1, "begin", arguments={"name": "sales.t1"}, user="alice", host="h1", metrics={"seconds_plan": 1.0}),
        rec(
            1,
            "committed",
            started_at=None,
            ended_at=at(1.5),
            version_before=0,
            version_after=1,
            metrics={"seconds_commit": 0.5},
            changes=["create table sales.t1"],
        ),
    ]
    (e,) = build_history(records, [ver(1, 1)])
    assert (e.txn_seq, e.record_type, e.command, e.version, e.version_before) == (1, "committed", "table create", 1, 0)
    assert e.started_at == at(1) and e.ended_at == at(1.5)
    assert e.metrics == {"seconds_plan": 1.0, "seconds_commit": 0.5}
    assert e.arguments == {"name": "sales.t1"} and (e.user, e.host) == ("alice", "h1")
    assert e.changes == ["create table sales.t1"]
    assert e.error is None


def test_final_state_wins_failed_running_completed():
    records = [
        rec(1, "begin"),
        rec(1, "failed", error_class="CommitConflictError", error_message="root 2 exists"),
        rec(2, "begin", command="expire"),
        rec(3, "begin", command="export"),
        rec(3, "committed", command="export", version_after=1),
        rec(3, "completed", command="export", version_after=1, metrics={"files": 10.0}),
    ]
    by_seq = {e.txn_seq: e for e in build_history(records, [ver(1, 3)], include_reads=True)}
    assert by_seq[1].record_type == "failed" and by_seq[1].error == "CommitConflictError: root 2 exists"
    assert by_seq[1].version is None
    assert by_seq[2].record_type == "running" and by_seq[2].command == "expire"
    assert by_seq[3].record_type == "completed" and by_seq[3].version == 1
    assert by_seq[3].metrics == {"files": 10.0}


def test_committed_then_failed_keeps_the_version_and_is_not_recovered_again():
    records = [rec(4, "committed", version_after=2), rec(4, "failed", error_message="post-commit hook died")]
    (e,) = build_history(records, [ver(2, 4)])
    assert (e.record_type, e.version, e.error) == ("failed", 2, "post-commit hook died")


# ---- ordering ---------------------------------------------------------------------------------
def test_newest_first_strictly_by_txn_seq_not_by_time():
    # Clocks disagree with the order of transactions: txn_seq decides, never timestamps.
    records = [rec(s, "committed", version_after=s, started_at=at(100 - s)) for s in range(1, 21)]
    random.Random(7).shuffle(records)
    entries = build_history(records, [ver(v, v) for v in range(1, 21)])
    assert seqs(entries) == list(range(20, 0, -1))
    assert all(a.txn_seq > b.txn_seq for a, b in zip(entries, entries[1:], strict=False))


# ---- recovered versions ---------------------------------------------------------------------------
def test_version_without_committed_row_becomes_recovered_at_its_tree_seq():
    records = [rec(1, "committed", version_after=1), rec(3, "committed", version_after=3)]
    versions = [ver(1, 1), ver(2, 2, changes=["drop table sales.t9"], minutes=2.5), ver(3, 3)]
    entries = build_history(records, versions)
    assert seqs(entries) == [3, 2, 1]
    rec2 = entries[1]
    assert (rec2.record_type, rec2.version, rec2.command) == ("recovered", 2, "recovered")
    assert rec2.changes == ["drop table sales.t9"]
    assert rec2.txn_id == "txn-2" and rec2.started_at == at(2.5)


def test_recovered_version_merges_with_the_begin_of_its_seq():
    records = [rec(5, "begin", command="table drop", arguments={"t": "x"}), rec(6, "read", command="show")]
    entries = build_history(records, [ver(4, 5, changes=["drop table s.x"])], include_reads=True)
    assert seqs(entries) == [6, 5]
    e = entries[1]
    assert (e.record_type, e.command, e.version, e.arguments) == ("recovered", "table drop", 4, {"t": "x"})


def test_recovered_row_written_by_reconcile_is_not_duplicated():
    records = [rec(5, "begin", command="table drop"), rec(5, "recovered", command="table drop", version_after=4)]
    entries = build_history(records, [ver(4, 5)])
    assert len(entries) == 1 and entries[0].record_type == "recovered" and entries[0].version == 4


def test_tree_changes_win_over_recorded_changes_when_present():
    records = [
        rec(1, "committed", version_after=1, changes=["create namespace sales"]),
        rec(2, "committed", version_after=2, changes=["create table sales.t1"]),
    ]
    versions = [ver(1, 1, changes=["create namespace sales", "alter namespace sales"]), ver(2, 2)]
    e2, e1 = build_history(records, versions)
    assert e1.changes == ["create namespace sales", "alter namespace sales"]
    assert e2.changes == ["create table sales.t1"]


def test_rollback_version_is_labelled():
    entries = build_history([], [ver(0, 1), ver(1, 2), ver(2, 3, rollback_from=1)])
    assert entries[0].command == "rollback" and entries[0].rollback_from == 1


def test_unsequenced_versions_are_placed_by_version_order():
    # Versions 0-1 predate the control table; version 4 was made by a writer without txn_seq.
    records = [
        rec(10, "committed", version_after=2),
        rec(11, "read", command="show"),
        rec(12, "committed", version_after=3),
        rec(13, "committed", version_after=5),
        rec(0, "recovered", command="recovered", version_after=4),  # from reconcile
    ]
    versions = [ver(0, None), ver(1, None), ver(2, 10), ver(3, 12), ver(4, None), ver(5, 13)]
    entries = build_history(records, versions, include_reads=True)
    assert [(e.txn_seq, e.version) for e in entries] == [
        (13, 5),
        (None, 4),
        (12, 3),
        (11, None),
        (10, 2),
        (None, 1),
        (None, 0),
    ]
    assert all(e.record_type == "recovered" for e in entries if e.txn_seq is None)
    assert entries[1].to_dict()["txn_seq"] is None


# ---- read-only runs -----------------------------------------------------------------------------
def test_read_only_runs_hidden_unless_include_reads():
    records = [
        rec(1, "committed", version_after=1),
        rec(2, "read", command="show"),
        rec(3, "begin", command="orphans --dry-run"),
        rec(3, "completed", command="orphans --dry-run"),
        rec(4, "begin", command="expire"),
        rec(4, "completed", command="expire"),
        rec(5, "committed", command="expire", parent_seq=4, version_after=2),
    ]
    versions = [ver(1, 1), ver(2, 5)]
    assert seqs(build_history(records, versions)) == [5, 4, 1]  # job run 4 has a child: kept
    assert seqs(build_history(records, versions, include_reads=True)) == [5, 4, 3, 2, 1]


# ---- filters ----------------------------------------------------------------------------------
@pytest.fixture
def busy():
    records = [
        rec(1, "committed", command="namespace create", version_after=1, changes=["create namespace sales"]),
        rec(2, "committed", command="table create", version_after=2, changes=["create table sales.t1"]),
        rec(3, "committed", command="table create", version_after=3, changes=["create table hr.t1"]),
        rec(4, "begin", command="expire"),
        rec(4, "completed", command="expire", metrics={"versions_expired": 1.0}),
        rec(5, "committed", command="expire", parent_seq=4, version_after=4, changes=["alter namespace sales"]),
        rec(6, "committed", command="table drop", version_after=5, changes=["drop table sales.t2"]),
        rec(7, "read", command="show"),
    ]
    versions = [ver(v, s) for v, s in [(1, 1), (2, 2), (3, 3), (4, 5), (5, 6)]]
    return records, versions


def test_filter_namespace(busy):
    assert seqs(build_history(*busy, namespace="sales")) == [6, 5, 2, 1]
    assert seqs(build_history(*busy, namespace="hr")) == [3]
    assert build_history(*busy, namespace="nope") == []


def test_filter_table_qualified_and_bare(busy):
    assert seqs(build_history(*busy, table="sales.t1")) == [2]
    assert seqs(build_history(*busy, table="t1")) == [3, 2]
    assert seqs(build_history(*busy, namespace="hr", table="t1")) == [3]
    assert build_history(*busy, namespace="hr", table="sales.t1") == []


def test_filter_job_includes_its_child_transactions(busy):
    assert seqs(build_history(*busy, job="expire")) == [5, 4]
    assert seqs(build_history(*busy, job="table")) == [6, 3, 2]  # command prefix by words
    assert build_history(*busy, job="tab") == []


def test_filter_since_and_limit(busy):
    assert seqs(build_history(*busy, since=at(4))) == [6, 5, 4]
    naive = at(4).replace(tzinfo=None)  # naive means UTC
    assert seqs(build_history(*busy, since=naive)) == [6, 5, 4]
    assert seqs(build_history(*busy, limit=2)) == [6, 5]
    assert seqs(build_history(*busy, namespace="sales", limit=3)) == [6, 5, 2]  # limit after filtering
    assert seqs(build_history(*busy, include_reads=True, limit=1)) == [7]


def test_since_uses_version_time_for_recovered_entries():
    entries = build_history([], [ver(1, 1, minutes=1), ver(2, 2, minutes=50)], since=at(10))
    assert seqs(entries) == [2]


def test_to_dict_is_json_safe(busy):
    entries = build_history(*busy, include_reads=True)
    d = json.loads(json.dumps([e.to_dict() for e in entries]))
    assert d[0]["txn_seq"] == 7 and d[0]["version"] is None
    e5 = next(x for x in d if x["txn_seq"] == 5)
    assert e5["version"] == 4 and e5["parent_seq"] == 4
    assert isinstance(e5["started_at"], str) and e5["started_at"].endswith("+00:00")
    assert {
        "txn_seq",
        "record_type",
        "command",
        "txn_id",
        "started_at",
        "ended_at",
        "version",
        "version_before",
        "changes",
        "metrics",
        "error",
        "arguments",
        "user",
        "host",
        "parent_seq",
    } <= set(d[0])


def test_empty_inputs():
    assert build_history([], []) == []


def test_writer_row_arriving_after_reconcile_wins():
    # reconcile() ran while the writer was between its tree commit and its committed row.
    records = [
        rec(3, "begin"),
        rec(3, "recovered", command="table create", version_after=2),
        rec(3, "committed", version_after=2, metrics={"seconds_commit": 0.1}),
    ]
    for order in (records, records[::-1]):
        (e,) = build_history(list(order), [ver(2, 3)])
        assert (e.record_type, e.version, e.metrics) == ("committed", 2, {"seconds_commit": 0.1})
