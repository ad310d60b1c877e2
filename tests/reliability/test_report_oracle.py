"""The oracle section of RELIABILITY.md (synthetic figures, no run needed)."""

from __future__ import annotations

from tests.reliability.conftest import Ledger
from tests.reliability.report_oracle import render_oracle


def _doc(scale: str) -> dict:
    ledger = Ledger()
    ledger.add("oracle", "random maintenance histories (Hypothesis state machine)", trials=200, seconds=90.0,
               examples=200, steps=3000)
    ledger.add("oracle", "SIGKILL and re-run: expire (S3)", trials=3, faults=3, seconds=20.0, points=["a", "b"])
    return {"scale": scale, "generated_at": "2026-11-23T00:00:00+00:00", "machine": {"cpus": 2},
            "outcomes": {"passed": 2}, "scale_parameters": {"property_examples": 200, "property_steps": 20},
            "tests": ledger.entries, **ledger.summary()}


def test_the_oracle_section_reports_both_scales_hypothesis_settings_and_data_lost() -> None:
    text = "\n".join(render_oracle(_doc("full"), _doc("ci")))
    assert text.count("**data lost: 0**") == 2 and "`max_examples=200`" in text and "derandomize" not in text
    assert "| SIGKILL and re-run: expire (S3) | 3 | 3 | 0 | 20.0 | points a, b |" in text
    assert "VersionExpiredError" in text and "shares no code" in text


def test_no_recorded_oracle_run_renders_nothing() -> None:
    assert render_oracle(None, None) == []
