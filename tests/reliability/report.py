"""Render RELIABILITY.md from the figures the reliability suite wrote.

    python -m tests.reliability.report            # writes RELIABILITY.md at the repository root
    python -m tests.reliability.report --check    # exit 1 when RELIABILITY.md is out of date

Inputs: ``tests/reliability/results-full.json`` (required: the figures RELIABILITY.md reports)
and ``tests/reliability/results-ci.json`` (optional: the CI-sized run, shown beside them), and
the oracle-checked suite's ``results-oracle-<scale>.json``. The suite's session-finish hook
writes them after a complete, passing run (see `conftest`):

    make reliability-full                                     # full scale: records and re-renders
    .venv/bin/python -m pytest -q tests/reliability tests/oracle --reliability-record   # CI scale

Every figure comes from one generation: the run the headline reports (``--scale``). Another
results file is shown beside it only when it measured the same tree (the same run, or the same
commit with both working trees clean); otherwise the page names it as left out, with its commit
and date, instead of mixing figures of different code. `make test` runs the CI scale without
recording it (an ordinary run leaves the working tree clean), so after `make reliability-full`
the CI-scale figures are left out until a CI-scale run is recorded at that commit.

The test counts are pytest's outcomes of every test of ``tests/reliability`` and ``tests/oracle``
that ran (passed, failed, errors, skipped), not the number of ledger entries.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUTPUT = os.path.join(ROOT, "RELIABILITY.md")
CATEGORIES = ("crash", "faults", "stress", "fuzz", "tables", "security")

WHAT = {
    "crash": "Writer processes SIGKILLed during commits: at each named point of a commit (`TLAKE_TEST_CRASH_AT`: "
             "before_nodes, before_root, after_root, after_hint) and after random delays (local files and S3). After "
             "every kill every version reads and walks, versions are contiguous, each version holds exactly its "
             "commit's change, every acknowledged commit is present, and the next writer succeeds.",
    "faults": "Storage faults injected below the storage's retries into every operation: connection resets, timeouts, "
              "EIO and S3 503 SlowDown (some after the operation took effect: the ambiguous outcome), and permanent "
              "AccessDenied/ENOSPC; into commits (local and S3) and into the Spark walk, expire, orphans and export "
              "jobs on the driver and the executors. Transient faults: every commit and job succeeds exactly once. "
              "Permanent faults: a typed error, nothing half-visible, a clean re-run.",
    "stress": "Concurrent writer processes (with conflicts and light transient faults) while the Spark expire and "
              "orphans jobs run in turn. After every job: no file a retained version reaches is missing, versions "
              "are contiguous, acknowledged commits are present; at the end exactly one version per commit.",
    "fuzz": "Hypothesis on the node-file reader (random bytes, mutated valid files, wrong schemas, random layouts), "
            "key decoding, names, the hint file, root names/URIs/pointers, protobuf definitions and whole "
            "lakehouses with one corrupt file: only correct results or typed errors.",
    "tables": "The tables' histories (`tests/reliability/test_fuzz_tables.py`): Hypothesis draws histories of two "
              "Iceberg tables of one lakehouse (PyIceberg appends, overwrites and deletes through the catalog; the "
              "lakehouse's expire; `tables_expire` of every old-enough snapshot or none, 1-3 kept per branch; "
              "`tables_orphans` after planting old, young and hidden files; pinned minimal exports and their "
              "drops), each closing with the lakehouse's expire and an expiry of every old-enough snapshot. After "
              "every step the tables' oracle (`tests/iceberg/table_oracle.py`: its own JSON and Avro reading, the "
              "retained and pinned versions and their pointers read by `tests/oracle`'s reader) checks that every "
              "live table file exists, that `tables_expire` deleted every table file nothing live reaches and "
              "nothing else, that `tables_orphans` deleted exactly the oracle's orphans, and that every retained "
              "version reads each table's rows as when it was made. Trials are histories, inputs their steps; data "
              "lost counts the histories in which a live table file went missing or a version read other rows.",
    "security": "Names with traversal/separators/URIs/control characters/NUL/surrogates (API and CLI), URIs with "
                "'..', pointers and planted files (absolute, '..', symlinks, foreign files) that lead outside the "
                "root, export targets overlapping the source: refused, and nothing outside the root is touched.",
}

# What the suite found in the library, and the fix (kept with the figures it produced).
FINDINGS = [
    ("fuzz", "A corrupt node file with out-of-range offsets crashed the reader with a segfault (pyarrow converts "
             "IPC buffers without bounds checks).",
     "`format/node.py` `deserialize`: full Arrow validation before conversion; any pyarrow error is a "
     "CorruptNodeError."),
    ("fuzz", "A node file with a duplicated column name raised KeyError.",
     "`deserialize` refuses duplicate columns (CorruptNodeError)."),
    ("fuzz", "Names and keys with lone surrogates (undecodable command-line bytes) raised UnicodeEncodeError.",
     "`format/keys.py` `validate_name` and `KeyCodec.decode` raise InvalidNameError / ValidationError."),
    ("fuzz", "`KeyCodec.decode` returned names with control characters from malformed keys.",
     "`_unpad` refuses names with control characters or DEL (ValidationError)."),
    ("fuzz", "Reading a version whose tree points at a missing node file raised a bare FileNotFoundError.",
     "`format/tree.py` `NodeStore.load` raises CorruptNodeError naming the missing node."),
    ("fuzz", "`parse_uri('a://..')` accepted '..' as a bucket/authority.",
     "`storage/uri.py` `parse_uri` refuses '.' and '..' authorities (InvalidURIError)."),
    ("stress", "An expire over ~800 expired versions ran the Spark driver out of its 2 GB heap while rendering the "
               "walk's deep query plan as a string (OutOfMemoryError in QueryExecution.explainString).",
     "`spark/session.py` DEFAULT_CONF caps plan strings: `spark.sql.maxPlanStringLength=100000`."),
    ("faults", "Storage had no retries: one transient error (connection reset, timeout, EIO, S3 503 SlowDown) failed "
               "a commit or a job, and permanent errors surfaced as raw OSError/botocore errors.",
     "`storage/storage.py`: bounded retries with jittered backoff for transient errors; other I/O errors become "
     "StorageError (StoragePermissionError for 403/EACCES), both OSErrors with the original errno."),
    ("faults", "An exclusive create whose success was hidden by an error would be reported as a lost race.",
     "`Storage.create_exclusive` retries, and a retry that finds exactly our bytes counts as our success."),
    ("faults (CI)", "A commit whose root create took effect unseen, and whose retry could not read the root back "
                    "(a second fault), took it for a lost race and deleted the node and definition files of the root "
                    "it had itself created: a committed version referenced a missing table definition.",
     "A retried exclusive create that cannot read the file back raises `UnknownOutcomeError` (a StorageError), "
     "never FileExistsError; the commit keeps every file and fails typed; txn_seq markers skip the number. "
     "Deterministic tests in `tests/reliability/test_faults.py`."),
]


def load(name: str) -> dict[str, Any] | None:
    path = os.path.join(HERE, f"results-{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) else str(x)


def same_generation(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two results files measured the same tree: the same run (same start and commit),
    or the same recorded commit with both working trees clean."""
    ga, gb = a.get("git") or {}, b.get("git") or {}
    if not ga.get("commit") or ga.get("commit") != gb.get("commit"):
        return False
    if a.get("started_at") and a.get("started_at") == b.get("started_at"):
        return True
    return ga.get("dirty") is False and gb.get("dirty") is False


