"""Orphan cleanup: the Spark orphans job against `find` and delta-rs VACUUM FULL.

A lakehouse of N tables and V versions (`bench.generator`) gets M planted orphans: old,
format-owned, unreferenced node and definition files spread over the hash prefixes. Then:

* **scan**: the job's distributed listing (`trinitylake.jobs.orphans.listing.list_lakehouse`: the
  driver lists two levels of hash folders, executors list the 256 second-level prefixes)
  against ``find <root> -type f`` and a single-process ``os.walk`` over the same tree;
* **cleanup**: the whole orphans job (list, walk every retained version, diff, write the plan,
  delete) against delta-rs ``vacuum(full=True, retention_hours=0,
  enforce_retention_duration=False, dry_run=False)`` on a Delta table (built with
  ``deltalake``) holding the same number M of untracked files in 256 folders, and against
  ``find -delete`` of exactly the orphan files (a lower bound: no reachability at all).

The Spark session start is reported separately (not in any row).

    python -m bench.bench_orphans [--scale small|large] [--orphans M] [--keep]
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import Timer, parse_args, ratio, scratch_dir, write_result

SIZES = {
    "small": {"tables": 2000, "versions": 60, "orphans": 5000},
    "large": {"tables": 20_000, "versions": 200, "orphans": 50_000},
}
OLD = time.time() - 30 * 86_400


def _extra(p: Any) -> None:
    p.add_argument("--orphans", type=int, default=None)
    p.add_argument("--tables", type=int, default=None)
    p.add_argument("--master", default="local[*]")


def _plant_lakehouse_orphans(root: Path, n: int) -> list[str]:
    from trinitylake.format.paths import hashed_path

    out = []
    for i in range(n):
        name = f"node-{uuid.uuid4()}.arrow" if i % 2 else f"ns-t{i}-{uuid.uuid4()}.binpb"
        rel = hashed_path(name)
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"orphan")
        os.utime(p, (OLD, OLD))
        out.append(rel)
    return out


def _delta_table_with_untracked(root: Path, n: int) -> Path:
    import pyarrow as pa
    from deltalake import write_deltalake

    path = root / "delta"
    write_deltalake(str(path), pa.table({"x": list(range(10))}))
    for i in range(n):
        d = path / f"part={i % 256:03d}"
        d.mkdir(exist_ok=True)
        f = d / f"part-{i:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        f.write_bytes(b"orphan")
        os.utime(f, (OLD, OLD))
    return path


def _count_files(root: Path) -> tuple[int, float]:
    with Timer() as t:
        n = sum(len(files) for _, _, files in os.walk(root))
    return n, t.seconds


def main(argv: list[str] | None = None) -> int:
    args = parse_args("orphans", argv, _extra)
    size = dict(SIZES[args.scale])
    if args.orphans:
        size["orphans"] = args.orphans
    if args.tables:
        size["tables"] = args.tables
    from bench.generator import generate
    from trinitylake.config import load_job_config
    from trinitylake.jobs.orphans.job import run_orphans
    from trinitylake.jobs.orphans.listing import list_lakehouse
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution
    from trinitylake.spark.session import get_spark

    t_all = time.perf_counter()
    m = size["orphans"]
    rows: list[dict[str, Any]] = []
    with scratch_dir("orphans", keep=args.keep) as d:
        uri = str(d / "lh")
        generate(uri, tables=size["tables"], versions=size["versions"], order=32, node_max_bytes=64 * 1024, seed=2)
        _plant_lakehouse_orphans(Path(uri), m)
        lh = Lakehouse.open(uri, audit=False)
        total_files, walk_s = _count_files(Path(uri))

        # ---- scan
        with Timer() as t:
            out = subprocess.run(["find", uri, "-type", "f"], capture_output=True, text=True, check=True).stdout
        find_n = out.count("\n")
        rows.append({"task": "scan", "tool": "find -type f", "files": find_n, "seconds": t.seconds})
        rows.append({"task": "scan", "tool": "os.walk (1 process)", "files": total_files, "seconds": walk_s})
        with Timer() as t_session:
            spark = get_spark(args.master, app_name="bench-orphans")
        scans = []
        for _ in range(2):  # the first listing job of a session pays for the JIT and Python workers
            with Timer() as t:
                listing = list_lakehouse(Execution("distributed", spark=spark), lh.storage)
                n_listed = listing.rows.totals()[0]
            scans.append(t.seconds)
        rows.append({"task": "scan", "tool": "Spark listing (format-owned files)", "files": n_listed,
                     "seconds": min(scans)})

        # ---- cleanup
        cfg = load_job_config("orphans", overrides={"lakehouse": uri, "older_than": "1d", "unsafe_min_age": True},
                              env={})
        with Timer() as t:
            res = run_orphans(Execution("distributed", spark=spark), lh, cfg, JobResult("orphans", cfg.run_id, lh.uri))
        assert res.counts["deleted"] >= m, res.counts
        rows.append({"task": "cleanup", "tool": "tlake orphans (Spark: list, walk, diff, plan, delete)",
                     "files": res.counts["deleted"], "seconds": t.seconds})
        spark.stop()
        phases = dict(res.seconds)

        # find -delete of exactly the same number of files (no reachability at all)
        again = _plant_lakehouse_orphans(d / "plain", m)
        with Timer() as t:
            subprocess.run(["find", str(d / "plain"), "-type", "f", "-delete"], check=True)
        rows.append({"task": "cleanup", "tool": "find -delete (same number of files, no reachability)",
                     "files": len(again), "seconds": t.seconds})

        from deltalake import DeltaTable

        path = _delta_table_with_untracked(d, m)
        dt = DeltaTable(str(path))
        with Timer() as t:
            removed = dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=True)
        rows.append({"task": "cleanup", "tool": "delta-rs vacuum(full=True)", "files": len(removed),
                     "seconds": t.seconds})

    by = {(r["task"], r["tool"].split(" (")[0].split(" ")[0]): r["seconds"] for r in rows}
    spark_scan = rows[2]["seconds"]
    job_s = rows[3]["seconds"]
    ratios = {
        "scan seconds, Spark listing / find": ratio(spark_scan, by[("scan", "find")]),
        "cleanup seconds, tlake orphans / delta-rs vacuum full (same number of untracked files)":
            ratio(job_s, rows[5]["seconds"]),
        "cleanup seconds, tlake orphans / find -delete": ratio(job_s, rows[4]["seconds"]),
    }
    write_result(
        "orphans",
        "Orphan cleanup: Spark orphans job vs find and delta-rs VACUUM FULL",
        [{**r, "files_per_s": (r["files"] / r["seconds"]) if r["seconds"] else None} for r in rows],
        ratios,
        scale=args.scale,
        description=__doc__.split("\n\n")[1] + " " + __doc__.split("\n\n")[2],
        params={**size, "files_in_lakehouse": total_files, "spark_master": args.master,
                "spark_session_seconds": round(t_session.seconds, 2), "orphans_job_phases": phases,
                "listing": listing.counts},
        columns=["task", "tool", "files", "seconds", "files_per_s"],
        notes=[
            "The orphans job's time includes walking every retained version (reachability) and writing the "
            f"candidate plan; its phases: {phases}.",
            "find and vacuum run in one process on local files; Spark on local[*] (2 cores here) pays a fixed "
            "cost per job. On object stores listing and deleting are network-bound and spread over executors.",
        ],
        seconds=time.perf_counter() - t_all,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
