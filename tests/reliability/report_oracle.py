"""The "Oracle" section of RELIABILITY.md, rendered from ``results-oracle-full.json`` (and
``results-oracle-ci.json``), which the oracle-checked tests write (see `conftest`)."""

from __future__ import annotations

from typing import Any

from tests.reliability.report import measured

WHAT = """\
The destructive jobs' expected results come from an **oracle that shares no code with the walk**:
`tests/oracle/reader.py`, a TrinityLake reader written from the spec with pyarrow and its own
protobuf wire reader (`tests/oracle/wire.py`); it imports no module of the library, not even its
generated protobuf code (no `node_references`, `Locator`, `Reader`, `expand_node`, the library's
walk, `Storage` or `NodeStore`; S3 is read through boto3, not s3fs). It lists what every live root
reaches (retained versions from the committed `oldest_retained_version`, export roots, pinned
versions, the running roots of live distributed transactions) and takes a user-visible snapshot: every key of every retained version and export with
the bytes of the definition it points to. A wrong rule about what counts as a reference now has
to be made twice, independently, to go unnoticed. The Spark job tests (`tests/spark`), the job
fault tests and every test below take their expected sets from it."""

CHECKS = """\
After every step or kill: every retained version and export reads exactly as before (keys and
definition bytes); every file a live root reaches exists; the versions present are exactly
`oldest_retained_version..latest`; expire deleted exactly the oracle's files of the versions it
expired minus what stays live; orphans deleted exactly the format-owned files older than its age
floor that nothing live reaches, never a young or a foreign file."""

FINDINGS = [
    ("interleavings", "After expire committed `oldest_retained_version` and before it deleted, a rollback to an "
     "expired version was accepted (`tlake rollback --to 3` after a kill at `expire_after_commit`); in a live run a "
     "rollback landing after `walk_new` made the latest version reference files expire then deleted. Export pins "
     "had the same window.",
     "`lakehouse/roots.py` `check_retained`: a rollback below the latest definition's floor raises "
     "`VersionExpiredError` (the floor is read from the root the rollback creates its successor of, so a concurrent "
     "expire makes it a conflict); `check_new_pins` refuses a new export pin below the floor on every commit "
     "attempt (re-checked after a rebase)."),
    ("verifier", "The reliability verifier lowered its floor to the oldest root it found, so an expire that "
     "deleted one retained root too many was not reported.",
     "`tests/reliability/_verify.py`: the floor is the committed `oldest_retained_version`, and it may not go down."),
]


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) else str(x)


def _details(d: dict[str, Any]) -> str:
    parts = []
    for k, v in sorted(d.items()):
        if isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        parts.append(f"{k.replace('_', ' ')} {_n(v)}")
    return "; ".join(parts)


def render_oracle(full: dict[str, Any] | None, ci: dict[str, Any] | None) -> list[str]:
    """Markdown lines of the section (empty when neither scale was recorded)."""
    if full is None and ci is None:
        return []
    lines = ["## Oracle: randomized histories, SIGKILL, interleavings, S3", "", WHAT, "", CHECKS, ""]
    for label, doc in (("full", full), ("ci", ci)):
        if doc is None:
            continue
        t = doc["total"]
        params = doc.get("scale_parameters", {})
        lines += [f"**{label} scale** ({doc['generated_at']}, {doc['machine']['cpus']} CPUs, "
                  f"{doc['outcomes'].get('passed', 0)} tests passed, {doc['outcomes'].get('failed', 0)} failed): "
                  f"{_n(t['trials'])} trials, {_n(t['faults'])} SIGKILLs and injected faults, "
                  f"**data lost: {_n(t['data_lost'])}**. Hypothesis: `max_examples={params.get('property_examples')}`, "
                  f"`stateful_step_count={params.get('property_steps')}`, `deadline=None`"
                  + (f", seed {doc['hypothesis_seed']}" if doc.get("hypothesis_seed") is not None else "")
                  + (f"; {measured(doc)}" if doc.get("git") else "") + ".", "",
                  "| test | trials | kills / faults | data lost | seconds | figures |", "|---|---:|---:|---:|---:|---|"]
        for e in sorted(doc["tests"], key=lambda e: e["test"]):
            lines.append(f"| {e['test']} | {_n(e['trials'])} | {_n(e['faults'])} | {_n(e['data_lost'])} | "
                         f"{e['seconds']} | {_details(e.get('details', {}))} |")
        lines.append("")
    lines += [
        "What the rows are:",
        "",
        "- **random maintenance histories**: a Hypothesis `RuleBasedStateMachine` "
        "(`tests/reliability/test_maintenance_properties.py`) over namespace/table creates, alters and drops, "
        "rollbacks (and refused rollbacks below the floor), long-running transactions, transactions whose writer died "
        "(staged files aged past the grace period), planted files (format-owned old/young, foreign), "
        "full/partial/minimal exports, export drops, and expire and orphans runs, all driver-local (no Spark "
        "session); the oracle checks after every step.",
        "- **expire paused at a phase boundary** (`tests/reliability/test_oracle_interleavings.py`): the job's crash "
        "points (`expire_after_plan`, `expire_after_commit`, `expire_before_delete`, `expire_mid_delete`) call a "
        "test hook instead, deterministically (no sleeps, no threads); at each pause a rollback to an expiring "
        "version, an export pinning one, or commits plus a long transaction land. Before the commit the rollback "
        "is kept by `walk_new` and the pin makes expire refuse to commit; after it both are refused with "
        "`VersionExpiredError`.",
        "- **SIGKILL and re-run** (`tests/reliability/test_oracle_kills.py`): each job in its own process, killed at "
        "every crash point of expire (`TLAKE_TEST_CRASH_AT`, also the commit's `before_root`/`after_root`) and "
        "through the storage seam (`tests/support/killer.py`: before a delete, with half a delete batch done, after "
        "the n-th file an export created), then re-run; local files and the S3 (moto) server. The same file runs "
        "expire and orphans on S3 under transient faults (503 SlowDown, resets, timeouts, EIO; 30% after the "
        "operation took effect). No test is gated by an environment variable: all of them run in `make test`.",
        "- **Mutation check** (`tests/oracle/test_oracle.py`): a walk that ignores the definition pointers in the "
        "key tables of non-root nodes, applied to the library's walk only, makes expire delete definitions that "
        "retained versions still use; the oracle reports it. The expected sets used before (computed by "
        "the library's own single-process walk, since removed, which shared that rule) would have agreed with the "
        "broken job.",
        "",
        "Limits: the oracle models live *distributed* transactions (the running root named by a transaction's "
        "latest state file while it is open or committing, up to `expire_at` plus a 10-minute clock-skew margin; "
        "`tests/lakehouse/test_distributed.py` runs expire and orphans against it), but the state machine opens "
        "none; its jobs run on the driver only (executor placement is covered by `tests/spark`, "
        "whose expected sets come from the oracle, but not randomized); expire sees \"now\" two transaction TTLs "
        "ahead instead of sleeping, so long transactions are begun at the latest version (the planner's TTL rule, "
        "which protects older ones, has its own unit tests).",
        "",
        "### Defects the oracle-checked suite found (fixed)",
        "",
        "| found by | defect | fix |",
        "|---|---|---|",
    ]
    for by, defect, fix in FINDINGS:
        lines.append(f"| {by} | {defect} | {fix} |")
    lines += ["", "Run it: `make reliability-full` (full scale, records the figures and re-renders this file), or "
              "`.venv/bin/python -m pytest -q tests/reliability tests/oracle` at CI scale.", ""]
    return lines
