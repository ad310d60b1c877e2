"""The reliability figures count what ran: pytest's outcomes of every test of the suites (not the
ledger's entries, not only tests/reliability), and RELIABILITY.md shows only figures of the
generation it measured. A real pytest run of a synthetic suite (pytester) writes the results."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.reliability import report
from tests.reliability.conftest import CATEGORIES, Ledger, count_outcomes, merge_runs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFTEST = os.path.join(ROOT, "tests", "reliability", "conftest.py")

# A synthetic suite with the real plugin: tests/reliability holds ledger entries of every category
# (one test adds two entries, a module fixture one after its last test), a failure, a skip and a
# set-up error; tests/oracle passes 3 tests that add nothing; tests/other is not a suite counted.
RELIABILITY_TESTS = '''
import pytest

@pytest.fixture(scope="module", autouse=True)
def _aggregate(ledger):
    yield
    ledger.add("security", "module aggregate", trials=2)

@pytest.mark.parametrize("cat", CATS)
def test_figures(ledger, cat):
    ledger.add(cat, f"{cat} figures", trials=3, faults=1, inputs=5)

def test_two_entries(ledger):
    ledger.add("crash", "first", trials=1)
    ledger.add("crash", "second", trials=1)

def test_no_figures():
    pass

def test_fails():
    assert False

@pytest.mark.skip(reason="synthetic")
def test_skipped():
    pass

@pytest.fixture
def broken():
    raise RuntimeError("set-up breaks")

def test_setup_error(broken):
    pass
'''.replace("CATS", repr(CATEGORIES))
ORACLE_TESTS = '''
import pytest

@pytest.mark.parametrize("i", range(3))
def test_oracle(i):
    assert i >= 0
'''


def _suite(tmp_path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    root = tmp_path / "repo"
    (root / "tests" / "reliability").mkdir(parents=True)
    (root / "tests" / "oracle").mkdir()
    (root / "tests" / "other").mkdir()
    for d in ("tests", "tests/reliability", "tests/oracle", "tests/other"):
        (root / d / "__init__.py").write_text("")
    (root / "tests" / "reliability" / "conftest.py").write_text(open(CONFTEST).read())
    (root / "tests" / "reliability" / "test_synthetic.py").write_text(RELIABILITY_TESTS)
    (root / "tests" / "oracle" / "test_synthetic_oracle.py").write_text(ORACLE_TESTS)
    (root / "tests" / "other" / "test_elsewhere.py").write_text("def test_not_counted():\n    pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(root),
         "-c", os.devnull, "tests", *extra],
        cwd=root, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(root), "TLAKE_RELIABILITY_SCALE": "ci"})
    results = root / ".pytest_cache" / "reliability" / "results-ci.json"
    assert results.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(results.read_text())


def test_a_run_counts_every_test_of_the_suites_with_its_outcome(tmp_path) -> None:
    proc, doc = _suite(tmp_path)
    # pytest's own summary of the same run: n_cat + 2 passed in tests/reliability, 3 in
    # tests/oracle and 1 elsewhere; 1 failed, 1 skipped, 1 error
    n_cat = len(CATEGORIES)
    assert f"1 failed, {n_cat + 6} passed, 1 skipped" in proc.stdout and "1 error" in proc.stdout, proc.stdout[-2000:]
    o = doc["outcomes"]
    assert (o["ran"], o["passed"], o["failed"], o["error"], o["skipped"]) == (n_cat + 8, n_cat + 5, 1, 1, 1), o
    assert (o["ran tests/reliability"], o["ran tests/oracle"]) == (n_cat + 5, 3), o
    assert not any("tests/other" in n for n in doc["ran"]), doc["ran"]
    assert doc["ran"]["tests/reliability/test_synthetic.py::test_setup_error"] == "error"
    assert doc["complete"] is False  # a failure and an error: never recorded as RELIABILITY.md's figures
    cats = doc["categories"]
    assert cats["crash"]["tests"] == 2 and cats["crash"]["trials"] == 5  # one test's two entries, and its own
    # the module's aggregate counts every test of its module that ran
    assert cats["security"]["tests"] == n_cat + 5 and cats["security"]["trials"] == 3 + 2
    assert cats["fuzz"]["tests"] == 1 and cats["tables"]["inputs"] == 5
    text = report.render(None, doc, "ci")
    assert (f"{n_cat + 8} tests ran: {n_cat + 5} passed, 1 failed, 1 errors, 1 skipped "
            f"({n_cat + 5} in tests/reliability, 3 in tests/oracle)") in text
    assert f"reliability (ci, partial): {n_cat + 8} tests ran" in proc.stdout
    assert "| tables | 1 | 3 | 1 | 5 | 0 |" in text


def test_workers_runs_merge_into_the_tests_that_ran() -> None:
    a = {"entries": [], "ran": {"tests/oracle/t.py::a": "passed", "tests/reliability/t.py::b": "passed"},
         "started": 2.0, "git": {"commit": "abc1234"}}
    b = {"entries": [], "ran": {"tests/reliability/t.py::b": "error", "tests/reliability/t.py::c": "skipped"},
         "started": 1.0, "git": {"commit": "abc1234"}}
    merged = merge_runs([a, b])
    assert merged["started"] == 1.0
    assert count_outcomes(merged["ran"]) == {"ran": 3, "passed": 1, "failed": 0, "error": 1, "skipped": 1,
                                             "ran tests/oracle": 1, "ran tests/reliability": 2}


def _doc(scale: str, commit: str | None, dirty: bool | None, started: str, day: str) -> dict:
    ledger = Ledger()
    for cat in CATEGORIES:
        ledger.add(cat, f"{cat} at {day}", trials=7)
    return {"scale": scale, "generated_at": f"2026-11-{day}T00:00:00+00:00", "started_at": started,
            "wall_seconds": 1.0, "machine": {"cpus": 2}, "outcomes": {"ran": 1, "passed": 1},
            "scale_parameters": {"name": scale, "property_examples": 1, "property_steps": 1},
            "git": {"commit": commit, "dirty": dirty, "lib_dirty": dirty}, "hypothesis_seed": 1,
            "tests": ledger.entries, **ledger.summary()}


def test_figures_of_another_generation_are_named_and_left_out() -> None:
    full = _doc("full", "aaaaaaa", False, "t1", "28")
    docs = {"full": full, "ci": _doc("ci", "bbbbbbb", True, "t0", "26"),
            "oracle-full": {**_doc("full", "aaaaaaa", False, "t1", "28"), "tests": []},
            "oracle-ci": _doc("ci", None, None, "t-1", "23")}
    text = report.document(docs, "full")
    assert "at 26" not in text and "2026-11-26T00:00:00+00:00" in text  # named, none of its figures
    assert "`results-ci.json`: commit `bbbbbbb` (working tree with uncommitted changes" in text
    assert "`results-oracle-ci.json`: commit not recorded" in text
    assert "**ci scale**" not in text and "**ci scale** (" not in text
    assert "**full scale** (2026-11-28" in text  # the oracle section of the same run is shown
    # the same commit, both trees clean: one generation, shown beside
    docs["ci"] = _doc("ci", "aaaaaaa", False, "t2", "29")
    text = report.document(docs, "full")
    assert "ci at 29" not in text  # per-test rows are the primary's; the ci table is shown
    assert "**ci scale** (2026-11-29" in text and "`results-ci.json`" not in text
    # the same commit, but a tree with changes and another run: not provably the same code
    docs["ci"] = _doc("ci", "aaaaaaa", True, "t2", "29")
    assert "**ci scale** (2026-11-29" not in report.document(docs, "full")


@pytest.mark.parametrize("outcomes", [{"ran": 2, "passed": 1, "failed": 1}, {"ran": 2, "passed": 1, "error": 1}])
def test_the_report_refuses_a_run_with_failures_or_errors(tmp_path, monkeypatch, outcomes) -> None:
    doc = {**_doc("full", "aaaaaaa", False, "t1", "28"), "outcomes": outcomes}
    monkeypatch.setattr(report, "load", lambda name: doc if name == "full" else None)
    assert report.main(["--output", str(tmp_path / "R.md")]) == 1
    assert not (tmp_path / "R.md").exists()
