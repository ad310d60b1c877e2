"""The tables' own maintenance (issue 46): ``tables_expire`` and ``tables_orphans`` against the
best per-table tool that runs here, PyIceberg, called table by table, on the same tables.

One lakehouse of N Iceberg tables with S snapshots each is built once (one append per table per
round, 25 tables per multi-table transaction; `tests.iceberg.tables_setup.build_tables`), the
lakehouse's own expire keeps only its latest version (nothing is deferred), and the result is
kept as a pristine copy. Each tool then runs on a fresh copy of it at the same path (table
metadata names absolute paths), in one process, one after the other:

* **expire**: ours, one run over every table (plan, one lakehouse version per 100 tables, then
  delete the files of the expired snapshots), against PyIceberg's
  ``table.maintenance.expire_snapshots().older_than(now).commit()`` per table (one lakehouse
  version per table; PyIceberg removes the snapshots from the metadata and deletes no file, so
  the baseline does less work than ours). PyIceberg runs on its own FileIO (``py-io-impl``
  ``pyiceberg.io.pyarrow.PyArrowFileIO``), ours on the project's storage engine
  (`trinitylake.iceberg.fileio`, the catalog's default). Ours reads each kept snapshot's
  manifest list and the expired ones no kept snapshot covers (`TableFiles.uncovered`: here,
  appends whose manifests the current snapshot still names, so their lists are deleted
  unread). ``versions``: the lakehouse versions each tool's run created, read from the
  lakehouse before and after it. Both tools' imports are made before either is timed;
* **orphans**, after the expire: one old orphan file planted per table; ours, one run, against
  a per-table PyIceberg pass (PyIceberg has no orphan removal): the table's reachable files from
  ``inspect.all_manifests()`` and ``inspect.all_files()`` plus its manifest lists and metadata
  files, a listing of its location, and deletes of the old unreferenced files.

Our rows carry the job's phases (``result.seconds``: commit, live set, delete; live set, list,
delete) and where the manifest reads and deletes ran (``execution=auto``).

Iceberg's own Spark actions (``--spark-action N``): the main environment's pyspark 4.2 cannot
load any iceberg-spark-runtime Maven serves (tests/rest_catalog/test_spark_sql.py), so Spark 4.1
with ``iceberg-spark-runtime-4.1_2.13`` (``make spark41``) reaches the lakehouse through the
catalog server (``tlake catalog serve``, Iceberg's REST protocol) and calls
``system.expire_snapshots`` and ``system.remove_orphan_files`` table by table, on the first N
tables of a third copy (session start not counted); its rows give seconds per table. The server
serves every table with ``gc.enabled=false`` (``rest_catalog/served.py``: Iceberg's procedures
would delete files an earlier lakehouse version reads), so the job first opts each table in with
an explicit ``gc.enabled=true``, as a table's owner would, before the clock starts.

    python -m bench.bench_tables_maintenance [--scale small|large] [--quick] [--tables N] [--snapshots S]
        [--latency-ms 20] [--rebuild] [--spark-action N]

``--scale large`` is the issue's target, 1,000 tables x 20 snapshots (the build, ~20 min here, is
kept under bench/results/tmp and reused by the next run unless ``--rebuild``); ``--quick``:
20 tables x 5 snapshots (the tests' scale). ``--latency-ms 20`` runs on s3s-fs behind a proxy
adding 20 ms to each request (the lakehouse built and expired on the server directly) and
reports the requests per table the proxy counted, for both tools. Both run in this process, so
the proxy runs in a process of its own (`bench.objstore.ProcessDelayProxy`; results:
``tables_maintenance_s3``, module ``tables_maintenance``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.common import TMP_DIR, Timer, parse_args, ratio, write_result
from tests.iceberg.tables_setup import build_tables, expire_lakehouse, open_catalog

SIZES = {
    "quick": {"tables": 20, "snapshots": 5},
    "small": {"tables": 50, "snapshots": 20},
    "large": {"tables": 1000, "snapshots": 20},
}
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
OLD = time.time() - 30 * 86_400
#: The lakehouse's transaction TTL: its expire (after waiting it out) keeps only the latest
#: version; a multi-table commit of CHUNK appends fits in it on a loaded machine.
TTL_MS = 60_000
CHUNK = 25
EXPIRE_TOOLS = ("tlake tables expire-snapshots", "PyIceberg expire_snapshots per table")
#: PyIceberg's own FileIO, for its baseline (the catalog's default is the project's).
PYICEBERG_IO = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
ORPHAN_TOOLS = ("tlake tables remove-orphans", "PyIceberg inspect + listing per table")


def _extra(p: Any) -> None:
    p.add_argument("--quick", action="store_true", help="20 tables x 5 snapshots (the tests' scale)")
    p.add_argument("--tables", type=int, default=None)
    p.add_argument("--snapshots", type=int, default=None)
    p.add_argument("--rebuild", action="store_true", help="build the tables again even when a kept build exists")
    p.add_argument(
        "--spark-action",
        type=int,
        default=0,
        metavar="N",
        help="also run Iceberg's Spark procedures (Spark 4.1, through the catalog server) on the first N tables",
    )
    p.add_argument(
        "--latency-ms",
        type=float,
        default=None,
        help="run on s3s-fs behind a proxy adding this delay (requests per table) instead of local files",
    )


def names_of(tables: int) -> list[str]:
    return [f"b.t{i:05d}" for i in range(tables)]


class Copies:
    """A pristine folder (a built lakehouse, or a store's bucket folder) and the working copy at
    the path the tables were built at, restored before each tool runs."""

    def __init__(self, work: Path, pristine: Path):
        self.work, self.pristine = work, pristine

    def keep(self) -> None:
        if self.pristine.exists():
            shutil.rmtree(self.pristine)
        self.pristine.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(self.work), str(self.pristine)], check=True)

    def restore(self) -> None:
        if self.work.exists():
            shutil.rmtree(self.work)
        subprocess.run(["cp", "-a", str(self.pristine), str(self.work)], check=True)


def local_build(tables: int, snapshots: int, rebuild: bool) -> tuple[str, Copies, float | None]:
    """The lakehouse of `tables` x `snapshots` on local files, built or reused."""
    base = (TMP_DIR / f"tables_maintenance-{tables}x{snapshots}").resolve()  # the path the tables were built at
    copies = Copies(base / "work" / "lh", base / "pristine" / "lh")
    done = base / "built.json"
    if done.exists() and copies.pristine.exists() and not rebuild:
        return str(copies.work), copies, json.loads(done.read_text()).get("build_seconds")
    shutil.rmtree(base, ignore_errors=True)
    from trinitylake.lakehouse import Lakehouse

    uri = str(copies.work)
    Lakehouse.create(uri, audit=False, txn_ttl_millis=TTL_MS)
    with Timer() as t:
        build_tables(uri, names_of(tables), snapshots, SCHEMA, chunk=CHUNK)
    expire_lakehouse(uri, TTL_MS)
    copies.keep()
    done.write_text(json.dumps({"tables": tables, "snapshots": snapshots, "build_seconds": round(t.seconds, 1)}))
    return uri, copies, round(t.seconds, 1)


def run_ours(job: str, uri: str, **overrides: Any) -> Any:
    from trinitylake.config import load_job_config
    from trinitylake.jobs.runner import run_job

    cfg = load_job_config(job, overrides={"lakehouse": uri, **overrides}, env={})
    return run_job(job, cfg, audit=False)


def pyiceberg_expire(uri: str, names: list[str], storage: dict[str, str] | None = None) -> int:
    cat = open_catalog(uri, "bench", storage=storage, **PYICEBERG_IO)
    now = datetime.now(UTC)
    expired = 0
    for n in names:
        t = cat.load_table(n)
        before = len(t.metadata.snapshots)
        t.maintenance.expire_snapshots().older_than(now).commit()
        expired += before - len(cat.load_table(n).metadata.snapshots)
    return expired


def pyiceberg_orphans(uri: str, names: list[str], cutoff_s: float) -> int:
    cat = open_catalog(uri, "bench", **PYICEBERG_IO)
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


def latest_version(uri: str, storage: dict[str, str] | None = None) -> int:
    """The lakehouse's latest version (read outside the timings: `versions` = after - before)."""
    from trinitylake.lakehouse import Lakehouse

    return Lakehouse.open(uri, storage_options=storage, audit=False).latest_version()


def plant(uri: str, names: list[str]) -> None:
    for n in names:
        d = Path(uri) / "warehouse" / "b" / n.split(".")[1] / "data"
        d.mkdir(parents=True, exist_ok=True)
        p = d / "orphan-old.parquet"
        p.write_bytes(b"PAR1junkPAR1")
        os.utime(p, (OLD, OLD))


#: The checkout whose Spark 4.1 environment runs Iceberg's procedures (``make spark41``): this
#: one, or ``TLAKE_SPARK41_ROOT`` (a benchmark run from a clean worktree of another checkout).
SPARK_ROOT = Path(os.environ.get("TLAKE_SPARK41_ROOT") or Path(__file__).resolve().parents[1])
SPARK_PY = SPARK_ROOT / ".venv-spark41" / "bin" / "python"
SPARK_JAR = SPARK_ROOT / "build" / "iceberg-spark41" / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
#: The Spark 4.1 side: Iceberg's procedures table by table through the catalog server.
SPARK_JOB = r"""
import json, os, sys, time
from pyspark.sql import SparkSession
jar, url, names, expire_before, orphans_before = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], sys.argv[5]
t0 = time.time()
spark = (SparkSession.builder.master("local[2]").appName("bench-iceberg-actions")
         .config("spark.jars", jar).config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
         .config("spark.sql.catalog.tl", "org.apache.iceberg.spark.SparkCatalog")
         .config("spark.sql.catalog.tl.type", "rest").config("spark.sql.catalog.tl.uri", url)
         .config("spark.sql.catalog.tl.token", os.environ["TLAKE_CATALOG_TOKEN"]).getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.sql("SHOW NAMESPACES IN tl").collect()
# The catalog serves its tables with gc.enabled=false (Iceberg's procedures would delete files an
# earlier lakehouse version reads); a table's owner opts in with an explicit true, as here (the
# bench's lakehouse keeps only its latest version), before the clock starts.
for n in names:
    spark.sql(f"ALTER TABLE tl.{n} SET TBLPROPERTIES ('gc.enabled' = 'true')")
out = {"session_s": time.time() - t0}
t0 = time.time()
deleted = 0
for n in names:
    r = spark.sql(f"CALL tl.system.expire_snapshots(table => '{n}', older_than => TIMESTAMP '{expire_before}', "
                  "retain_last => 1)").collect()[0].asDict()
    deleted += sum(int(v) for k, v in r.items() if k.endswith("_count"))
out.update(expire_s=time.time() - t0, expire_deleted=deleted)
t0 = time.time()
orphans = 0
for n in names:
    orphans += len(spark.sql(f"CALL tl.system.remove_orphan_files(table => '{n}', older_than => TIMESTAMP "
                             f"'{orphans_before}')").collect())
out.update(orphans_s=time.time() - t0, orphans_deleted=orphans)
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
"""


def spark_action(uri: str, names: list[str], work: Path) -> dict[str, Any]:
    """Iceberg's ``expire_snapshots`` then (after planting) ``remove_orphan_files`` on `names`,
    one procedure call per table, by Spark 4.1 through the catalog server on `uri`."""
    from tests.rest_catalog.server import start

    missing = [str(p) for p in (SPARK_PY, SPARK_JAR) if not p.exists()]
    if missing:
        raise SystemExit(f"--spark-action needs the Spark 4.1 environment (make spark41): missing {missing}")
    plant(uri, names)
    work.mkdir(parents=True, exist_ok=True)
    job = work / "iceberg_actions.py"
    job.write_text(SPARK_JOB)
    server = start(uri, work, audit=False)
    try:
        env = {**os.environ, "TLAKE_CATALOG_TOKEN": server.token}
        env.pop("PYTHONPATH", None)
        fmt = "%Y-%m-%d %H:%M:%S"  # the Spark session's time zone is UTC
        before = datetime.now(UTC).strftime(fmt)
        orphans_before = datetime.fromtimestamp(time.time() - 3 * 86_400, UTC).strftime(fmt)
        r = subprocess.run(
            [str(SPARK_PY), str(job), str(SPARK_JAR), server.url, json.dumps(names), before, orphans_before],
            capture_output=True,
            text=True,
            timeout=3600,
            env=env,
        )
    finally:
        server.stop()
    found = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    if r.returncode != 0 or not found:
        raise RuntimeError(f"the Spark 4.1 job failed ({r.returncode}): {r.stderr[-3000:]}")
    return json.loads(found[-1][len("RESULT ") :])


def _phases(result: Any) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in result.seconds.items() if k != "total")


