"""Export with tables: `tlake export --with-tables` against `cp -r` of the same bytes.

A lakehouse holds T Iceberg tables written through the PyIceberg catalog
(`trinitylake.iceberg.TrinityLakeCatalog`, warehouse under the lakehouse): each gets A appends
of a partitioned Arrow table (P regions, so P data files per append, random values so the
Parquet files do not compress away). The export job (`trinitylake.jobs.export.job.run_export`,
``execution=auto`` as a user runs it) exports the latest version in full with its tables:
the lakehouse's own files, then the tables' manifests rewritten, their data files copied by
the export's copy phase (`export.table_copy`: placement, one read, MD5, exclusive create,
verification, result manifests), their manifest lists and metadata files, the root last. The
baseline is ``cp -r`` of the same file set (the target minus its ``_export/`` bookkeeping: the
lakehouse files and the table folders), on the same disk, from the page cache, and ``cp -r``
of the whole source folder (every version, not only the exported one). With ``--s3`` the same
export runs again between two buckets of s3s-fs behind the delaying proxy (`bench.objstore`,
``--delay`` ms a request), against a threaded boto3 GET+PUT copy of the same objects through
the same proxy.

    python -m bench.bench_export_tables [--tables 3] [--appends 10] [--regions 10] [--rows 12000] [--s3]
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import Timer, parse_args, ratio, scratch_dir, write_result

IMPL = "trinitylake.iceberg.TrinityLakeCatalog"


def _extra(p) -> None:
    p.add_argument("--tables", type=int, default=3)
    p.add_argument("--appends", type=int, default=10, help="appends per table (one snapshot each)")
    p.add_argument("--regions", type=int, default=10, help="partitions per append (data files per append)")
    p.add_argument("--rows", type=int, default=12_000, help="rows per data file")
    p.add_argument("--s3", action="store_true", help="also export between buckets of s3s-fs behind the proxy")
    p.add_argument("--delay", type=float, default=20.0, help="ms per request through the proxy (--s3)")


def build_tables(cat: Any, tables: int, appends: int, regions: int, rows: int, seed: int = 3) -> int:
    """The bench's Iceberg tables; returns their rows."""
    import numpy as np
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    rng = np.random.default_rng(seed)
    cat.create_namespace("bench")
    ice = Schema(NestedField(1, "id", LongType()), NestedField(2, "region", StringType()),
                 NestedField(3, "amount", DoubleType()), NestedField(4, "qty", LongType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
    schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64()), ("qty", pa.int64())])
    total = 0
    for t in range(tables):
        tbl = cat.create_table(f"bench.t{t}", schema=ice, partition_spec=spec)
        for a in range(appends):
            n = rows * regions
            base = (t * appends + a) * n
            data = pa.table({"id": pa.array(range(base, base + n), pa.int64()),
                             "region": pa.array([f"r{i % regions:02d}" for i in range(n)], pa.string()),
                             "amount": pa.array(rng.random(n), pa.float64()),
                             "qty": pa.array(rng.integers(0, 1 << 40, n), pa.int64())}, schema=schema)
            tbl.append(data)
            total += n
    return total


def file_set(target: Path) -> list[Path]:
    return sorted(p.relative_to(target) for p in target.rglob("*")
                  if p.is_file() and p.relative_to(target).parts[0] != "_export")


def cp_r(entries: list[Path], dest: Path) -> float:
    dest.mkdir(parents=True)
    with Timer() as t:
        subprocess.run(["cp", "-r", *map(str, entries), str(dest)], check=True)
    return t.seconds


def run_export(lh: Any, target: str, name: str, target_options: dict | None = None) -> Any:
    from trinitylake.config import load_job_config
    from trinitylake.jobs.export.job import run_export as run
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution

    cfg = load_job_config("export", overrides={"lakehouse": lh.uri, "name": name, "target": target,
                                               "with_tables": True}, env={})
    result = JobResult("export", cfg.run_id, lh.uri)
    record: dict[str, Any] = {}
    result.details["execution"] = record
    return run(Execution("auto", record=record), lh, cfg, result, target_storage_options=target_options)