def ran(doc: dict[str, Any]) -> str:
    """What pytest ran in a results file's run: every test with its outcome, per suite."""
    o = doc.get("outcomes", {})
    n = o.get("ran", sum(o.get(k, 0) for k in ("passed", "failed", "error", "skipped")))
    suites = [f"{_n(v)} in {k[4:]}" for k, v in sorted(o.items(), key=lambda kv: (kv[0] != "ran tests/reliability",
                                                                                 kv[0])) if k.startswith("ran ")]
    return (f"{_n(n)} test{'' if n == 1 else 's'} ran: {_n(o.get('passed', 0))} passed, {_n(o.get('failed', 0))} failed, "
            f"{_n(o.get('error', 0))} errors, {_n(o.get('skipped', 0))} skipped"
            + (f" ({', '.join(suites)})" if suites else ""))


def _cat(doc: dict[str, Any], cat: str) -> dict[str, Any]:
    return doc.get("categories", {}).get(cat, {"trials": 0, "faults": 0, "inputs": 0, "data_lost": 0, "seconds": 0,
                                                  "tests": 0})


def measured(doc: dict[str, Any] | None) -> str:
    """Which commit a run measured, and whether the working tree differed from it."""
    g = (doc or {}).get("git") or {}
    if not g.get("commit"):
        return "commit not recorded (a run before the suite recorded it)"
    tree = ("working tree clean" if not g.get("dirty") else
            "working tree with uncommitted changes" + (", lib/ included" if g.get("lib_dirty") else ", none in lib/"))
    return f"commit `{g['commit']}` ({tree})"


def _left_out(name: str, doc: dict[str, Any]) -> str:
    return f"`{name}`: {measured(doc)}, {doc.get('generated_at', 'date not recorded')}"