def _where(result: Any) -> str:
    ex = result.details.get("execution") or {}
    return ", ".join(f"{k} {v.get('where')}" for k, v in sorted(ex.items()) if k.startswith("tables.")) or "-"


def row(job: str, tool: str, tables: int, seconds: float, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "job": job,
        "tool": tool,
        "tables": tables,
        "snapshots_expired": None,
        "files_deleted": 0,
        "versions": 0,
        "seconds": round(seconds, 2),
        "phases": "-",
        "where": "-",
    }
    out.update(kw)
    return out


def warm_imports() -> None:
    """Import what each tool runs before either is timed. With a kept build (nothing built in
    this process) the first tool timed would otherwise also pay PyIceberg's own import, which
    both use (about 1.2 s here, more than either's expiry of 50 tables), and ours pandas, which
    pyarrow imports at its first conversion of a Python list (0.4-0.9 s)."""
    import pandas  # noqa: F401
    import pyiceberg.catalog.sql  # noqa: F401
    import pyiceberg.table  # noqa: F401

    import trinitylake.jobs.tables_expire.job  # noqa: F401
    import trinitylake.jobs.tables_orphans.job  # noqa: F401


def on_local_files(args: Any, size: dict[str, int]) -> int:
    uri, copies, build_s = local_build(size["tables"], size["snapshots"], args.rebuild)
    warm_imports()
    names = names_of(size["tables"])
    rows: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}

    # Ours: expire, then orphans, on a fresh copy.
    copies.restore()
    before = latest_version(uri)
    with Timer() as t:
        # Every snapshot, seconds old: below the transaction TTL, as PyIceberg's expiry at "now" (no
        # transaction runs while the benchmark does).
        r = run_ours("tables_expire", uri, older_than=0, unsafe_min_age=True, retain_last=1)
    seconds[EXPIRE_TOOLS[0]] = t.seconds
    versions = latest_version(uri) - before
    rows.append(
        row(
            "expire",
            EXPIRE_TOOLS[0],
            len(names),
            t.seconds,
            snapshots_expired=r.counts["snapshots_expired"],
            files_deleted=r.counts.get("deleted", 0),
            versions=versions,
            phases=_phases(r),
            where=_where(r),
        )
    )
    plant(uri, names)
    with Timer() as t:
        o = run_ours("tables_orphans", uri)
    seconds[ORPHAN_TOOLS[0]] = t.seconds
    rows.append(
        row(
            "orphans",
            ORPHAN_TOOLS[0],
            len(names),
            t.seconds,
            files_deleted=o.counts.get("deleted", 0),
            phases=_phases(o),
            where=_where(o),
        )
    )

    # PyIceberg, table by table, on a fresh copy of the same tables.
    copies.restore()
    before = latest_version(uri)
    with Timer() as t:
        n = pyiceberg_expire(uri, names)
    seconds[EXPIRE_TOOLS[1]] = t.seconds
    rows.append(row("expire", EXPIRE_TOOLS[1], len(names), t.seconds, snapshots_expired=n,
                    versions=latest_version(uri) - before))
    plant(uri, names)
    with Timer() as t:
        m = pyiceberg_orphans(uri, names, time.time() - 3 * 86_400)
    seconds[ORPHAN_TOOLS[1]] = t.seconds
    rows.append(row("orphans", ORPHAN_TOOLS[1], len(names), t.seconds, files_deleted=m))
    if args.spark_action:
        some = names[: args.spark_action]
        copies.restore()
        got = spark_action(uri, some, copies.work.parent.parent / "spark")
        for job, tool, secs, deleted in (
            ("expire", "Iceberg Spark expire_snapshots per table", got["expire_s"], got["expire_deleted"]),
            ("orphans", "Iceberg Spark remove_orphan_files per table", got["orphans_s"], got["orphans_deleted"]),
        ):
            rows.append(row(job, tool, len(some), secs, files_deleted=deleted, phases=f"session {got['session_s']:.1f} (not counted)"))
    if not args.keep:
        shutil.rmtree(copies.work, ignore_errors=True)

    label = f"{len(names)} tables x {size['snapshots']} snapshots"
    per_table = {r["tool"]: r["seconds"] / r["tables"] for r in rows}
    ratios = {
        f"expire seconds, ours / PyIceberg per table, {label}": ratio(seconds[EXPIRE_TOOLS[0]], seconds[EXPIRE_TOOLS[1]]),
        f"orphans seconds, ours / PyIceberg per table, {label}": ratio(
            seconds[ORPHAN_TOOLS[0]], seconds[ORPHAN_TOOLS[1]]
        ),
    }
    if args.spark_action:
        for job, tool, spark_tool in (
            ("expire", EXPIRE_TOOLS[0], "Iceberg Spark expire_snapshots per table"),
            ("orphans", ORPHAN_TOOLS[0], "Iceberg Spark remove_orphan_files per table"),
        ):
            ratios[f"{job} seconds per table, ours ({len(names)} tables) / Iceberg's Spark procedure "
                   f"({args.spark_action} tables)"] = ratio(per_table[tool], per_table[spark_tool])
    write_result(
        "tables_maintenance",
        "Tables' maintenance: expire-snapshots and remove-orphans vs PyIceberg per table",
        rows,
        ratios,
        scale="small" if args.quick else args.scale,
        params={**size, "build_seconds": build_s, "quick": bool(args.quick)},
        description="\n\n".join((__doc__ or "").split("\n\n")[1:5]),
        notes=[
            "PyIceberg's expiry deletes no file; ours also deletes the expired snapshots' manifest lists "
            "and manifests (and data files no snapshot reaches).",
            "Local files, one process, every tool in the same run on copies of the same build."
            + (
                f" Iceberg's Spark procedures ran on the first {args.spark_action} tables only (about 3-4 s a table "
                "here): their ratios compare seconds per table."
                if args.spark_action
                else " Iceberg's Spark procedures: not measured (--spark-action N)."
            ),
        ],
    )
    for x in rows:
        print(x)
    print(ratios)
    return 0


