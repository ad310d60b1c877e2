"""Fixtures of the control-table tests (the S3 fixtures come from the root conftest)."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def control_spark(request):
    """A SparkSession for reading the control table's Parquet files.

    The root conftest's `spark` session when there is one (one session per test run),
    otherwise a small local one of our own.
    """
    pyspark_sql = pytest.importorskip("pyspark.sql")
    try:
        yield request.getfixturevalue("spark")
        return
    except pytest.FixtureLookupError:
        pass
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = pyspark_sql.SparkSession.getActiveSession()
    if active is not None:  # e.g. the root conftest's session: share it, never stop it
        yield active
        return
    spark = (
        pyspark_sql.SparkSession.builder.master("local[1]")
        .appName("trinitylake-control-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    yield spark
    spark.stop()
