"""Reliability suite: crash injection, storage faults, stress, fuzzing and security checks.

Scale: ``--reliability-scale=ci|full`` or ``TLAKE_RELIABILITY_SCALE`` (default ``ci``, sized for
CI: a few minutes on 2 cores). ``full`` is the scale whose figures RELIABILITY.md reports.

Every test adds its figures (trials, faults injected, inputs fuzzed, data lost, ...) to the
session's ledger (the ``ledger`` fixture); at the end of the session they are written to
``.pytest_cache/reliability/results-<scale>.json``. A run that covered every category without
a failure is also *recorded* as ``tests/reliability/results-<scale>.json`` (the files
RELIABILITY.md is rendered from by ``python -m tests.reliability.report``) when its scale is
``full`` or when ``--reliability-record`` / ``TLAKE_RELIABILITY_RECORD=1`` asks for it, so that
ordinary CI runs leave the working tree clean.

What ran is counted from pytest's own reports, not from the ledger: every test of the suites
`make reliability-full` runs (``tests/reliability`` and ``tests/oracle``, `SUITES`) with its
outcome (passed, failed, error in set-up or tear-down, skipped), whether or not it adds figures.
A plugin registered by this conftest sees them all (a conftest's own report hook sees only the
tests under its directory, which left ``tests/oracle`` out: 87 counted where 96 ran).
Each ledger entry names the test that added it (``nodeid``), so a category counts its tests.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CATEGORIES = ("crash", "faults", "stress", "fuzz", "tables", "security")
#: The suites whose tests a results file counts (the paths `make reliability-full` runs).
SUITES = ("tests/reliability", "tests/oracle")
#: A test's outcome when its phases differ: the worst wins.
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
#: The oracle-checked suite (tests/oracle): recorded in its own results-oracle-<scale>.json.
ORACLE = "oracle"


@dataclass(frozen=True)
class Scale:
    """Sizes of one scale of the suite."""

    name: str
    crash_trials_per_point: int  # TLAKE_TEST_CRASH_AT trials per named crash point (4 points)
    crash_timer_trials: int  # SIGKILL after a random delay
    crash_s3_trials: int  # timer kills against the S3 (moto) server
    fault_commits: int  # commits under random transient faults (local)
    fault_commits_s3: int  # the same against S3, with 503 SlowDown among the faults
    permanent_fault_commits: int  # commits under random permanent faults
    stress_writers: int
    stress_commits: int  # per writer
    fuzz_examples: int  # per fuzz target
    job_fault_rate: float  # transient fault rate inside the Spark jobs
    property_examples: int = 200  # Hypothesis examples of the oracle-checked maintenance histories
    property_steps: int = 20  # steps per example

    @property
    def crash_trials(self) -> int:
        return 4 * self.crash_trials_per_point + self.crash_timer_trials + self.crash_s3_trials


SCALES = {
    "ci": Scale("ci", crash_trials_per_point=6, crash_timer_trials=18, crash_s3_trials=4, fault_commits=40,
                fault_commits_s3=12, permanent_fault_commits=30, stress_writers=4, stress_commits=25,
                fuzz_examples=150, job_fault_rate=0.05, property_examples=200, property_steps=20),
    "full": Scale("full", crash_trials_per_point=30, crash_timer_trials=80, crash_s3_trials=20, fault_commits=300,
                  fault_commits_s3=60, permanent_fault_commits=200, stress_writers=8, stress_commits=100,
                  fuzz_examples=2000, job_fault_rate=0.1, property_examples=300, property_steps=25),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("reliability")
    group.addoption("--reliability-scale", choices=sorted(SCALES), default=None,
                    help="size of the reliability suite: ci (default) or full (TLAKE_RELIABILITY_SCALE)")
    group.addoption("--reliability-record", action="store_true", default=False,
                    help="record a complete run's figures in tests/reliability/results-<scale>.json "
                         "(always at full scale; TLAKE_RELIABILITY_RECORD=1)")


def _scale_name(config: pytest.Config) -> str:
    name = config.getoption("--reliability-scale", default=None) or os.environ.get("TLAKE_RELIABILITY_SCALE") or "ci"
    if name not in SCALES:
        raise pytest.UsageError(f"TLAKE_RELIABILITY_SCALE must be one of {sorted(SCALES)}, got {name!r}")
    return name


@pytest.fixture(scope="session")
def scale(pytestconfig: pytest.Config) -> Scale:
    return SCALES[_scale_name(pytestconfig)]


class Ledger:
    """Figures of the run, per category and test."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.started = time.time()

    def add(self, category: str, test: str, *, trials: int = 0, faults: int = 0, inputs: int = 0,
            data_lost: int = 0, seconds: float = 0.0, **details: Any) -> None:
        assert category in CATEGORIES or category == ORACLE, category
        # "<nodeid> (call)" while a test runs; "(teardown)" when a module fixture adds its module's
        # aggregate after the module's last test
        nodeid, _, phase = os.environ.get("PYTEST_CURRENT_TEST", "").rpartition(" (")
        self.entries.append({"category": category, "test": test, "trials": int(trials), "faults": int(faults),
                             "inputs": int(inputs), "data_lost": int(data_lost), "seconds": round(seconds, 2),
                             "nodeid": nodeid or None, "phase": phase.rstrip(")") or None, "details": details})

    def summary(self, entries: list[dict[str, Any]] | None = None,
                ran: dict[str, str] | None = None) -> dict[str, Any]:
        """Per category: the sums of its entries' figures and ``tests``, how many of the tests that
        ran (`ran`: nodeid -> outcome) its figures come from: the test that added an entry, or
        for an aggregate a module fixture added after its module's last test, every test of that
        module that ran (an entry that names no test counts as one)."""
        cats: dict[str, dict[str, Any]] = defaultdict(lambda: {"trials": 0, "faults": 0, "inputs": 0, "data_lost": 0,
                                                                "seconds": 0.0, "tests": 0})
        tests: dict[str, set[str]] = defaultdict(set)
        for i, e in enumerate(self.entries if entries is None else entries):
            c = cats[e["category"]]
            for k in ("trials", "faults", "inputs", "data_lost"):
                c[k] += e[k]
            c["seconds"] = round(c["seconds"] + e["seconds"], 2)
            nodeid = e.get("nodeid")
            if nodeid and e.get("phase") == "teardown" and ran:
                module = nodeid.split("::", 1)[0]
                tests[e["category"]] |= {n for n in ran if n.split("::", 1)[0] == module}
            tests[e["category"]].add(nodeid or f"entry {i}")
        for cat, ids in tests.items():
            cats[cat]["tests"] = len(ids)
        total = {k: sum(c[k] for c in cats.values()) for k in ("trials", "faults", "inputs", "data_lost")}
        return {"categories": dict(cats), "total": total}