def phases(r: Any) -> dict[str, Any]:
    s = r.seconds
    ex = r.details.get("execution", {})
    return {"plan_s": s.get("plan"), "copy_s": s.get("copy"), "tables_plan_s": s.get("tables_plan"),
            "tables_copy_s": s.get("tables_copy"), "tables_metadata_s": s.get("tables_metadata"),
            "commit_s": s.get("commit"), "table_copy_where": (ex.get("export.table_copy") or {}).get("where"),
            "table_files_copied": r.counts.get("table_files_copied"), "table_data_files": r.counts.get("table_data_files")}


def row(method: str, files: int, nbytes: int, seconds: float, **extra: Any) -> dict[str, Any]:
    return {"method": method, "files": files, "bytes": nbytes, "seconds": round(seconds, 3),
            "mb_per_s": round(nbytes / seconds / 1e6, 2) if seconds else None, **extra}


def s3_rows(d: Path, args: Any) -> tuple[list[dict[str, Any]], dict[str, float | None], dict[str, Any]]:
    """The same export between two buckets of s3s-fs behind the proxy, and a threaded boto3
    GET+PUT copy of the same objects."""
    import boto3
    from pyiceberg.catalog import load_catalog

    from bench.objstore import ensure_s3s, latency_store
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.storage import Storage

    with latency_store(d / "s3", 0.0, binary=ensure_s3s(), log_path=d / "s3s.log") as store:
        opts_direct = {"endpoint_url": store.direct_url, "key": store.key, "secret": store.secret}
        client = boto3.client("s3", endpoint_url=store.direct_url, aws_access_key_id=store.key,
                              aws_secret_access_key=store.secret, region_name="us-east-1")
        for b in ("src", "dst", "cp"):
            client.create_bucket(Bucket=f"bench-{b}")
        lh = Lakehouse.create("s3://bench-src/lh", storage_options=opts_direct, audit=False)
        io = {"s3.endpoint": store.direct_url, "s3.access-key-id": store.key, "s3.secret-access-key": store.secret,
              "s3.region": "us-east-1"}
        cat = load_catalog("b", **{"py-catalog-impl": IMPL, "lakehouse": lh.uri, "audit": "false", **io,
                                   **{f"lakehouse.storage.{k}": v for k, v in opts_direct.items()}})
        build_tables(cat, args.tables, args.appends, args.regions, args.rows)
        store.proxy.delay_ms = args.delay
        opts = {"endpoint_url": store.endpoint_url, "key": store.key, "secret": store.secret}
        lh = Lakehouse.open("s3://bench-src/lh", storage_options=opts, audit=False)
        r = run_export(lh, "s3://bench-dst/dr", "s3x", opts)
        tgt = Storage("s3://bench-dst/dr", opts)
        keys = [f.path for f in tgt.list("") if not f.path.startswith("_export/")]
        sizes = {f.path: f.size for f in tgt.list("")}
        nbytes = sum(sizes[k] for k in keys)
        rows = [row(f"tlake export --with-tables, S3 -> S3 at {args.delay:g} ms", len(keys), nbytes,
                    r.seconds["total"], **phases(r))]
        proxied = boto3.client("s3", endpoint_url=store.endpoint_url, aws_access_key_id=store.key,
                               aws_secret_access_key=store.secret, region_name="us-east-1")

        def one(k: str) -> None:
            src_key = "lh/" + k
            try:
                body = proxied.get_object(Bucket="bench-src", Key=src_key)["Body"].read()
            except proxied.exceptions.NoSuchKey:
                body = proxied.get_object(Bucket="bench-dst", Key="dr/" + k)["Body"].read()  # rewritten files
            proxied.put_object(Bucket="bench-cp", Key=k, Body=body)

        with Timer() as t, ThreadPoolExecutor(16) as pool:
            list(pool.map(one, keys))
        rows.append(row(f"boto3 GET+PUT, 16 threads, same objects at {args.delay:g} ms", len(keys), nbytes, t.seconds))
    ratios = {f"S3 at {args.delay:g} ms: export with tables bytes/s / boto3 16-thread copy bytes/s":
              ratio(t.seconds, r.seconds["total"])}
    return rows, ratios, {"s3_server": "s3s-fs + DelayProxy", "delay_ms": args.delay}


