"""Spark session for the jobs: classic or Spark Connect, small and quiet for tests.

* ``get_spark("local[2]")``: a classic local session;
* ``get_spark("local[2]", conf={"spark.api.mode": "connect"})``: pyspark starts a local Spark
  Connect server (the spark-connect JAR ships in the pyspark wheel) and connects to it;
* ``get_spark(remote="sc://host:15002")`` or ``SPARK_REMOTE``: an existing Connect server
  (Databricks serverless, a shared cluster), where no master is set.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trinitylake.util import pandas_back_for_pyarrow

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.driver.memory": "2g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    # Walk levels are checkpointed, so plans stay flat; this bounds the rendered plan string
    # anyway (an unbounded one exhausted a 2 GB driver heap before the checkpoints existed).
    "spark.sql.maxPlanStringLength": "100000",
}
#: For a local master only: Delta and Spark size these for clusters. VACUUM lists the table's
#: folders in `parallelPartitionDiscovery.parallelism` tasks (10,000) and Delta rebuilds a
#: snapshot's state in `snapshotPartitions` (50): on `local[2]` the control table's
#: compaction (OPTIMIZE + VACUUM) took 66 s for a table of 5 files, 8.8 s with these.
LOCAL_CONF = {
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
    "spark.databricks.delta.snapshotPartitions": "4",
}
# Properties a Connect client cannot set on a running server (they are the server's own).
_SERVER_ONLY = ("spark.ui.", "spark.driver.memory", "spark.python.worker.reuse", "spark.master")

if TYPE_CHECKING:
    from trinitylake.util import Session


def get_spark(master: str | None = None, app_name: str = "trinitylake", conf: dict[str, str] | None = None,
              remote: str | None = None, delta: bool = False) -> Session:
    """Get or create the SparkSession. On a cluster (spark-submit) the master comes from there;
    with `remote` (or ``SPARK_REMOTE``) the session is a client of that Connect server.

    `delta`: also put Delta's Spark JARs on ``spark.jars`` (those ``make jars`` fetched, see
    `delta_conf`) and configure Delta's SQL extension and catalog. Only a new session gets
    them: JARs cannot be added to a running JVM.
    """
    from pyspark.sql import SparkSession  # only now: importing pyspark costs seconds

    pandas_back_for_pyarrow()  # pyspark's Arrow conversions on the driver use pandas
    # Executors must run the same interpreter as the driver (the venv's, with our package).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    remote = remote or os.environ.get("SPARK_REMOTE") or None
    builder: Any = SparkSession.builder.appName(app_name)  # classic, or the Connect builder below
    # spark.api.mode=connect without a remote: a local Connect server, on local[*] unless a
    # master is named. A classic session without a master stays as it is (spark-submit's).
    local_connect = (not remote and (conf or {}).get("spark.api.mode") == "connect"
                     and not os.environ.get("PYSPARK_GATEWAY_PORT"))
    if local_connect:
        master = master or "local[*]"
    local_conf = LOCAL_CONF if not remote and (master or "").startswith("local") else {}
    settings = {**DEFAULT_CONF, **local_conf, **(delta_conf() if delta and not remote else {}), **(conf or {})}
    if not any("log4j" in settings.get(k, "") for k in ("spark.driver.extraJavaOptions",)):
        # Spark's console noise down to warnings (and no "default log4j profile" banner); the
        # JVM reads it at start, which is the only moment without SparkContext.setLogLevel.
        settings["spark.driver.extraJavaOptions"] = (
            settings.get("spark.driver.extraJavaOptions", "") + f" -Dlog4j2.configurationFile={_log4j_file()}").strip()
    if remote:
        # The Connect builder itself: it works beside a classic session in the same process.
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

        builder = RemoteSparkSession.builder.appName(app_name).remote(remote)
        settings = {k: v for k, v in settings.items() if not k.startswith(_SERVER_ONLY) and k != "spark.api.mode"}
    elif master:
        builder = builder.master(master)
    for k, v in settings.items():
        builder = builder.config(k, v)
    if local_connect:
        local = _local_connect(master or "local[*]", app_name, settings)
        if local is not None:
            return local
    with warnings.catch_warnings():
        # A local Connect server gets these settings at start-up; pyspark then also tries to set
        # them on the session, which the server refuses with one warning each.
        warnings.filterwarnings("ignore", message="Failed to set spark")
        spark = builder.getOrCreate()
    return spark


#: The Delta artifact for pyspark 4.2 (Maven Central serves 4.4.0 for Spark 4.2; the Python
#: delta-spark 4.4.1 asks for a 4.4.1 JAR that is not published there).
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
DELTA_EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def delta_jars_dir() -> Path:
    """Folder of Delta's JARs: ``TLAKE_SPARK_JARS`` or ``spark-jars/lib`` of the checkout."""

    env = os.environ.get("TLAKE_SPARK_JARS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "spark-jars" / "lib"


def delta_conf() -> dict[str, str]:
    """Spark properties for Delta: the fetched JARs on ``spark.jars`` (minus those pyspark ships
    in a newer version: Delta's POM names older Hadoop/Parquet/Jackson/Scala, which must not
    shadow Spark's own), Delta's SQL extension and catalog, and Parquet timestamps in
    microseconds (what delta-rs writes and reads as the same type).

    Without fetched JARs the artifact is resolved by Spark (``spark.jars.packages``), which
    needs a reachable repository; a cluster that already has Delta ignores both."""

    import pyspark  # only now: importing pyspark costs seconds

    conf = {
        "spark.sql.extensions": DELTA_EXTENSIONS,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }
    folder = delta_jars_dir()
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    if not jars:
        conf["spark.jars.packages"] = DELTA_PACKAGE
        return conf
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    conf["spark.jars"] = ",".join(str(p) for p in jars if _artifact(p.name) not in shipped)
    return conf


def _artifact(file_name: str) -> str:
    """``jackson-core-2.13.5.jar`` -> ``jackson-core``."""

    return re.sub(r"-\d[\w.]*(-\d+)?\.jar$", "", file_name)


def _free_port() -> int:

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local_connect(master: str, app_name: str, settings: dict[str, str]) -> Session | None:
    """A client of a local Spark Connect server started on a free port.

    pyspark's own ``spark.api.mode=connect`` path always binds and dials port 15002, so a second
    job (or a test session) on the same machine fails to start. This does the same two steps
    (start a classic session with the Connect plugin, connect to it) with a free port; on a
    pyspark without the helper it returns None and the caller uses pyspark's path.
    """
    try:
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession
    except ImportError:
        return None
    start = getattr(RemoteSparkSession, "_start_connect_server", None)
    if start is None:
        return None
    port = _free_port()
    opts: dict[str, Any] = {k: v for k, v in settings.items() if k != "spark.api.mode"}
    opts.update({"spark.app.name": app_name, "spark.connect.grpc.binding.port": str(port)})
    os.environ["SPARK_LOCAL_REMOTE"] = "1"
    start(master, opts)  # leaves only the runtime SQL settings in opts
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    builder = RemoteSparkSession.builder.remote(f"sc://localhost:{port}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Failed to set spark")
        return builder.config(map=opts).getOrCreate()


def _log4j_file() -> str:
    """The log4j2 configuration shipped with the package (level from ``TLAKE_SPARK_LOG_LEVEL``)."""

    level = os.environ.get("TLAKE_SPARK_LOG_LEVEL", "WARN").upper()
    shipped = Path(__file__).with_name("log4j2.properties")
    if level == "WARN":
        return str(shipped)

    path = Path(tempfile.gettempdir()) / f"tlake-log4j2-{level}.properties"
    path.write_text(shipped.read_text().replace("= warn", f"= {level.lower()}"))
    return str(path)
