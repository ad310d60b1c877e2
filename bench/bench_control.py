"""Control table: what auditing costs a commit, and what `tlake show` costs at 10k transactions.

Audit overhead (result ``control_audit``): two lakehouses of 200 tables on local disk, one
with auditing (txn_seq marker + one Delta append per commit: delta-rs creates the control table,
then `LogAppender` writes each append's Parquet file and commit) and one without. The
same single-table alters are committed alternately on both, so both see the same machine
noise. The audited commit's two extra steps are timed apart (instance-level wrappers of
``Auditor.allocate_seq`` and ``Auditor.append``).

`tlake show` (result ``control_show``):

- ``tlake show --json`` end to end (click's CliRunner) on the audited lakehouse above.
- 10k transactions: a control table of 10,000 transactions (committed rows, some failed
  ones, some job runs with ``begin`` + ``completed`` rows) appended through
  ``ControlTable.append`` in batches (one Delta commit per batch), with a matching list of
  `VersionInfo`. Timed: ``records()`` (read the Delta table), ``reconcile()`` (nothing to
  recover; it reads the records again), ``build_history()`` and ``to_dict`` + JSON, before
  and after ``ControlTable.compact()``.
- The tree side of `show` (``Lakehouse.version_infos()``: one root and its change set per
  version) is timed on the audited lakehouse and given per version.
"""

from __future__ import annotations

import json
import random
import sys
import time
from datetime import UTC, datetime, timedelta

from bench.common import Timer, parse_args, ratio, scratch_dir, summarize, write_result

COMMITS = {"small": 40, "large": 200}
SHOW_TXNS = {"small": [10_000], "large": [10_000, 100_000]}
APPEND_BATCH = {10_000: 100, 100_000: 1000}


