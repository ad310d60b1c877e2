"""The tables' own maintenance (issue 46): ``tables_expire`` and ``tables_orphans`` against the
best per-table tool that runs here, PyIceberg, called table by table.

Two identical lakehouses of N Iceberg tables with S snapshots each (one append per table per
round, five tables of a round per multi-table transaction), the
lakehouse's own expire run first so that only the latest version is retained (nothing is
deferred). Then:

* **expire**: ours, one run over every table (plan, one lakehouse version per 100 tables,
  delete the manifest lists and manifests of the expired snapshots), against PyIceberg's
  ``table.maintenance.expire_snapshots().older_than(now).commit()`` per table (one lakehouse
  version per table; PyIceberg removes the snapshots from the metadata and deletes no file, so
  the baseline does less work than ours);
* **orphans**: one old orphan file planted per table; ours, one run, against a per-table
  PyIceberg pass: the table's reachable files from ``inspect.all_manifests()`` and
  ``inspect.all_files()`` plus its manifest lists and metadata files, a listing of its location,
  and deletes of the old unreferenced files.

Iceberg's own Spark actions need iceberg-spark-runtime from Maven, which this machine cannot
fetch; the requests per table on the 20 ms latency store are not measured here.

    python -m bench.bench_tables_maintenance [--scale small|large] [--tables N] [--snapshots S]
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.common import Timer, parse_args, ratio, scratch_dir, write_result

SIZES = {"small": {"tables": 50, "snapshots": 20}, "large": {"tables": 1000, "snapshots": 20}}
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
OLD = time.time() - 30 * 86_400
#: The lakehouses' transaction TTL: short, so that the lakehouse's expire can retain only the
#: latest version right after the build; a multi-table commit of CHUNK appends fits in it.
TTL_MS = 10_000
CHUNK = 5


def _extra(p: Any) -> None:
    p.add_argument("--tables", type=int, default=None)
    p.add_argument("--snapshots", type=int, default=None)


def _catalog(uri: str) -> Any:
    from pyiceberg.catalog import load_catalog

    return load_catalog(
        "bench", **{"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog", "lakehouse": uri, "audit": "false"}
    )


def build(uri: str, tables: int, snapshots: int) -> list[str]:
    from trinitylake.lakehouse import Lakehouse

    Lakehouse.create(uri, audit=False, txn_ttl_millis=TTL_MS)
    cat = _catalog(uri)
    cat.create_namespace("b")
    names = [f"b.t{i:05d}" for i in range(tables)]
    chunks = [names[i : i + CHUNK] for i in range(0, len(names), CHUNK)]
    for chunk in chunks:
        with cat.multi_table_transaction() as mtx:
            for n in chunk:
                mtx.create_table(n, schema=SCHEMA)
    for r in range(snapshots):
        batch = pa.table({"id": [r], "v": [f"r{r}"]}, schema=SCHEMA)
        for chunk in chunks:
            with cat.multi_table_transaction() as mtx:
                for n in chunk:
                    mtx.load_table(n).append(batch)
    return names


def lakehouse_expire(uri: str) -> None:
    from trinitylake.config import load_job_config
    from trinitylake.jobs.runner import run_job

    time.sleep(TTL_MS / 1000 + 0.1)
    cfg = load_job_config(
        "expire",
        overrides={
            "lakehouse": uri,
            "execution": "local",
            "max_version_age": 0,
            "clock_skew_margin": 0,
            "min_versions_to_keep": 1,
        },
        env={},
    )
    run_job("expire", cfg, audit=False)


def run_ours(job: str, uri: str, **overrides: Any) -> Any:
    from trinitylake.config import load_job_config
    from trinitylake.jobs.runner import run_job

    cfg = load_job_config(job, overrides={"lakehouse": uri, **overrides}, env={})
    return run_job(job, cfg, audit=False)


def pyiceberg_expire(uri: str, names: list[str]) -> int:
    cat = _catalog(uri)
    now = datetime.now(UTC)
    expired = 0
    for n in names:
        t = cat.load_table(n)
        before = len(t.metadata.snapshots)
        t.maintenance.expire_snapshots().older_than(now).commit()
        expired += before - len(cat.load_table(n).metadata.snapshots)
    return expired


def pyiceberg_orphans(uri: str, names: list[str], cutoff_s: float) -> int:
    cat = _catalog(uri)
    deleted = 0
    for n in names:
        t = cat.load_table(n)
        live = {t.metadata_location, *(e.metadata_file for e in t.metadata.metadata_log)}
        live |= {s.manifest_list for s in t.metadata.snapshots}
        live |= set(t.inspect.all_manifests().column("path").to_pylist())
        live |= set(t.inspect.all_files().column("file_path").to_pylist())
        live = {p.removeprefix("file://") for p in live}
        root = t.metadata.location.removeprefix("file://")
        for d, _, fs in os.walk(root):
            for f in fs:
                p = os.path.join(d, f)
                if p not in live and os.stat(p).st_mtime < cutoff_s:
                    os.unlink(p)
                    deleted += 1
    return deleted


def plant(uri: str, names: list[str]) -> None:
    for n in names:
        d = Path(uri) / "warehouse" / "b" / n.split(".")[1] / "data"
        d.mkdir(parents=True, exist_ok=True)
        p = d / "orphan-old.parquet"
        p.write_bytes(b"PAR1junkPAR1")
        os.utime(p, (OLD, OLD))


def main(argv: list[str] | None = None) -> int:
    args = parse_args("tables_maintenance", argv, _extra)
    size = dict(SIZES[args.scale])
    size["tables"] = args.tables or size["tables"]
    size["snapshots"] = args.snapshots or size["snapshots"]
    rows: list[dict[str, Any]] = []
    with scratch_dir("tables_maintenance", args.keep) as tmp:
        ours_uri, base_uri = str(tmp / "ours"), str(tmp / "pyiceberg")
        with Timer() as tb:
            names = build(ours_uri, size["tables"], size["snapshots"])
            build(base_uri, size["tables"], size["snapshots"])
        lakehouse_expire(ours_uri)
        lakehouse_expire(base_uri)
        with Timer() as t_ours:
            r = run_ours("tables_expire", ours_uri, older_than=0, retain_last=1)
        rows.append(
            {
                "job": "expire",
                "tool": "tlake tables expire-snapshots",
                "tables": len(names),
                "snapshots_expired": r.counts["snapshots_expired"],
                "files_deleted": r.counts.get("deleted", 0),
                "versions": -(-r.counts["tables_changed"] // 100),
                "seconds": round(t_ours.seconds, 2),
            }
        )
        with Timer() as t_base:
            n = pyiceberg_expire(base_uri, names)
        rows.append(
            {
                "job": "expire",
                "tool": "PyIceberg expire_snapshots per table",
                "tables": len(names),
                "snapshots_expired": n,
                "files_deleted": 0,
                "versions": len(names),
                "seconds": round(t_base.seconds, 2),
            }
        )
        plant(ours_uri, names)
        plant(base_uri, names)
        with Timer() as o_ours:
            o = run_ours("tables_orphans", ours_uri)
        rows.append(
            {
                "job": "orphans",
                "tool": "tlake tables remove-orphans",
                "tables": len(names),
                "snapshots_expired": None,
                "files_deleted": o.counts.get("deleted", 0),
                "versions": 0,
                "seconds": round(o_ours.seconds, 2),
            }
        )
        with Timer() as o_base:
            m = pyiceberg_orphans(base_uri, names, time.time() - 3 * 86_400)
        rows.append(
            {
                "job": "orphans",
                "tool": "PyIceberg inspect + listing per table",
                "tables": len(names),
                "snapshots_expired": None,
                "files_deleted": m,
                "versions": 0,
                "seconds": round(o_base.seconds, 2),
            }
        )
    ratios = {
        f"expire seconds, ours / PyIceberg per table, {len(names)} tables x {size['snapshots']} snapshots": ratio(
            t_ours.seconds, t_base.seconds
        ),
        f"orphans seconds, ours / PyIceberg per table, {len(names)} tables": ratio(o_ours.seconds, o_base.seconds),
    }
    write_result(
        "tables_maintenance",
        "Tables' maintenance: expire-snapshots and remove-orphans vs PyIceberg per table",
        rows,
        ratios,
        scale=args.scale,
        params={**size, "build_seconds": round(tb.seconds, 1)},
        description=(__doc__ or "").split("\n\n")[1],
        notes=[
            "PyIceberg's expiry deletes no file; ours also deletes the expired manifest lists and manifests.",
            "Local files, one process; Iceberg's Spark actions need Maven (not reachable here).",
        ],
    )
    for row in rows:
        print(row)
    print(ratios)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
