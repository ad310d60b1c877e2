"""The Spark 4.1 session of the Spark-through-the-catalog-server job scripts (spark_*_job.py).

Those scripts run under .venv-spark41 as subprocesses of the tests, never imported by the suite;
each imports this module from its own folder (a script's folder is first on sys.path). One place
says how Spark reaches `tlake catalog serve`: Iceberg's runtime JAR, its SQL extensions and the
REST catalog ``tl`` at `url`, with the bearer token from TLAKE_CATALOG_TOKEN.
"""

import os

from pyspark.sql import SparkSession


def catalog_session(jar: str, url: str, app: str, *, master: str = "local[2]", partitions: int = 2,
                    **conf: str) -> SparkSession:
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.jars", jar)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.catalog.tl", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.tl.type", "rest")
        .config("spark.sql.catalog.tl.uri", url)
        .config("spark.sql.catalog.tl.token", os.environ["TLAKE_CATALOG_TOKEN"])
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
