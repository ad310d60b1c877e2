"""Spark SQL on format v3 tables through the catalog server, run by the Spark 4.1 environment
(`make spark41`). A subprocess of tests/rest_catalog/test_spark_v3.py, never imported by the suite.

usage: python spark_v3_job.py JAR URL NAMESPACE STEP   (the token in TLAKE_CATALOG_TOKEN)

STEP ``write``: Spark creates ``NAMESPACE.lineage`` as v3, inserts twice, updates a row, and reads
the row-lineage columns; it inserts into ``NAMESPACE.defaults`` (made by the test over REST).
STEP ``read``: Spark reads ``NAMESPACE.defaults`` after the test added a column with a default.
Prints one JSON line prefixed ``RESULT ``.
"""

import json
import sys

from spark_catalog_session import catalog_session

jar, url, ns, step = sys.argv[1:5]
spark = catalog_session(jar, url, "tlake-rest-catalog-v3", master="local[1]", partitions=1)


def rows(sql):
    return [list(r) for r in spark.sql(sql).collect()]


out = {}
if step == "write":
    t = f"tl.{ns}.lineage"
    spark.sql(f"CREATE TABLE {t} (id BIGINT, kind STRING) USING iceberg TBLPROPERTIES ('format-version'='3')")
    spark.sql(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    spark.sql(f"INSERT INTO {t} VALUES (4, 'd'), (5, 'e')")
    spark.sql(f"UPDATE {t} SET kind = 'B' WHERE id = 2")
    out["lineage"] = rows(f"SELECT id, kind, _row_id, _last_updated_sequence_number FROM {t} ORDER BY id")
    out["format"] = rows(f"SHOW TBLPROPERTIES {t} ('format-version')")
    spark.sql(f"INSERT INTO tl.{ns}.defaults VALUES (1), (2)")
else:
    out["defaults"] = rows(f"SELECT * FROM tl.{ns}.defaults ORDER BY id")
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
