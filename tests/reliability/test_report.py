"""RELIABILITY.md rendering from the suite's figures (synthetic figures, no run needed)."""

from __future__ import annotations

from tests.reliability import report
from tests.reliability.conftest import CATEGORIES, Ledger


def _doc(scale: str) -> dict:
    ledger = Ledger()
    for i, cat in enumerate(CATEGORIES):
        ledger.add(cat, f"{cat} test", trials=10 * i, faults=i, inputs=100 if cat == "fuzz" else 0, seconds=1.5)
    return {"scale": scale, "generated_at": "2026-11-23T00:00:00+00:00", "wall_seconds": 12.0,
            "machine": {"cpus": 2}, "outcomes": {"passed": 5}, "scale_parameters": {"name": scale, "x": 1},
            "tests": ledger.entries, **ledger.summary()}


def test_render_reports_every_category_and_the_totals() -> None:
    clean = {"git": {"commit": "abc1234", "dirty": False, "lib_dirty": False}}  # one generation: both shown
    text = report.render({**_doc("full"), **clean}, {**_doc("ci"), **clean})
    assert "**Data lost: 0.**" in text and "**100 inputs**" in text
    for cat in CATEGORIES:
        assert f"| {cat} |" in text
    assert text.count("| **total** |") == 2  # full and ci
    assert "Defects the suite found" in text


def test_the_report_names_the_commit_it_measured_and_can_lead_with_the_ci_scale() -> None:
    ci = {**_doc("ci"), "git": {"commit": "abc1234", "dirty": True, "lib_dirty": False}, "hypothesis_seed": 7}
    text = report.render(_doc("full"), ci, "ci")
    assert "Measured at commit `abc1234` (working tree with uncommitted changes, none in lib/), **ci scale**" in text
    assert "Hypothesis seed 7" in text and "## Tests (ci scale)" in text
    assert "commit not recorded" in text  # the full-scale run beside it did not record one