def render(full: dict[str, Any] | None, ci: dict[str, Any] | None, primary: str = "full",
           left_out: list[str] | None = None) -> str:
    """`primary`: the scale the headline and the per-test tables report (`full`, or `ci` when
    this rendering was made from a CI-sized run). The other scale is shown beside it when it is
    of the same generation (`same_generation`), else named as left out, as are `left_out`."""
    main, other = (full, ci) if primary == "full" else (ci, full)
    assert main is not None
    left = list(left_out or [])
    other_name = "ci" if primary == "full" else "full"
    if other is not None and not same_generation(main, other):
        left.insert(0, _left_out(f"results-{other_name}.json", other))
        other = None
    t = main["total"]
    seed = main.get("hypothesis_seed")
    lines = [
        "# Reliability",
        "",
        "<!-- Generated by `python -m tests.reliability.report` from tests/reliability/results-"
        + ("full.json and results-ci.json" if other else f"{primary}.json") + "; do not edit by hand. -->",
        "",
        f"Measured at {measured(main)}, **{primary} scale**, {main['generated_at']}"
        + (f", Hypothesis seed {seed}" if seed is not None else "") + f". {ran(main)}.",
        "",
        "Every figure on this page comes from this measurement"
        + (f" (the {other_name} scale beside it measured the same tree)" if other else "") + "."
        + (" Left out, as they measured other code or did not record which: " + "; ".join(left)
           + ". Record a CI-scale run at this commit to show it beside: `.venv/bin/python -m pytest -q "
           "tests/reliability tests/oracle --reliability-record`." if left else ""),
        "",
        f"At {primary} scale the reliability suite ran **{_n(t['trials'])} trials**, injected **{_n(t['faults'])} "
        f"faults** and fuzzed **{_n(t['inputs'])} inputs**. **Data lost: {_n(t['data_lost'])}.**",
        "",
        "Data lost counts every acknowledged commit that went missing or changed, every version that stopped "
        "reading, every file a retained version references that was deleted, and every file outside the "
        "lakehouse root that was touched. The suite fails when it is not 0.",
        "",
        "## Figures",
        "",
    ]
    header = "| category | tests | trials | faults injected | inputs fuzzed | data lost | seconds |"
    sep = "|---|---:|---:|---:|---:|---:|---:|"
    for label, doc in ((primary, main), (other_name, other)):
        if doc is None:
            continue
        lines += [f"**{label} scale** ({doc['generated_at']}, {measured(doc)}, {doc['machine']['cpus']} CPUs, wall "
                  f"{doc['wall_seconds']} s; {ran(doc)})", "", header, sep]
        for cat in CATEGORIES:
            c = _cat(doc, cat)
            lines.append(f"| {cat} | {_n(c['tests'])} | {_n(c['trials'])} | {_n(c['faults'])} | {_n(c['inputs'])} | "
                         f"{_n(c['data_lost'])} | {c['seconds']} |")
        tt = doc["total"]
        lines += [f"| **total** | | **{_n(tt['trials'])}** | **{_n(tt['faults'])}** | **{_n(tt['inputs'])}** | "
                  f"**{_n(tt['data_lost'])}** | |", ""]
    lines += ["`tests`: how many of the tests that ran added the row's figures; the others (the oracle-checked "
              "ones, whose figures follow under Oracle, and the unit tests of the oracle, the verifier and this "
              "report) add none here.", ""]
    lines += ["## What each category checks", ""]
    for cat in CATEGORIES:
        lines.append(f"- **{cat}**: {WHAT[cat]}")
    lines += ["", f"## Tests ({primary} scale)", "", "| category | test | trials | faults | inputs | data lost | seconds |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for e in sorted(main["tests"], key=lambda e: (CATEGORIES.index(e["category"]), e["test"])):
        lines.append(f"| {e['category']} | {e['test']} | {_n(e['trials'])} | {_n(e['faults'])} | {_n(e['inputs'])} | "
                     f"{_n(e['data_lost'])} | {e['seconds']} |")
    lines += ["", f"Scale parameters ({primary}): " + ", ".join(f"`{k}={v}`" for k, v in main["scale_parameters"].items()
                                                               if k != "name"), ""]
    notes = _notes(main)
    if notes:
        lines += [f"## Notable details ({primary} scale)", ""] + [f"- {n}" for n in notes] + [""]
    lines += ["## Defects the suite found (fixed)", "", "| found by | defect | fix |", "|---|---|---|"]
    for cat, defect, fix in FINDINGS:
        lines.append(f"| {cat} | {defect} | {fix} |")
    lines += [
        "",
        "## Running it",
        "",
        "```",
        "make test                                        # includes the CI-sized suite (not recorded)",
        ".venv/bin/python -m pytest -q tests/reliability tests/oracle  # CI size (TLAKE_RELIABILITY_SCALE=ci)",
        "    --reliability-record                         # ... recorded in results-ci.json, shown beside",
        "make reliability-full                            # full scale: records, re-renders this file",
        ".venv/bin/python -m tests.reliability.report     # re-render this file (--scale ci: from the CI-sized run)",
        "--hypothesis-seed=N                              # replay a run's Hypothesis inputs (each run draws a new seed)",
        "```",
        "",
        "Faults are injected by `tests/support/faults.py` (tests and benchmarks only) through `Storage._io`, the "
        "storage's single I/O seam, or in Spark executors through `TLAKE_TEST_FAULTS` (a spec file re-read on "
        "change). Crash points are `TLAKE_TEST_CRASH_AT` in the commit path.",
        "",
    ]
    return "\n".join(lines)


def _notes(doc: dict[str, Any]) -> list[str]:
    out = []
    for e in doc["tests"]:
        d = e.get("details", {})
        if e["category"] == "crash" and "killed" in d:
            out.append(f"{e['test']}: {d['killed']} writers killed, {d.get('acked', 0)} commits acknowledged before "
                       f"the kill, {d.get('durable_unacked', 0)} killed commits durable but unacknowledged (allowed: "
                       f"killed after their root was created), {d.get('versions_checked', 0)} versions checked.")
        if e["category"] == "faults" and "ambiguous" in d:
            out.append(f"{e['test']}: {e['trials']} commits, {e['faults']} faults, of which {d['ambiguous']} raised "
                       "after the operation took effect; 0 commits failed, none committed twice.")
        if e["category"] == "stress":
            runs = d.get("job_runs", [])
            out.append(f"{e['test']}: {len(runs)} job runs ({sum(r['writers_alive'] > 0 for r in runs)} while writers "
                       f"ran), {sum(r.get('deleted') or 0 for r in runs)} files deleted, "
                       f"{d.get('reachable_deleted', 0)} of them reachable; {d.get('versions')} versions, "
                       f"{d.get('expire_commits')} expire commits, {d.get('acked_expired')} acknowledged versions "
                       f"expired by policy (oldest retained {d.get('oldest_retained')}, latest {d.get('latest')}).")
        if e["category"] == "tables" and "outcomes" in d:
            o = d["outcomes"]
            steps = ", ".join(f"{k.replace('_', ' ')} {_n(o[k])}" for k in STEP_KINDS if k in o)
            out.append(f"{e['test']}: {_n(e['trials'])} histories, {_n(e['inputs'])} steps ({steps}); "
                       f"{_n(o.get('runs_with_expiry', 0))} of the {_n(e['trials'])} histories expired snapshots, "
                       f"{_n(o.get('snapshots_expired', 0))} snapshots expired in all; "
                       f"{_n(o.get('orphans_deleted', 0))} orphan files deleted.")
    return out


#: The step kinds of the tables' histories (`tests/reliability/test_fuzz_tables.py`).
STEP_KINDS = ("append", "overwrite", "delete", "lakehouse_expire", "tables_expire", "tables_orphans", "pin", "unpin")


def document(docs: Mapping[str, dict[str, Any] | None], primary: str = "full") -> str:
    """RELIABILITY.md from the results files (``full``, ``ci``, ``oracle-full``, ``oracle-ci``):
    the oracle-checked suite's figures too only where they are of `primary`'s generation."""
    from tests.reliability.report_oracle import render_oracle

    main = docs[primary]
    assert main is not None
    oracle: dict[str, dict[str, Any] | None] = {}
    left_out = []
    for scale in ("full", "ci"):
        doc = docs.get(f"oracle-{scale}")
        if doc is not None and not same_generation(main, doc):
            left_out.append(_left_out(f"results-oracle-{scale}.json", doc))
            doc = None
        oracle[scale] = doc
    return render(docs["full"], docs["ci"], primary, left_out) + "\n".join(render_oracle(oracle["full"], oracle["ci"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when RELIABILITY.md differs from a fresh render")
    ap.add_argument("--output", default=OUTPUT)
    ap.add_argument("--scale", choices=("full", "ci"), default="full",
                    help="the scale the headline reports (ci: when a full-scale run takes too long; say so)")
    args = ap.parse_args(argv)
    docs = {name: load(name) for name in ("full", "ci", "oracle-full", "oracle-ci")}
    main_doc = docs[args.scale]
    if main_doc is None:
        print(f"no tests/reliability/results-{args.scale}.json: run the suite at {args.scale} scale first",
              file=sys.stderr)
        return 2
    if main_doc["total"]["data_lost"] or main_doc["outcomes"].get("failed") or main_doc["outcomes"].get("error"):
        print(f"the {args.scale}-scale results report lost data or failures; refusing to render", file=sys.stderr)
        return 1
    text = document(docs, args.scale)
    if args.check:
        try:
            with open(args.output) as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            print(f"{args.output} is out of date; run python -m tests.reliability.report", file=sys.stderr)
        return 0 if same else 1
    with open(args.output, "w") as f:
        f.write(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