def git_state() -> dict[str, Any]:
    """The commit the suite measures (short hash) and whether the working tree differed from it
    (``dirty``; ``lib_dirty``: in lib/ itself), so that RELIABILITY.md can name what it measured."""
    import subprocess

    root = os.path.dirname(os.path.dirname(HERE))

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30).stdout.strip()

    try:
        commit = git("rev-parse", "--short=7", "HEAD")
        changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    except (OSError, subprocess.SubprocessError):
        commit = ""
    if not commit:  # not a git checkout, or no git: nothing known of the tree either
        return {"commit": None, "dirty": None, "lib_dirty": None}
    return {"commit": commit or None, "dirty": bool(changed),
            "lib_dirty": any(p.startswith("lib/") or " -> lib/" in p for p in changed)}


def _hypothesis_seed() -> int | None:
    try:
        from tests.conftest import HYPOTHESIS_SEED
    except ImportError:
        return None
    return HYPOTHESIS_SEED


_LEDGER = Ledger()
_GIT: dict[str, Any] = {}
#: nodeid -> outcome of every test of `SUITES` this process ran.
_RAN: dict[str, str] = {}


@pytest.fixture(scope="session")
def ledger() -> Ledger:
    return _LEDGER


def in_suites(nodeid: str) -> bool:
    path = nodeid.split("::", 1)[0].replace(os.sep, "/")
    return any(path == s or path.startswith(s + "/") for s in SUITES)


def outcome_of(previous: str | None, report: pytest.TestReport) -> str | None:
    """A test's outcome after one more of its phase reports (None: nothing known yet). A failed
    call is ``failed``, a failed set-up or tear-down ``error``; a skip in set-up or call is
    ``skipped`` (an expected failure too: pytest reports it as a skip); the worst phase wins."""
    if report.failed:
        now = "failed" if report.when == "call" else "error"
    elif report.skipped:
        now = "skipped"
    elif report.when == "call":
        now = "passed"
    else:
        return previous
    return now if previous is None or _RANK[now] >= _RANK[previous] else previous


def count_outcomes(ran: dict[str, str]) -> dict[str, int]:
    """``{"ran", "passed", "failed", "error", "skipped"}`` counts, and per suite ``ran <suite>``."""
    out = dict.fromkeys(("ran", *_RANK), 0)
    for nodeid, outcome in ran.items():
        out["ran"] += 1
        out[outcome] += 1
        suite = next((s for s in SUITES if nodeid.replace(os.sep, "/").startswith(s + "/")), "other")
        out[f"ran {suite}"] = out.get(f"ran {suite}", 0) + 1
    return out


