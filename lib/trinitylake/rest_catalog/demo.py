"""The catalog server's demo: serve a lakehouse with `tlake catalog serve`, query its Iceberg
tables with Spark SQL (pyspark 4.1 in ``.venv-spark41``), stop the server.

Spark fetches Iceberg's runtime itself, as Spark users do: ``spark.jars.packages`` resolves
:data:`ICEBERG_PACKAGE` from Maven Central through Ivy into :data:`IVY_DIR` (git-ignored; about
30 s the first time, then from that cache). Neither Maven nor apt-get is needed.

`serve_and_query(lakehouse)` does it for an existing lakehouse holding the demo's ``shop``
tables (`trinitylake.demo.add_iceberg_tables`): the last step of `make demo`, and all of
`make demo-catalog` (``python -m trinitylake.demo --catalog-only``) on a small lakehouse.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

console = Console()

SPARK_PYTHON = ".venv-spark41/bin/python"
#: Iceberg's Spark runtime for Spark 4.1, as Spark's ``--packages`` names it.
ICEBERG_PACKAGE = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
#: Ivy's cache and resolved JARs (``spark.jars.ivy``), under the git-ignored build/.
IVY_DIR = "build/ivy"

#: What Spark runs against the server (its own process, in the Spark 4.1 environment).
SPARK_SQL = '''
import os, sys
from pyspark.sql import SparkSession
package, ivy, url = sys.argv[1], sys.argv[2], sys.argv[3]
spark = (SparkSession.builder.master("local[2]").appName("tlake-catalog-demo")
         .config("spark.jars.packages", package).config("spark.jars.ivy", ivy)
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
         .config("spark.sql.catalog.tl", "org.apache.iceberg.spark.SparkCatalog")
         .config("spark.sql.catalog.tl.type", "rest").config("spark.sql.catalog.tl.uri", url)
         .config("spark.sql.catalog.tl.token", os.environ["TLAKE_CATALOG_TOKEN"])
         .config("spark.log.level", "ERROR").getOrCreate())
for sql in ["SHOW TABLES IN tl.shop",
            "SELECT region, count(*) AS orders, round(sum(amount), 2) AS amount FROM tl.shop.orders GROUP BY region ORDER BY region",
            "INSERT INTO tl.shop.orders VALUES (1000, 12.5, 'eu')",
            "SELECT count(*) AS orders_after_insert FROM tl.shop.orders",
            "SELECT snapshot_id, operation FROM tl.shop.orders.snapshots ORDER BY committed_at"]:
    print("spark-sql> " + sql, flush=True)
    spark.sql(sql).show(truncate=False)
spark.stop()
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_and_query(lakehouse: str, spark_python: str = SPARK_PYTHON, package: str = ICEBERG_PACKAGE,
                    ivy_dir: str = IVY_DIR, timeout_s: float = 600) -> int:
    """Start `tlake catalog serve` on the lakehouse (a fresh token, a free port of 127.0.0.1),
    run the demo's Spark SQL against it (Iceberg's runtime `package` fetched by Spark through
    Ivy into `ivy_dir`), stop it; 0 when Spark's queries all ran."""
    if not Path(spark_python).exists():
        console.print(f"[red]the Spark 4.1 environment is missing ({spark_python}): run `make spark41-venv`[/red]")
        return 1
    ivy = str(Path(ivy_dir).resolve())
    if not Path(ivy, "jars").is_dir():
        console.print(f"Spark fetches {package} through Ivy into {ivy} (about 30 s, once)")
    token, port = secrets.token_urlsafe(24), _free_port()
    env = {**os.environ, "TLAKE_CATALOG_TOKEN": token}
    tlake = str(Path(sys.executable).with_name("tlake"))
    server = subprocess.Popen([tlake, "--lakehouse", lakehouse, "catalog", "serve", "--port", str(port)], env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    console.print("[red]the catalog server did not start[/red]")
                    return 1
                time.sleep(0.2)
        console.rule(f"[bold]Spark SQL through tlake catalog serve (http://127.0.0.1:{port})")
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(SPARK_SQL)
        try:
            done = subprocess.run([spark_python, f.name, package, ivy, f"http://127.0.0.1:{port}"], env=env,
                                  timeout=timeout_s)
        finally:
            os.unlink(f.name)
        return 0 if done.returncode == 0 else 1
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