# ---- audit overhead ---------------------------------------------------------------------------
def _timed(obj, name: str, sink: list[float]) -> None:
    fn = getattr(obj, name)

    def wrapper(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            sink.append(time.perf_counter() - t0)

    setattr(obj, name, wrapper)


def audit_overhead(d, commits: int, seed: int) -> tuple[list[dict], dict, str]:
    from bench.generator import generate, namespace_name, table_name
    from trinitylake.lakehouse import Lakehouse

    lhs = {}
    for audit in (True, False):
        uri = str(d / ("audited" if audit else "plain"))
        generate(uri, tables=200, versions=2, batch=200, audit=audit)
        lhs[audit] = Lakehouse.open(uri, audit=audit)
    seq_t: list[float] = []
    app_t: list[float] = []
    rng = random.Random(seed)
    times: dict[bool, list[float]] = {True: [], False: []}
    warmup = 3
    for i in range(warmup + commits):
        t = table_name(rng.randrange(200))
        ns = namespace_name(0)
        for audit in (True, False) if i % 2 == 0 else (False, True):
            lh = lhs[audit]
            if i == warmup and audit:
                _timed(lh.auditor, "allocate_seq", seq_t)
                _timed(lh.auditor, "append", app_t)
            t0 = time.perf_counter()
            txn = lh.begin()
            txn.alter_table(ns, t, metadata_location=f"{lh.uri}/warehouse/{ns}/{t}/{i}.json")
            txn.commit()
            if i >= warmup:
                times[audit].append(time.perf_counter() - t0)
    rows = []
    for audit in (False, True):
        s = summarize(times[audit])
        rows.append(
            {
                "audit": "on" if audit else "off",
                "commits": len(times[audit]),
                "commit_ms_median": round(s["median"] * 1000, 2),
                "commit_ms_mean": round(s["mean"] * 1000, 2),
                "commit_ms_p95": round(s["p95"] * 1000, 2),
                "seq_allocate_ms_median": round(summarize(seq_t)["median"] * 1000, 2) if audit else None,
                "delta_append_ms_median": round(summarize(app_t)["median"] * 1000, 2) if audit else None,
            }
        )
    off, on = rows
    ratios = {
        "median commit time, audit on / audit off": ratio(on["commit_ms_median"], off["commit_ms_median"]),
        "mean commit time, audit on / audit off": ratio(on["commit_ms_mean"], off["commit_ms_mean"]),
    }
    return rows, ratios, str(d / "audited")


# ---- show ---------------------------------------------------------------------------------------
def synthetic(n: int, seed: int):
    """`n` transactions of audit records and the VersionInfo of each version they produced."""
    from trinitylake.control import AuditRecord, VersionInfo

    rng = random.Random(seed)
    t = datetime(2026, 1, 1, tzinfo=UTC)
    records, infos = [], []
    version = 0
    for seq in range(1, n + 1):
        t += timedelta(seconds=rng.randint(1, 30))
        txn_id = f"txn-{seq:08d}"
        r = rng.random()
        if r < 0.03:  # failed: conflict, no version
            records.append(
                AuditRecord(
                    txn_seq=seq,
                    record_type="failed",
                    txn_id=txn_id,
                    command="table alter",
                    arguments={"argv": ["table", "alter", f"ns{seq % 10:03d}.t{seq:06d}"]},
                    user="bench",
                    host="bench",
                    started_at=t,
                    ended_at=t + timedelta(seconds=1),
                    version_before=version,
                    error_class="TransactionConflictError",
                    error_message="conflicts with a concurrent commit",
                    isolation="snapshot",
                    attempts=2,
                )
            )
            continue
        if r < 0.05:  # a job run with a begin row; a read-only one half of the time
            job = rng.choice(["expire", "orphans", "walk"])
            changed = job == "expire"
            records.append(
                AuditRecord(
                    txn_seq=seq,
                    record_type="begin",
                    txn_id=txn_id,
                    command=job,
                    arguments={"dry_run": False},
                    user="bench",
                    host="bench",
                    started_at=t,
                    version_before=version,
                    based_on_version=version,
                )
            )
            if changed:
                version += 1
                infos.append(
                    VersionInfo(
                        version, seq, txn_id, int(t.timestamp() * 1000) + 5000, changes=["alter lakehouse definition"]
                    )
                )
            records.append(
                AuditRecord(
                    txn_seq=seq,
                    record_type="completed" if changed else "read",
                    txn_id=txn_id,
                    command=job,
                    arguments={"dry_run": False},
                    user="bench",
                    host="bench",
                    started_at=t,
                    ended_at=t + timedelta(seconds=20),
                    version_before=version - 1 if changed else version,
                    version_after=version if changed else None,
                    based_on_version=version,
                    metrics={"files_deleted": float(rng.randint(0, 500)), "seconds": 20.0},
                )
            )
            continue
        version += 1
        k = rng.randint(1, 3)
        changes = [
            f"{rng.choice(['alter', 'alter', 'create', 'drop'])} table ns{seq % 10:03d}.t{seq + j:06d}"
            for j in range(k)
        ]
        records.append(
            AuditRecord(
                txn_seq=seq,
                record_type="committed",
                txn_id=txn_id,
                command="table alter",
                arguments={"argv": ["table", "alter"]},
                user="bench",
                host="bench",
                started_at=t,
                ended_at=t + timedelta(milliseconds=40),
                version_before=version - 1,
                version_after=version,
                changes=changes,
                isolation="snapshot",
                attempts=1,
            )
        )
        infos.append(VersionInfo(version, seq, txn_id, int(t.timestamp() * 1000) + 30, changes=changes))
    return records, infos


def show_control_side(d, n: int, seed: int) -> list[dict]:
    from trinitylake.control import ControlTable, build_history, reconcile

    records, infos = synthetic(n, seed)
    control = ControlTable(str(d / f"control-{n}"))
    batch = APPEND_BATCH.get(n, 100)
    with Timer() as tb:
        for i in range(0, len(records), batch):
            control.append(records[i : i + batch])
    rows = []
    for compacted in (False, True):
        if compacted:
            control.compact()
        with Timer() as t_rec:
            got = control.records()
        assert len(got) == len(records), (len(got), len(records))
        with Timer() as t_rec2:
            recovered = reconcile(control, infos)
        assert recovered == 0, recovered
        with Timer() as t_hist:
            entries = build_history(got, infos)
        with Timer() as t_json:
            out = json.dumps([e.to_dict() for e in entries])
        rows.append(
            {
                "case": f"{n // 1000}k transactions, {'compacted' if compacted else f'{len(records) // batch} appends'}",
                "transactions": n,
                "audit_rows": len(records),
                "versions": len(infos),
                "entries_shown": len(entries),
                "build_s": round(tb.seconds, 2) if not compacted else None,
                "records_s": round(t_rec.seconds, 3),
                "reconcile_s": round(t_rec2.seconds, 3),
                "build_history_s": round(t_hist.seconds, 3),
                "json_s": round(t_json.seconds, 3),
                "show_control_side_s": round(t_rec.seconds + t_rec2.seconds + t_hist.seconds + t_json.seconds, 3),
                "json_bytes": len(out),
            }
        )
        print(f"  show control side, {rows[-1]['case']}: {rows[-1]['show_control_side_s']} s", flush=True)
    return rows


def show_end_to_end(uri: str) -> tuple[list[dict], float]:
    from click.testing import CliRunner

    from trinitylake.cli import cli
    from trinitylake.lakehouse import Lakehouse

    lh = Lakehouse.open(uri, audit=True)
    with Timer() as tv:
        infos = lh.version_infos()
    per_version = tv.seconds / max(1, len(infos))
    runner = CliRunner()
    with Timer() as ts:
        res = runner.invoke(cli, ["--lakehouse", uri, "show", "--json"], catch_exceptions=False)
    if res.exit_code != 0:
        raise RuntimeError(f"tlake show failed: {res.output[-2000:]}")
    shown = len(json.loads(res.output))
    row = {
        "case": f"tlake show --json, real lakehouse ({len(infos)} versions)",
        "transactions": shown,
        "versions": len(infos),
        "entries_shown": shown,
        "show_end_to_end_s": round(ts.seconds, 3),
        "version_infos_s": round(tv.seconds, 3),
        "version_infos_ms_per_version": round(per_version * 1000, 2),
    }
    print(f"  tlake show end to end: {ts.seconds:.2f} s for {len(infos)} versions", flush=True)
    return [row], per_version


def main(argv: list[str] | None = None) -> int:
    args = parse_args("control", argv, lambda p: p.add_argument("--seed", type=int, default=3))
    t_all = time.perf_counter()
    with scratch_dir("control", keep=args.keep) as d:
        rows_a, ratios_a, audited_uri = audit_overhead(d, COMMITS[args.scale], args.seed)
        print(
            f"  audit off/on median commit ms: {rows_a[0]['commit_ms_median']} / {rows_a[1]['commit_ms_median']}",
            flush=True,
        )
        write_result(
            "control_audit",
            "Control table: audit overhead per commit",
            rows_a,
            ratios_a,
            scale=args.scale,
            description=__doc__.split("\n\n")[1].strip(),
            params={"commits": COMMITS[args.scale], "tables": 200, "backend": "local disk", "seed": args.seed},
            notes=[
                "Audited commits: txn_seq allocation (exclusive marker file) before the tree commit, one "
                "Delta append after it (control/log_append.py). The Delta log grows by one version per commit; `tlake compact` "
                "(ControlTable.compact) checkpoints it."
            ],
            seconds=time.perf_counter() - t_all,
            module="control",
        )
        t_show = time.perf_counter()
        rows_s, per_version = show_end_to_end(audited_uri)
        for n in SHOW_TXNS[args.scale]:
            rows_s += show_control_side(d, n, args.seed)
    ratios_s: dict[str, float | None] = {}
    for n in SHOW_TXNS[args.scale]:
        sel = [r for r in rows_s if r.get("transactions") == n and "show_control_side_s" in r]
        if len(sel) == 2:
            ratios_s[f"show, control side, {n // 1000}k transactions: uncompacted / compacted"] = ratio(
                sel[0]["show_control_side_s"], sel[1]["show_control_side_s"]
            )
            ratios_s[f"records() read, {n // 1000}k transactions: uncompacted / compacted"] = ratio(
                sel[0]["records_s"], sel[1]["records_s"]
            )
    notes = [
        f"The 10k rows have no real tree behind them: `tlake show` also runs Lakehouse.version_infos(), "
        f"{per_version * 1000:.2f} ms per version on the audited lakehouse here (small roots, local disk), "
        "i.e. roughly that many seconds per 1,000 versions on top of the control side.",
        "reconcile() finds nothing to recover in these runs; its time is a second full read of the records.",
    ]
    write_result(
        "control_show",
        "Control table: `tlake show` at 10k transactions",
        rows_s,
        ratios_s,
        scale=args.scale,
        columns=[
            "case",
            "transactions",
            "audit_rows",
            "versions",
            "entries_shown",
            "build_s",
            "records_s",
            "reconcile_s",
            "build_history_s",
            "json_s",
            "show_control_side_s",
            "show_end_to_end_s",
            "version_infos_ms_per_version",
        ],
        description="\n\n".join(__doc__.split("\n\n")[2:]).strip(),
        params={
            "transactions": SHOW_TXNS[args.scale],
            "append_batch": APPEND_BATCH,
            "backend": "local disk",
            "seed": args.seed,
        },
        notes=notes,
        seconds=time.perf_counter() - t_show,
        module="control",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
