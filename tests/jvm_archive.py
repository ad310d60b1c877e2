"""The JVM settings of every Spark driver the tests start, and their class-data-sharing archive.

Every Spark driver JVM the tests start (the shared sessions, the Connect servers, spark-submit,
the CLI's and the jobs' own sessions, the live DAG's spark-submits) reads ``SPARK_SUBMIT_OPTS``;
`tests/conftest.py` sets it to `submit_opts()`:

* the C1 compiler only and the serial collector. The tests' JVMs live seconds to minutes on
  small data, where C2's compile threads and the parallel collector's threads cost more CPU than
  they win: a walk, orphans, expire and export on a classic local[2] session, twice, took 140
  CPU-seconds with the JVM's defaults and 77 with these;
* when `make test` has built it (``python -m tests.jvm_archive``, beside the suite's start), the
  JDK's dynamic class-data-sharing archive of the classes a Spark driver loads running our jobs
  (``-XX:SharedArchiveFile``). A driver then maps Spark's ~10,000 classes instead of loading and
  verifying them from the JARs: a session's start and first query took 23 s and 18 CPU-s, 13 s and
  11 CPU-s with it; tests/spark/test_orphans.py alone used 131 and 129 CPU-s without it, 116 and
  114 with it, and the suite starts dozens of drivers.

Only the JVM's start-up and tuning change, never what runs. The JDK checks the archive against
the class path and the JARs' sizes and times; a JVM whose class path differs (the cluster path's
own pyspark venv, a session with other JARs first) or a newer pyspark just runs without it, and
``-Xlog:cds=off`` keeps that JDK warning out of the outputs the tests read. A value of
``SPARK_SUBMIT_OPTS`` already set is kept as it is.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "build" / "spark-cds.jsa"
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def submit_opts() -> str:
    """``SPARK_SUBMIT_OPTS`` for the tests' JVMs: with the archive when it exists, or when
    ``TLAKE_TEST_JVM_ARCHIVE`` names one being built beside the suite (`make test`): until it is
    in place the JDK finds no archive there and starts without one, silently."""
    archive = os.environ.get("TLAKE_TEST_JVM_ARCHIVE") or (str(ARCHIVE) if ARCHIVE.is_file() else None)
    if archive:
        return f"{JVM_OPTS} -XX:SharedArchiveFile={archive} {_QUIET}"
    return JVM_OPTS


def _workload() -> None:
    """What the tests' drivers do: a job on the executors of a local[2] session."""
    from tests.maintenance.helpers import build_history
    from tests.spark.conftest import run
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.spark.session import get_spark

    with tempfile.TemporaryDirectory(prefix="tlake-jvm-archive-") as base:
        lh = Lakehouse.create(f"{base}/lh", order=4, node_max_bytes=4096, audit=False)
        build_history(lh, seed=1, ops=20)
        spark = get_spark("local[2]", app_name="trinitylake-jvm-archive", conf={"spark.sql.shuffle.partitions": "4"})
        # The walk is every job's first phase (node files read on executors through mapInArrow,
        # checkpoints, aggregates, a Parquet write): its classes are most of what any job loads.
        run(spark, "walk", lh, execution="distributed")
        spark.stop()


def build(out: Path) -> None:
    """Run the workload in a JVM that writes the archive when it exits, then put it at `out`."""
    import subprocess

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{JVM_OPTS} -XX:ArchiveClassesAtExit={tmp} {_QUIET}"}
    proc = subprocess.run([sys.executable, "-c", "from tests.jvm_archive import _workload; _workload()"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        sys.exit(f"tests.jvm_archive: the archive run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    os.replace(tmp, out)


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else ARCHIVE)
