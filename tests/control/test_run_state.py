"""Run classification (committed / deleted / dry_run / read / failed / recovered) in history and show."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from trinitylake.control.history import build_history
from trinitylake.control.records import AuditRecord, run_state

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("rtype", "metrics", "args", "state"), [
    ("read", {"status_succeeded": 1.0, "files_deleted": 3.0}, {}, "deleted"),
    ("read", {"status_dry_run": 1.0, "files_candidates": 3.0}, {"dry_run": True}, "dry_run"),
    ("read", {"status_succeeded": 1.0, "files_deleted": 0.0}, {}, "read"),
    ("completed", {"status_succeeded": 1.0, "files_deleted": 0.0}, {}, "committed"),
    ("completed", {"status_succeeded": 1.0, "files_deleted": 5.0}, {}, "deleted"),
    ("committed", {}, {}, "committed"),
    ("failed", {"files_deleted": 5.0}, {}, "failed"),
    ("recovered", {}, {}, "recovered"),
    ("begin", {}, {}, "running"),
    ("read", {}, {"dry_run": True}, "dry_run"),
])
def test_run_state(rtype, metrics, args, state):
    assert run_state(rtype, metrics, args) == state


def _run(seq: int, final: str, metrics: dict[str, float], args: dict) -> list[AuditRecord]:
    return [AuditRecord(seq, "begin", f"r{seq}", "orphans", arguments=args, started_at=T0),
            AuditRecord(seq, final, f"r{seq}", "orphans", arguments=args, started_at=T0, ended_at=T0,
                        metrics=metrics)]


def test_job_filter_lists_every_run_and_counts_are_ints():
    records = (_run(1, "read", {"status_dry_run": 1.0, "files_candidates": 2.0}, {"dry_run": True})
               + _run(2, "read", {"status_succeeded": 1.0, "files_deleted": 2.0, "bytes_deleted": 10.0,
                                  "seconds_total": 1.5}, {"dry_run": False})
               + [AuditRecord(3, "read", "w", "walk", started_at=T0, ended_at=T0)])
    # Without a filter a deleting run is shown (it changed storage); the dry run and walk are not.
    assert [(e.txn_seq, e.state) for e in build_history(records, [])] == [(2, "deleted")]
    runs = [e.to_dict() for e in build_history(records, [], job="orphans")]
    assert [(r["txn_seq"], r["state"]) for r in runs] == [(2, "deleted"), (1, "dry_run")]
    m = json.loads(json.dumps(runs[0]["metrics"]))
    assert m["files_deleted"] == 2 and isinstance(m["files_deleted"], int)
    assert isinstance(m["bytes_deleted"], int) and m["seconds_total"] == 1.5


def test_show_text_units_and_ellipsis():
    import trinitylake.cli  # noqa: F401 - cli.show registers itself on the group when cli loads
    from trinitylake.cli.show import ellipsize, metrics_text

    assert ellipsize("abcdef", 4) == "abc…" and ellipsize("abc", 4) == "abc"
    text = metrics_text({"bytes_deleted": 3 * 1024 * 1024, "seconds_total": 2.5, "files_deleted": 7,
                         "files_" + "x" * 40: 1, "status_succeeded": 1})
    assert "bytes_deleted=3.0 MiB" in text and "seconds_total=2.5 s" in text and "files_deleted=7" in text
    assert "files_xxx" in text and "…=" in text and "status_" not in text
    assert text.splitlines()[0] == "files_deleted=7"  # what the run did comes first
    many = metrics_text({f"seconds_p{i:02d}": 1.0 for i in range(20)})
    assert many.splitlines()[-1] == "… 12 more (--json)"
