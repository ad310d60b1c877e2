"""Spark SQL views through the catalog server, run by the Spark 4.1 environment (`make spark41`).
A subprocess of tests/rest_catalog/test_views.py, never imported by the suite.

usage: python spark_views_job.py JAR URL NAMESPACE   (the token in TLAKE_CATALOG_TOKEN)
Prints one JSON line of what Spark read, prefixed ``RESULT ``.
"""

import json
import sys

from spark_catalog_session import catalog_session

jar, url, ns = sys.argv[1:4]
spark = catalog_session(jar, url, "tlake-rest-catalog-views")


def rows(sql):
    return [list(r) for r in spark.sql(sql).collect()]


t, v = f"tl.{ns}.base", f"tl.{ns}.only_a"
spark.sql(f"CREATE NAMESPACE IF NOT EXISTS tl.{ns}")
spark.sql(f"CREATE TABLE {t} (id BIGINT, kind STRING) USING iceberg")
spark.sql(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'a')")
spark.sql(f"CREATE VIEW {v} AS SELECT id FROM {t} WHERE kind = 'a'")
out = {"view_rows": rows(f"SELECT * FROM {v} ORDER BY id")}
spark.sql(f"CREATE VIEW tl.{ns}.gone AS SELECT 1 AS one")
out["views"] = sorted(r[1] for r in rows(f"SHOW VIEWS IN tl.{ns}"))
out["tables"] = sorted(r[1] for r in rows(f"SHOW TABLES IN tl.{ns}"))
spark.sql(f"CREATE OR REPLACE VIEW {v} AS SELECT id, kind FROM {t} WHERE kind = 'b'")
out["replaced_rows"] = rows(f"SELECT * FROM {v} ORDER BY id")
spark.sql(f"DROP VIEW tl.{ns}.gone")
out["views_after_drop"] = sorted(r[1] for r in rows(f"SHOW VIEWS IN tl.{ns}"))
try:
    spark.sql(f"CREATE VIEW {t} AS SELECT 1 AS one")
    out["view_on_table_name"] = "created"
except Exception as e:  # noqa: BLE001 - the refusal's text is the result
    out["view_on_table_name"] = str(e)[:300]
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