class _OutcomeCounter:
    """Registered as a plugin (not this conftest's own hook, which pytest calls only for the
    tests under tests/reliability), so that it sees the reports of every test of `SUITES`."""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if in_suites(report.nodeid):
            outcome = outcome_of(_RAN.get(report.nodeid), report)
            if outcome is not None:
                _RAN[report.nodeid] = outcome


def pytest_configure(config: pytest.Config) -> None:
    # pytest_configure reaches a conftest loaded late too (during collection, as under `make
    # test`), where pytest_sessionstart would not.
    if not config.pluginmanager.has_plugin("tlake-reliability-outcomes"):
        config.pluginmanager.register(_OutcomeCounter(), "tlake-reliability-outcomes")
    if not _GIT:
        _GIT.update(git_state())  # what is measured: the tree as the run starts


def _write_oracle(session: pytest.Session, name: str, record: bool, run: dict[str, Any]) -> None:
    """The oracle-checked suite's figures: ``results-oracle-<scale>.json`` (its own file, so that
    it can be re-run and recorded without re-running the other categories)."""
    entries = [e for e in run["entries"] if e["category"] == ORACLE]
    outcomes = count_outcomes(run["ran"])
    if not entries:
        return
    doc = {"scale": name, "scale_parameters": SCALES[name].__dict__,
           "generated_at": datetime.now(UTC).isoformat(timespec="seconds"), "started_at": _iso(run["started"]),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "system": platform.system()},
           "git": dict(run["git"]), "hypothesis_seed": _hypothesis_seed(),
           "outcomes": dict(outcomes), "ran": dict(sorted(run["ran"].items())), **_LEDGER.summary(entries, run["ran"]),
           "tests": entries}
    targets = [os.path.join(str(session.config.rootpath), ".pytest_cache", "reliability", f"results-oracle-{name}.json")]
    if record and outcomes["failed"] == 0 and outcomes["error"] == 0:
        targets.append(os.path.join(HERE, f"results-oracle-{name}.json"))
    for target in targets:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True, default=str)
            f.write("\n")


def this_run() -> dict[str, Any]:
    """This process's figures, in the form `write_results` takes (and pytest-xdist carries)."""
    run = {"entries": _LEDGER.entries, "ran": _RAN, "started": _LEDGER.started, "git": _GIT}
    return json.loads(json.dumps(run, default=str))


def merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several processes (pytest-xdist workers) as one run's."""
    ran: dict[str, str] = {}
    for run in runs:
        for nodeid, outcome in run["ran"].items():
            ran[nodeid] = outcome if nodeid not in ran or _RANK[outcome] >= _RANK[ran[nodeid]] else ran[nodeid]
    return {"entries": [e for run in runs for e in run["entries"]], "ran": ran,
            "started": min(run["started"] for run in runs), "git": runs[0]["git"]}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller merges and writes
        workeroutput["reliability"] = this_run()  # (tests/conftest.py, pytest_testnodedown)
        return
    write_results(session, this_run())


def write_results(session: pytest.Session, run: dict[str, Any]) -> None:
    """Writes a run's figures (see the module docstring) and prints their one-line summary."""
    name = _scale_name(session.config)
    record = (session.config.getoption("--reliability-record", default=False)
              or os.environ.get("TLAKE_RELIABILITY_RECORD") == "1" or name == "full")
    _write_oracle(session, name, record, run)
    entries = [e for e in run["entries"] if e["category"] != ORACLE]
    outcomes = count_outcomes(run["ran"])
    if not entries:
        return
    ran = {e["category"] for e in entries}
    doc = {
        "scale": name,
        "scale_parameters": SCALES[name].__dict__,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "started_at": _iso(run["started"]),
        "wall_seconds": round(time.time() - run["started"], 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "system": platform.system()},
        "git": dict(run["git"]),
        "hypothesis_seed": _hypothesis_seed(),
        "outcomes": dict(outcomes),
        "ran": dict(sorted(run["ran"].items())),
        **_LEDGER.summary(entries, run["ran"]),
        "tests": entries,
    }
    complete = ran >= set(CATEGORIES) and outcomes["failed"] == 0 and outcomes["error"] == 0
    doc["complete"] = complete
    targets = [os.path.join(str(session.config.rootpath), ".pytest_cache", "reliability", f"results-{name}.json")]
    if complete and record:
        targets.append(os.path.join(HERE, f"results-{name}.json"))
    for target in targets:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True, default=str)
            f.write("\n")
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        t = doc["total"]
        tr.write_line(f"reliability ({name}{'' if complete else ', partial'}): {outcomes['ran']} tests ran "
                      f"({outcomes['passed']} passed, {outcomes['failed']} failed, {outcomes['error']} errors, "
                      f"{outcomes['skipped']} skipped), {t['trials']} trials, {t['faults']} "
                      f"faults injected, {t['inputs']} inputs fuzzed, {t['data_lost']} data lost -> "
                      f"{os.path.relpath(targets[-1])}")
