"""One process with a Delta-enabled Spark session (Delta's JARs from `make jars`) that exercises
the control table's Spark engine against delta-rs; prints one JSON object of what it observed.

A process of its own because Delta's JARs must be on the JVM's class path from its start: the
test run's shared session (tests/conftest.py) has none, and a JVM cannot be restarted in-process.

    python tests/control/_delta_worker.py WORKDIR
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.control._workers for the spawned delta-rs appenders

from trinitylake.control import AuditRecord, ControlTable  # noqa: E402
from trinitylake.control.spark_engine import session_has_delta  # noqa: E402
from trinitylake.spark.session import get_spark  # noqa: E402


def rec(seq: int, rtype: str, txn: str, engine: str) -> AuditRecord:
    return AuditRecord(seq, rtype, txn, f"test {engine}", {"engine": engine}, metrics={"n": float(seq)},
                       changes=[f"by {engine}"])


def append_one(ct: ControlTable, engine: str) -> int:
    txn = f"{engine}-{time.monotonic_ns()}"
    seq = ct.seq.allocate(txn)
    ct.append([rec(seq, "begin", txn, engine), rec(seq, "committed", txn, engine)])
    return seq


def main(wd: Path) -> dict:
    out: dict = {}
    t0 = time.perf_counter()
    spark = get_spark("local[2]", app_name="tlake-delta-tests", delta=True,
                      conf={"spark.sql.warehouse.dir": str(wd / "warehouse"), "spark.sql.shuffle.partitions": "2"})
    out["session_seconds"] = time.perf_counter() - t0
    out["session_has_delta"] = session_has_delta(spark)

    # 1. Spark creates and appends, delta-rs appends, Spark appends again: one table, one seq line.
    uri = str(wd / "lh" / "_control")
    by_spark = ControlTable(uri, engine="spark", spark=spark)
    by_rs = ControlTable(uri, engine="delta-rs")
    auto = ControlTable(uri)  # auto: the active session has Delta
    out["auto_engine"] = auto.engine
    seqs = [append_one(by_spark, "spark"), append_one(by_rs, "delta-rs"), append_one(by_spark, "spark")]
    out["seqs"] = seqs
    out["rows_spark"] = [(r.txn_seq, r.record_type, r.command) for r in by_spark.records()]
    out["rows_rs"] = [(r.txn_seq, r.record_type, r.command) for r in by_rs.records()]
    out["full_equal"] = [r.__dict__ for r in by_spark.records()] == [r.__dict__ for r in by_rs.records()]
    out["format_delta_count"] = spark.read.format("delta").load(uri).count()
    out["sql_seqs"] = [r[0] for r in spark.sql(f"SELECT DISTINCT txn_seq FROM delta.`{uri}` ORDER BY txn_seq").collect()]
    out["history_ops"] = [r["operation"] for r in by_spark.delta_history().orderBy("version").collect()]
    out["dataframe_cols"] = by_spark.dataframe().columns

    # 2. A table delta-rs created is appended by Spark.
    uri2 = str(wd / "lh2" / "_control")
    rs2 = ControlTable(uri2, engine="delta-rs")
    s1 = append_one(rs2, "delta-rs")
    s2 = append_one(ControlTable(uri2, engine="spark", spark=spark), "spark")
    out["rs_created"] = [(r.txn_seq, r.command) for r in ControlTable(uri2, engine="delta-rs").records()]
    out["rs_created_seqs"] = [s1, s2]

    # 3. A catalog table name in the local spark_catalog (Delta's catalog, warehouse dir).
    spark.sql("CREATE SCHEMA IF NOT EXISTS ops")
    named = ControlTable(str(wd / "lh3" / "_control"), table="spark_catalog.ops.trinitylake_control", spark=spark)
    out["named_engine"] = named.engine
    out["named_seqs"] = [append_one(named, "spark"), append_one(named, "spark")]
    out["named_rows"] = spark.table("spark_catalog.ops.trinitylake_control").count()
    out["named_location"] = spark.sql("DESCRIBE DETAIL spark_catalog.ops.trinitylake_control").collect()[0]["location"]
    out["named_markers"] = sorted(p.name for p in (wd / "lh3" / "_control" / "_seq").iterdir() if p.name.isdigit())
    out["named_read_back"] = [(r.txn_seq, r.record_type) for r in named.records()]

    # 4. Concurrent appends: two Spark threads here and two delta-rs processes, same table.
    uri4 = str(wd / "lh4" / "_control")
    ct4 = ControlTable(uri4, engine="spark", spark=spark)
    ct4.ensure()
    n = 2
    go_at = time.time() + 2.0
    from tests.control._workers import append_many

    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        pending = [pool.apply_async(append_many, (uri4, None, w, n, go_at)) for w in (1, 2)]

        def spark_appender() -> None:
            while time.time() < go_at:
                time.sleep(0.005)
            for _ in range(n):
                append_one(ct4, "spark")

        threads = [threading.Thread(target=spark_appender) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done = [p.get(timeout=300) for p in pending]
    rows4 = ControlTable(uri4, engine="delta-rs").records()
    out["concurrent_expected_rows"] = 2 * (sum(done) + 2 * n)
    out["concurrent_rows"] = len(rows4)
    out["concurrent_distinct_seqs"] = len({r.txn_seq for r in rows4})
    out["concurrent_spark_rows"] = spark.read.format("delta").load(uri4).count()

    # 5. Compaction through Spark (OPTIMIZE + VACUUM); the rows stay.
    m = by_spark.compact(retention_hours=0, prune_seq_keep=None)
    out["compact_version"] = m.get("version")
    out["rows_after_compact"] = len(ControlTable(uri, engine="delta-rs").records())
    spark.stop()
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(Path(sys.argv[1])), default=str))