def main(argv: list[str] | None = None) -> int:
    args = parse_args("export_tables", argv, _extra)
    from pyiceberg.catalog import load_catalog

    from trinitylake.lakehouse import Lakehouse

    load_before = os.getloadavg()
    with scratch_dir("export-tables", keep=args.keep) as d:
        src = d / "src" / "lh"
        lh = Lakehouse.create(str(src), audit=False)
        cat = load_catalog("b", **{"py-catalog-impl": IMPL, "lakehouse": lh.uri, "audit": "false"})
        with Timer() as t_gen:
            n_rows = build_tables(cat, args.tables, args.appends, args.regions, args.rows)
        target = d / "dr"
        r = run_export(lh, str(target), "dr1")
        files = file_set(target)
        nbytes = sum((target / f).stat().st_size for f in files)
        data_files = r.counts["table_data_files"]
        rows = [row("tlake export --with-tables (auto)", len(files), nbytes, r.seconds["total"], **phases(r))]
        cp_s = cp_r([target / e for e in sorted(os.listdir(target)) if e != "_export"], d / "cp")
        rows.append(row("cp -r (the same files: lakehouse + table folders)", len(files), nbytes, cp_s))
        src_files = [p for p in src.rglob("*") if p.is_file()]
        src_bytes = sum(p.stat().st_size for p in src_files)
        cp_all = cp_r([src], d / "cp-all")
        rows.append(row("cp -r (the whole source folder, every version)", len(src_files), src_bytes, cp_all))
        again = run_export(lh, str(target), "dr1")
        rows.append(row("tlake export --with-tables, re-run (verify only)", len(files), nbytes,
                        again.seconds["total"], **phases(again)))
        ratios = {
            "export with tables bytes/s / cp -r bytes/s (same files, same disk)": ratio(cp_s, r.seconds["total"]),
            "table copy phase share of the export's time": ratio(r.seconds.get("tables_copy", 0), r.seconds["total"]),
        }
        params: dict[str, Any] = {"tables": args.tables, "appends": args.appends, "regions": args.regions,
                                  "rows_per_file": args.rows, "rows": n_rows, "data_files": data_files,
                                  "generate_seconds": round(t_gen.seconds, 1), "load_average_before": load_before}
        shutil.rmtree(d / "cp", ignore_errors=True)
        shutil.rmtree(d / "cp-all", ignore_errors=True)
        if args.s3:
            more, more_ratios, more_params = s3_rows(d, args)
            rows += more
            ratios |= more_ratios
            params |= more_params
    params["load_average_after"] = os.getloadavg()
    write_result(
        "export_tables",
        "Export with tables: tlake export --with-tables vs cp -r of the same bytes",
        rows,
        ratios,
        scale=args.scale,
        description=(__doc__ or "").split("\n\n")[1].replace("\n", " "),
        params=params,
        columns=["method", "files", "bytes", "seconds", "mb_per_s", "plan_s", "copy_s", "tables_plan_s",
                 "tables_copy_s", "tables_metadata_s", "commit_s", "table_copy_where", "table_data_files"],
        notes=["seconds: the export job itself (validation, plan, its own copy, the table phase, the root and "
               "the commit), in this process; cp -r copies blindly (no plan, no checksum, no verification).",
               "table_copy_where: where the table data files were copied (local: driver threads; auto keeps a "
               "copy of this size on the driver, by the same rule as the export's own copy phase).",
               "Files are read from the page cache on both sides; the machine has 2 cores and is shared."],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
