"""A Spark SQL session against the catalog server, run by the Spark 4.1 environment
(`make spark41`: .venv-spark41 with pyspark 4.1 and iceberg-spark-runtime-4.1_2.13 from Maven).
It is a subprocess of tests/rest_catalog/test_spark_sql.py, never imported by the suite.

usage: python spark_sql_job.py JAR URL NAMESPACE PYICEBERG_TABLE   (the token in TLAKE_CATALOG_TOKEN)
Prints one JSON line of what Spark read, prefixed ``RESULT ``.
"""

import json
import sys

from spark_catalog_session import catalog_session

jar, url, ns, from_pyiceberg = sys.argv[1:5]
spark = catalog_session(jar, url, "tlake-rest-catalog-test")


def rows(sql):
    return [list(r) for r in spark.sql(sql).collect()]


t = f"tl.{ns}.events"
spark.sql(f"CREATE NAMESPACE IF NOT EXISTS tl.{ns}")
spark.sql(f"CREATE TABLE {t} (id BIGINT, kind STRING) USING iceberg")
spark.sql(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
first = rows(f"SELECT snapshot_id FROM {t}.snapshots ORDER BY committed_at")[-1][0]
spark.sql(f"DELETE FROM {t} WHERE id = 2")
spark.sql(f"""MERGE INTO {t} AS dst USING (SELECT 3L AS id, 'C' AS kind UNION ALL SELECT 4L, 'd') AS src
              ON dst.id = src.id
              WHEN MATCHED THEN UPDATE SET dst.kind = src.kind
              WHEN NOT MATCHED THEN INSERT *""")
out = {
    "current": rows(f"SELECT id, kind FROM {t} ORDER BY id"),
    "first_snapshot": first,
    "as_of_first": rows(f"SELECT id, kind FROM {t} VERSION AS OF {first} ORDER BY id"),
    "snapshots": len(rows(f"SELECT snapshot_id FROM {t}.snapshots")),
    "tables": sorted(r[1] for r in rows(f"SHOW TABLES IN tl.{ns}")),
    "from_pyiceberg": rows(f"SELECT id FROM tl.{ns}.{from_pyiceberg} ORDER BY id"),
}
spark.sql(f"INSERT INTO tl.{ns}.{from_pyiceberg} VALUES (100, 'spark')")
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