def on_latency_store(args: Any, size: dict[str, int]) -> int:
    """Requests per table and seconds of both tools on s3s-fs behind a proxy adding
    `--latency-ms` to each request; the lakehouse is built and expired on the server directly
    (no delay), its bucket folder kept and restored for each tool. The proxy counts every
    client's requests (PyIceberg's FileIO included)."""
    from bench.objstore import latency_store

    tables, snapshots, delay_ms = size["tables"], size["snapshots"], float(args.latency_ms)
    names = names_of(tables)
    rows: list[dict[str, Any]] = []
    where = f"S3, {delay_ms:g} ms"
    base = TMP_DIR / f"tables_maintenance_s3-{tables}x{snapshots}"
    shutil.rmtree(base, ignore_errors=True)
    with latency_store(base / "s3", delay_ms, proxy_kind="process") as store:
        saved = {k: os.environ.get(k) for k in store.env}
        os.environ.update(store.env)
        try:
            direct = {"endpoint_url": store.direct_url, "key": store.key, "secret": store.secret}
            slow = {**direct, "endpoint_url": store.endpoint_url}
            bucket = store.bucket_dir("tables-bench")  # a valid S3 bucket name (3-63 characters)
            copies = Copies(Path(bucket), base / "pristine" / "tables-bench")
            uri = "s3://tables-bench/lh"
            from trinitylake.lakehouse import Lakehouse

            Lakehouse.create(uri, storage_options=direct, audit=False, txn_ttl_millis=TTL_MS)
            build_tables(uri, names, snapshots, SCHEMA, storage=direct, chunk=CHUNK)
            expire_lakehouse(uri, TTL_MS, direct)
            copies.keep()

            def measure(tool: str, job: str, fn: Callable[[], tuple[int | None, int, Any]]) -> None:
                before = latest_version(uri, direct)
                store.proxy.reset_stats()
                with Timer() as t:
                    expired, deleted, result = fn()
                stats = store.proxy.stats()
                n = stats["requests"]
                versions = latest_version(uri, direct) - before
                rows.append(
                    row(
                        job,
                        tool,
                        tables,
                        t.seconds,
                        store=where,
                        snapshots_expired=expired,
                        files_deleted=deleted,
                        versions=versions,
                        requests=n,
                        requests_per_table=round(n / tables, 1),
                        requests_by_kind=", ".join(f"{k} {v}" for k, v in sorted((stats.get("requests_by_kind") or {}).items())),
                        phases=_phases(result) if result is not None else "-",
                        where=_where(result) if result is not None else "-",
                    )
                )

            def ours_expire() -> tuple[int | None, int, Any]:
                r = run_ours("tables_expire", uri, older_than=0, unsafe_min_age=True, retain_last=1, storage_options=slow)
                return r.counts["snapshots_expired"], r.counts.get("deleted", 0), r

            def ours_orphans() -> tuple[int | None, int, Any]:
                # S3 cannot back-date a file: the planted orphans count as old with a zero age floor.
                o = run_ours("tables_orphans", uri, storage_options=slow, older_than=0, unsafe_min_age=True)
                return None, o.counts.get("deleted", 0), o

            copies.restore()
            measure(EXPIRE_TOOLS[0], "expire", ours_expire)
            from trinitylake.storage import Storage

            planted = Storage(uri, direct)
            for n in names:
                planted.write(f"warehouse/b/{n.split('.')[1]}/data/orphan-old.parquet", b"PAR1junkPAR1")
            time.sleep(1.0)  # older than the run's start by the store's clock too
            measure(ORPHAN_TOOLS[0], "orphans", ours_orphans)
            copies.restore()
            measure(EXPIRE_TOOLS[1], "expire", lambda: (pyiceberg_expire(uri, names, slow), 0, None))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    ours, base_row = rows[0], rows[2]
    lat = f"{delay_ms:g} ms"
    ratios = {
        f"expire seconds at {lat}, ours / PyIceberg per table, {tables} tables x {snapshots} snapshots": ratio(
            ours["seconds"], base_row["seconds"]
        ),
        f"expire requests per table at {lat}, ours / PyIceberg per table": ratio(
            ours["requests_per_table"], base_row["requests_per_table"]
        ),
    }
    write_result(
        "tables_maintenance_s3",
        "Tables' maintenance on a latency store: requests per table",
        rows,
        ratios,
        scale=args.scale,
        params={**size, "latency_ms": delay_ms},
        module="tables_maintenance",
        notes=[
            "Requests counted by the delaying proxy (every client, PyIceberg's FileIO included). Ours deletes "
            "the expired snapshots' files too; PyIceberg's expiry deletes none. The orphans run has a zero age "
            "floor (--unsafe-min-age): S3 cannot back-date the planted files."
        ],
    )
    for x in rows:
        print(x)
    print(ratios)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args("tables_maintenance", argv, _extra)
    size = dict(SIZES["quick" if args.quick else args.scale])
    size["tables"] = args.tables or size["tables"]
    size["snapshots"] = args.snapshots or size["snapshots"]
    if args.latency_ms is not None:
        return on_latency_store(args, size)
    return on_local_files(args, size)


if __name__ == "__main__":
    raise SystemExit(main())
