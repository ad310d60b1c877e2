"""A local Spark Connect server for the tests, in its own process (a classic session and a
Connect client cannot share one Python process's SparkContext).

    python -m tests.connect_server PORT     # prints "ready" once serving; stops when stdin closes

The token comes from ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` (the client sends the same one).
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    from trinitylake.spark.session import DEFAULT_CONF, LOCAL_CONF

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    opts = {**DEFAULT_CONF, **LOCAL_CONF, "spark.sql.shuffle.partitions": "4", "spark.app.name": "trinitylake-connect-tests",
            "spark.connect.grpc.binding.port": sys.argv[1]}
    RemoteSparkSession._start_connect_server("local[2]", opts)
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
