"""A small audited lakehouse with some history: namespaces and tables, a drop, a rollback,
an expiration of the two oldest versions, an exported snapshot, and synthetic job runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from trinitylake.control import AuditRecord
from trinitylake.format.paths import root_name

EVIL = "<script>alert('x')</script>"


@dataclass
class Built:
    lh: object
    uri: str
    rollback_version: int
    rollback_to: int
    expire_seq: int
    export_seq: int
    failed_seq: int


def build_lakehouse(path: str) -> Built:
    from trinitylake.lakehouse import Lakehouse

    lh = Lakehouse.create(path, order=4, node_max_bytes=4096)  # audit on (the default)
    for ns in ("sales", "ops", "hr"):
        lh.create_namespace(ns, {"owner": "team-" + ns})
    for i in range(6):
        lh.create_table("sales", f"orders_{i}")
    lh.create_table("ops", "events")
    t = lh.begin()
    t.create_table("hr", "people")
    t.create_table("hr", "payroll")
    t.commit()
    before_drop = lh.latest_version()
    lh.drop_table("sales", "orders_0")
    lh.drop_table("sales", "orders_1")
    rollback_version = lh.rollback(before_drop)
    lh.create_table("ops", "metrics")

    control = lh.auditor.control
    now = datetime.now(UTC)

    # An expire run: the definition records the oldest retained version, the old roots go.
    expire_txn = "expire-run-1"
    expire_seq = control.seq.allocate(expire_txn)
    control.append([AuditRecord(txn_seq=expire_seq, record_type="begin", txn_id=expire_txn, command="expire",
                                arguments={"older_than": "7d", "retain_last": 10}, started_at=now)])
    t = lh.begin()
    t.mutate_definition(lambda d: setattr(d, "oldest_retained_version", 2), "set oldest retained version 2")
    lh.auditor.parent_seq = expire_seq
    expire_commit = t.commit(command="expire", arguments={"oldest_retained_version": 2})
    lh.auditor.parent_seq = None
    lh.storage.delete([root_name(0), root_name(1)])
    control.append([AuditRecord(txn_seq=expire_seq, record_type="completed", txn_id=expire_txn, command="expire",
                                arguments={"older_than": "7d", "retain_last": 10}, started_at=now,
                                ended_at=now + timedelta(seconds=12.5), version_before=expire_commit - 1,
                                version_after=expire_commit,
                                metrics={"files_deleted": 17.0, "bytes_deleted": 52_345.0, "files_candidates": 19.0,
                                         "seconds_walk": 3.25, "seconds_delete": 8.5})])

    # An export run that recorded a snapshot of the rollback version.
    export_txn = "export-run-1"
    export_seq = control.seq.allocate(export_txn)
    snap_uri = "file:///tmp/exports/nightly/" + root_name(rollback_version)

    def record_export(d):
        d.exported_snapshots["nightly"] = snap_uri
        d.exported_snapshot_pins["nightly"] = rollback_version

    t = lh.begin()
    t.mutate_definition(record_export, "record export nightly")
    lh.auditor.parent_seq = export_seq
    export_commit = t.commit(command="export", arguments={"name": "nightly"})
    lh.auditor.parent_seq = None
    later = now + timedelta(seconds=30)
    control.append([AuditRecord(txn_seq=export_seq, record_type="completed", txn_id=export_txn, command="export",
                                arguments={"name": "nightly", "mode": "full", "version": rollback_version},
                                started_at=later, ended_at=later + timedelta(seconds=41),
                                version_before=export_commit - 1, version_after=export_commit,
                                metrics={"files_copied": 42.0, "bytes_copied": 1_234_567.0, "seconds_copy": 39.0})])

    # A failed export whose argument and error message carry markup.
    failed_txn = "export-run-2"
    failed_seq = control.seq.allocate(failed_txn)
    t2 = later + timedelta(seconds=60)
    control.append([AuditRecord(txn_seq=failed_seq, record_type="failed", txn_id=failed_txn, command="export",
                                arguments={"name": EVIL}, started_at=t2, ended_at=t2 + timedelta(seconds=2),
                                error_class="ValidationError", error_message=f"bad snapshot name {EVIL}",
                                metrics={"files_copied": 3.0})])
    lh.create_table("sales", "returns")
    return Built(lh, lh.uri, rollback_version, before_drop, expire_seq, export_seq, failed_seq)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    return build_lakehouse(str(tmp_path_factory.mktemp("report") / "lh"))
