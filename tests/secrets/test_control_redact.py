"""`tlake control redact`: rows that an earlier version wrote with credentials in clear text
are rewritten, and every older copy (data files, Delta log statistics) is physically gone."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from trinitylake.control import AuditRecord, ControlTable
from trinitylake.control.records import records_to_arrow
from trinitylake.control.redact import redact_control_table
from trinitylake.lakehouse import Lakehouse


def _legacy_rows(ct: ControlTable, secrets: list[str], start_seq: int) -> None:
    """Rows as an earlier version wrote them: the command line and an error in clear text
    (written around `records_to_arrow`, which redacts since this change)."""
    recs = [AuditRecord(txn_seq=start_seq + i, record_type="failed", txn_id=f"old-{i}", command="namespace create",
                        error_message="x") for i in range(len(secrets))]
    data = records_to_arrow(recs)
    args = [json.dumps({"argv": ["--storage-option", f"secret={s}", "namespace", "create", "s"]}) for s in secrets]
    data = data.set_column(data.schema.get_field_index("arguments"), "arguments", pa.array(args))
    errors = [f"SignatureDoesNotMatch: password={s}" for s in secrets]
    data = data.set_column(data.schema.get_field_index("error_message"), "error_message", pa.array(errors))
    write_deltalake(ct._delta_uri, data, mode="append", storage_options=ct._delta_options)


@pytest.fixture
def legacy_lakehouse(tmp_path, planted):
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=True)
    txn = lh.begin()
    txn.create_namespace("kept", {})
    txn.commit()
    ct = lh.auditor.control
    for i in range(3):  # several commits: several log entries and data files quote them
        _legacy_rows(ct, [planted.new(f"legacy{i}")], 100 + i)
    return lh, tmp_path / "lh"


def test_redact_rewrites_rows_and_removes_every_old_copy(legacy_lakehouse, planted):
    lh, root = legacy_lakehouse
    ct = lh.auditor.control
    before = ct.records()
    assert planted.leaks_in_dir(root / "_control"), "precondition: the legacy rows hold the secrets"
    dry = redact_control_table(ct, dry_run=True)
    assert (dry.rows_redacted, dry.rows_scanned) == (3, len(before))
    assert planted.leaks_in_dir(root / "_control"), "a dry run changes nothing"

    res = redact_control_table(ct)
    assert res.rows_redacted == 3 and res.files_vacuumed >= 3 and res.log_files_deleted > 0
    assert planted.leaks_in_dir(root / "_control") == []
    after = ct.records()
    assert len(after) == len(before)
    legacy = [r for r in after if r.txn_seq >= 100]
    assert [r.arguments["argv"][1] for r in legacy] == ["secret=<redacted>"] * 3
    assert all(r.error_message == "SignatureDoesNotMatch: password=<redacted>" for r in legacy)
    kept = {(r.txn_seq, r.record_type): r for r in before if r.txn_seq < 100}
    assert {(r.txn_seq, r.record_type): r for r in after if r.txn_seq < 100} == kept, "other rows are untouched"

    # The table keeps working: appends, reads, a second run that finds nothing.
    ct.append([AuditRecord(txn_seq=200, record_type="read", txn_id="new", command="walk")])
    assert len(ct.records()) == len(before) + 1
    assert redact_control_table(ct).rows_redacted == 0
    # The documented consequence: versions before the rewrite cannot be time-travelled to.
    with pytest.raises(Exception):  # noqa: B017 - delta-rs raises its own error types
        DeltaTable(ct._delta_uri, version=1).to_pyarrow_table()


def test_cli_control_redact(legacy_lakehouse, planted, tmp_path):
    _, root = legacy_lakehouse
    p = subprocess.run([sys.executable, "-m", "trinitylake", "--lakehouse", str(root), "control", "redact", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["rows_redacted"] == 3 and not out["dry_run"]
    assert planted.leaks_in_dir(root) == []
    shown = subprocess.run([sys.executable, "-m", "trinitylake", "--lakehouse", str(root), "show", "--all", "--json"],
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0 and planted.hits(shown.stdout + shown.stderr) == []


def test_show_and_report_never_print_legacy_secrets(legacy_lakehouse, planted, tmp_path):
    """Before anyone runs `control redact`, the readers already redact what they print."""
    _, root = legacy_lakehouse
    for args in (["show", "--all", "--json"], ["show", "--all"], ["report", "--out", str(tmp_path / "r.html")]):
        p = subprocess.run([sys.executable, "-m", "trinitylake", "--lakehouse", str(root), *args],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        assert planted.hits(p.stdout + p.stderr) == [], args
    assert planted.hits((tmp_path / "r.html").read_text()) == []


@pytest.mark.s3
def test_redact_on_s3(planted, s3_server):
    bucket = s3_server.create_bucket()
    opts = s3_server.storage_options
    lh = Lakehouse.create(f"s3://{bucket}/lh", storage_options=opts, audit=True)
    ct = ControlTable(f"s3://{bucket}/lh/_control", opts)
    _legacy_rows(ct, [planted.new("s3legacy0"), planted.new("s3legacy1")], 100)
    assert planted.leaks_in_bucket(s3_server.client, bucket), "precondition: the legacy rows hold the secrets"
    res = redact_control_table(ct)
    assert res.rows_redacted == 2
    assert planted.leaks_in_bucket(s3_server.client, bucket) == []
    assert [r.arguments["argv"][1] for r in ct.records() if r.txn_seq >= 100] == ["secret=<redacted>"] * 2
    assert lh.latest_version() == 0  # the lakehouse itself is untouched
