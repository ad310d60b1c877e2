"""Spark session for the jobs: `local[*]` by default, small and quiet for tests."""

from __future__ import annotations

import os
import sys

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.driver.memory": "2g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    # The walks build deep query plans (a union and an anti-join per tree level); Spark renders
    # each plan as a string for every SQL execution, and unbounded that string exhausted a 2 GB
    # driver heap on ~800 expired versions (found by the reliability stress test).
    "spark.sql.maxPlanStringLength": "100000",
}


def get_spark(master: str | None = None, app_name: str = "trinitylake", conf: dict[str, str] | None = None):
    """Get or create the SparkSession. On a cluster (spark-submit) the master comes from there."""
    from pyspark.sql import SparkSession

    # Executors must run the same interpreter as the driver (the venv's, with our package).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for k, v in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("TLAKE_SPARK_LOG_LEVEL", "WARN"))
    return spark
