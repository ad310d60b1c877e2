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
fetch.

    python -m bench.bench_tables_maintenance [--scale small|large] [--tables N] [--snapshots S] [--latency-ms 20]

``--latency-ms 20`` runs on s3s-fs behind a proxy adding 20 ms to each request (built and
expired on the server directly) and reports the requests per table the proxy counted.
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
    p.add_argument(
        "--latency-ms",
        type=float,
        default=None,
        help="run on s3s-fs behind a proxy adding this delay (requests per table) instead of local files",
    )


def _catalog(uri: str, storage: dict[str, str] | None = None) -> Any:
    """The PyIceberg catalog on `uri`; `storage`: the lakehouse's S3 options (also PyIceberg's FileIO)."""
    from pyiceberg.catalog import load_catalog

    props = {"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog", "lakehouse": uri, "audit": "false"}
    if storage:
        from trinitylake.tables_maintenance.catalog import fileio_properties

        props |= {f"lakehouse.storage.{k}": v for k, v in storage.items()} | fileio_properties(storage)
    return load_catalog("bench", **props)


def build(uri: str, tables: int, snapshots: int, storage: dict[str, str] | None = None) -> list[str]:
    from trinitylake.lakehouse import Lakehouse

    Lakehouse.create(uri, storage_options=storage, audit=False, txn_ttl_millis=TTL_MS)
    cat = _catalog(uri, storage)
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


def lakehouse_expire(uri: str, storage: dict[str, str] | None = None) -> None:
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
            "storage_options": storage or {},
        },
        env={},
    )
    run_job("expire", cfg, audit=False)


def run_ours(job: str, uri: str, **overrides: Any) -> Any:
    from trinitylake.config import load_job_config
    from trinitylake.jobs.runner import run_job

    cfg = load_job_config(job, overrides={"lakehouse": uri, **overrides}, env={})
    return run_job(job, cfg, audit=False)


def pyiceberg_expire(uri: str, names: list[str], storage: dict[str, str] | None = None) -> int:
    cat = _catalog(uri, storage)
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


def on_latency_store(tables: int, snapshots: int, delay_ms: float, keep: bool) -> list[dict[str, Any]]:
    """Requests per table and seconds of both expiries (and our orphans run) on s3s-fs behind a
    proxy adding `delay_ms` to each request; the lakehouses are built and the lakehouse's expire
    runs on the server directly (no delay). The proxy counts every client's requests."""
    from bench.objstore import latency_store

    rows: list[dict[str, Any]] = []
    where = f"S3, {delay_ms:g} ms"
    with scratch_dir("tables_maintenance_s3", keep) as tmp, latency_store(tmp / "s3", delay_ms) as store:
        saved = {k: os.environ.get(k) for k in store.env}
        os.environ.update(store.env)
        try:
            direct = {"endpoint_url": store.direct_url, "key": store.key, "secret": store.secret}
            slow = {**direct, "endpoint_url": store.endpoint_url}
            uris = {}
            names: list[str] = []
            for who in ("ours", "pyiceberg"):
                store.bucket_dir(f"b-{who}")
                uris[who] = f"s3://b-{who}/lh"
                names = build(uris[who], tables, snapshots, direct)
                lakehouse_expire(uris[who], direct)

            def measure(tool: str, job: str, fn: Any) -> None:
                store.proxy.reset_stats()
                with Timer() as t:
                    expired, deleted = fn()
                n = store.proxy.stats()["requests"]
                rows.append(
                    {
                        "job": job,
                        "tool": tool,
                        "store": where,
                        "tables": tables,
                        "snapshots_expired": expired,
                        "files_deleted": deleted,
                        "requests": n,
                        "requests_per_table": round(n / tables, 1),
                        "seconds": round(t.seconds, 2),
                    }
                )

            def ours_expire() -> tuple[int, int]:
                r = run_ours("tables_expire", uris["ours"], older_than=0, retain_last=1, storage_options=slow)
                return r.counts["snapshots_expired"], r.counts.get("deleted", 0)

            def ours_orphans() -> tuple[int | None, int]:
                # S3 cannot back-date a file: the planted orphans count as old with a zero age floor.
                o = run_ours("tables_orphans", uris["ours"], storage_options=slow, older_than=0, unsafe_min_age=True)
                return None, o.counts.get("deleted", 0)

            from trinitylake.storage import Storage

            planted = Storage(uris["ours"], direct)
            for n in names:
                planted.write(f"warehouse/b/{n.split('.')[1]}/data/orphan-old.parquet", b"PAR1junkPAR1")
            time.sleep(1.0)  # older than the run's start by the store's clock too

            measure("tlake tables expire-snapshots", "expire", ours_expire)
            measure(
                "PyIceberg expire_snapshots per table",
                "expire",
                lambda: (pyiceberg_expire(uris["pyiceberg"], names, slow), 0),
            )
            measure("tlake tables remove-orphans", "orphans", ours_orphans)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args("tables_maintenance", argv, _extra)
    size = dict(SIZES[args.scale])
    size["tables"] = args.tables or size["tables"]
    size["snapshots"] = args.snapshots or size["snapshots"]
    if args.latency_ms is not None:
        rows = on_latency_store(size["tables"], size["snapshots"], args.latency_ms, args.keep)
        ours, base = rows[0], rows[1]
        lat = f"{args.latency_ms:g} ms"
        ratios = {
            f"expire seconds at {lat}, ours / PyIceberg per table, {size['tables']} tables": ratio(
                ours["seconds"], base["seconds"]
            ),
            f"expire requests per table at {lat}, ours / PyIceberg per table": ratio(
                ours["requests_per_table"], base["requests_per_table"]
            ),
        }
        write_result(
            "tables_maintenance_s3",
            "Tables' maintenance on a latency store: requests per table",
            rows,
            ratios,
            scale=args.scale,
            params={**size, "latency_ms": args.latency_ms},
            notes=[
                "Requests counted by the delaying proxy (every client, PyIceberg's FileIO included). "
                "The orphans run has a zero age floor (--unsafe-min-age): S3 cannot back-date the planted files."
            ],
        )
        for row in rows:
            print(row)
        print(ratios)
        return 0
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
