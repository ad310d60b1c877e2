"""reconcile(): recovered rows for versions whose writer never recorded them, exactly once."""

from __future__ import annotations

import os
import time

from trinitylake.control import AuditRecord, ControlTable, VersionInfo, build_history, reconcile
from trinitylake.control.reconcile import CLAIM_STALE_SECONDS, _claim_path


def v(version: int, seq: int | None, changes=()) -> VersionInfo:
    return VersionInfo(
        version, seq, None if seq is None else f"txn-{seq}", 1_795_000_000_000 + version, None, list(changes)
    )


def test_reconcile_records_missing_versions_once(tmp_path):
    ct = ControlTable(str(tmp_path / "_control"))
    ct.append(
        [
            AuditRecord(1, "committed", "txn-1", "namespace create", version_after=1),
            AuditRecord(2, "begin", "txn-2", "table drop", {"table": "sales.t2"}, user="bob"),  # died after commit
        ]
    )
    versions = [v(0, None), v(1, 1), v(2, 2, ["drop table sales.t2"]), v(3, 3, ["create table sales.t3"])]
    before = build_history(ct.records(), versions)

    assert reconcile(ct, versions) == 3  # versions 0 (unsequenced), 2 and 3
    rows = {r.version_after: r for r in ct.records() if r.record_type == "recovered"}
    assert set(rows) == {0, 2, 3}
    assert rows[0].txn_seq == 0
    assert (rows[2].txn_seq, rows[2].command, rows[2].user, rows[2].arguments) == (
        2,
        "table drop",
        "bob",
        {"table": "sales.t2"},
    )
    assert rows[2].changes == ["drop table sales.t2"] and rows[2].version_before == 1
    assert (rows[3].txn_seq, rows[3].command) == (3, "recovered")

    assert reconcile(ct, versions) == 0  # idempotent
    assert reconcile(ControlTable(ct.uri), versions) == 0
    after = build_history(ct.records(), versions)
    assert [e.to_dict() | {"arguments": None} for e in after] == [e.to_dict() | {"arguments": None} for e in before]
    assert [(e.txn_seq, e.record_type, e.version) for e in after] == [
        (3, "recovered", 3),
        (2, "recovered", 2),
        (1, "committed", 1),
        (None, "recovered", 0),
    ]


def test_fresh_claim_of_another_reconciler_is_respected_and_stale_one_taken_over(tmp_path):
    ct = ControlTable(str(tmp_path / "_control"))
    versions = [v(7, 7)]
    ct.storage.create_exclusive(_claim_path(7), b"other-reconciler")
    assert reconcile(ct, versions) == 0  # someone else is writing it right now
    old = time.time() - CLAIM_STALE_SECONDS - 60
    os.utime(os.path.join(tmp_path, "_control", _claim_path(7)), (old, old))
    assert reconcile(ct, versions) == 1  # that reconciler died before appending
    assert reconcile(ct, versions) == 0


def test_nothing_to_do_writes_nothing(tmp_path):
    ct = ControlTable(str(tmp_path / "_control"))
    assert reconcile(ct, []) == 0
    ct.append([AuditRecord(1, "committed", "t", "c", version_after=0)])
    assert reconcile(ct, [v(0, 1)]) == 0
    assert not os.path.exists(os.path.join(tmp_path, "_control", "_recovered"))


def test_grace_period_skips_versions_being_recorded(tmp_path):
    ct = ControlTable(str(tmp_path / "_control"))
    now_ms = int(time.time() * 1000)
    versions = [VersionInfo(1, 1, "t1", now_ms - 3_600_000, None, []), VersionInfo(2, 2, "t2", now_ms, None, [])]
    assert reconcile(ct, versions, grace_seconds=60) == 1
    assert [r.version_after for r in ct.records()] == [1]
