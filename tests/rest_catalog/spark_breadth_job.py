"""Spark SQL's breadth through the catalog server, run by the Spark 4.1 environment (`make spark41`:
.venv-spark41 with pyspark 4.1 and Iceberg 1.12's runtime). One Spark session runs every scenario;
it is a subprocess of tests/rest_catalog/test_spark_breadth.py, never imported by the suite.

usage: python spark_breadth_job.py JAR URL NAMESPACE   (the token in TLAKE_CATALOG_TOKEN)

After each scenario it prints one line ``STEP <json>`` (the scenario's name, what Spark read, each
statement's outcome) and waits for a line on stdin before the next one, so that the test can check
every retained lakehouse version with its oracle in between. A scenario that fails is reported in
its STEP line (``error``) and the next one still runs.
"""

import json
import re
import sys
import threading
import traceback

from spark_catalog_session import catalog_session

jar, url, ns = sys.argv[1:4]
spark = catalog_session(jar, url, "tlake-rest-catalog-breadth",
                        **{"spark.sql.adaptive.enabled": "false"})
T = f"tl.{ns}"


def rows(sql, session=None):
    return [list(r) for r in (session or spark).sql(sql).collect()]


def ids(table, session=None):
    return [r[0] for r in rows(f"SELECT id FROM {table} ORDER BY id", session)]


def snapshot_ids(table):
    return [r[0] for r in rows(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at")]


def error_line(e):
    """``<Java class>: <message>`` of a failed statement, without py4j's preamble or the stack."""
    text = str(e)
    text = re.sub(r"^An error occurred while calling o\d+\.\w+\.\n: ", "", text)
    return re.split(r"\n\s*at |\n\tat |\n\s*JVM stacktrace", text)[0].strip()[:1500]


def outcome(sql):
    """Run one statement: ``{"ok": rows}`` or ``{"error": "<Java class>: <message>"}``."""
    try:
        return {"ok": [[str(c) for c in r] for r in spark.sql(sql).collect()]}
    except Exception as e:  # noqa: BLE001 - the outcome is the answer
        return {"error": error_line(e)}


def step(name, fn):
    out = {"step": name}
    try:
        out.update(fn() or {})
    except Exception:  # noqa: BLE001 - reported to the test, which fails on it
        out["error"] = traceback.format_exc()[-3000:]
    print("STEP " + json.dumps(out), flush=True)
    if sys.stdin.readline().strip() != "go":
        spark.stop()
        sys.exit(0)


def setup():
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {T}")
    for t in ("a", "b"):
        spark.sql(f"CREATE TABLE {T}.{t} (id BIGINT, kind STRING) USING iceberg")
    spark.sql(f"INSERT INTO {T}.a VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"INSERT INTO {T}.a VALUES (3, 'c')")
    spark.sql(f"INSERT INTO {T}.b VALUES (10, 'x')")
    return {"a": ids(f"{T}.a"), "b": ids(f"{T}.b"), "properties": rows(f"SHOW TBLPROPERTIES {T}.a")}


def views():
    spark.sql(f"CREATE VIEW {T}.big_a AS SELECT id, kind FROM {T}.a WHERE id >= 2")
    out = {"select": rows(f"SELECT id FROM {T}.big_a ORDER BY id"),
           "show": sorted(r[1] for r in rows(f"SHOW VIEWS IN {T}"))}
    spark.sql(f"CREATE OR REPLACE VIEW {T}.big_a AS SELECT id, kind FROM {T}.a WHERE id >= 3")
    out["replaced"] = rows(f"SELECT id FROM {T}.big_a ORDER BY id")
    spark.sql(f"CREATE VIEW {T}.kept AS SELECT count(*) AS n FROM {T}.b")
    spark.sql(f"DROP VIEW {T}.big_a")
    out["after_drop"] = sorted(r[1] for r in rows(f"SHOW VIEWS IN {T}"))
    out["kept"] = rows(f"SELECT n FROM {T}.kept")
    return out


def branches_and_tags():
    a = f"{T}.a"
    spark.sql(f"ALTER TABLE {a} CREATE TAG first_three")
    spark.sql(f"ALTER TABLE {a} CREATE BRANCH dev")
    spark.sql(f"INSERT INTO {a}.branch_dev VALUES (4, 'dev')")
    spark.sql(f"INSERT INTO {a} VALUES (5, 'main')")
    return {
        "main": ids(a),
        "dev": [r[0] for r in rows(f"SELECT id FROM {a} VERSION AS OF 'dev' ORDER BY id")],
        "dev_by_identifier": ids(f"{a}.branch_dev"),
        "tag": [r[0] for r in rows(f"SELECT id FROM {a} VERSION AS OF 'first_three' ORDER BY id")],
        "refs": sorted([r[0], r[1]] for r in rows(f"SELECT name, type FROM {a}.refs")),
    }


def procedures():
    """Each `CALL tl.system.*` that touches only metadata (or writes new files) must work; those
    that would delete files must refuse (the served tables carry gc.enabled=false)."""
    b = f"{T}.b"
    for v in (11, 12, 13):
        spark.sql(f"INSERT INTO {b} VALUES ({v}, 'p')")
    snaps = snapshot_ids(b)
    q = f"'{ns}.b'"
    calls = {}
    calls["ancestors_of"] = outcome(f"CALL tl.system.ancestors_of(table => {q})")
    calls["rollback_to_snapshot"] = outcome(f"CALL tl.system.rollback_to_snapshot({q}, {snaps[1]})")
    rolled_back = ids(b)
    calls["set_current_snapshot"] = outcome(f"CALL tl.system.set_current_snapshot({q}, {snaps[-1]})")
    set_back = ids(b)
    calls["rewrite_data_files"] = outcome(f"CALL tl.system.rewrite_data_files(table => {q}, "
                                          "options => map('min-input-files', '2'))")
    calls["rewrite_manifests"] = outcome(f"CALL tl.system.rewrite_manifests({q})")
    calls["compute_table_stats"] = outcome(f"CALL tl.system.compute_table_stats(table => {q})")
    calls["create_changelog_view"] = outcome(f"CALL tl.system.create_changelog_view(table => {q}, "
                                             "changelog_view => 'b_changes')")
    changes = rows("SELECT count(*) FROM b_changes") if "ok" in calls["create_changelog_view"] else None
    # a branch that main is an ancestor of, fast-forwarded; a commit of another branch cherry-picked
    spark.sql(f"ALTER TABLE {b} CREATE BRANCH ff")
    spark.sql(f"INSERT INTO {b}.branch_ff VALUES (14, 'ff')")
    calls["fast_forward"] = outcome(f"CALL tl.system.fast_forward({q}, 'main', 'ff')")
    spark.sql(f"ALTER TABLE {b} CREATE BRANCH side")
    spark.sql(f"INSERT INTO {b}.branch_side VALUES (15, 'side')")
    side = rows(f"SELECT snapshot_id FROM {b}.refs WHERE name = 'side'")[0][0]
    spark.sql(f"INSERT INTO {b} VALUES (16, 'main')")
    calls["cherrypick_snapshot"] = outcome(f"CALL tl.system.cherrypick_snapshot({q}, {side})")
    calls["register_table"] = outcome(
        f"CALL tl.system.register_table(table => '{ns}.b_registered', metadata_file => "
        f"'{rows(f'SELECT file FROM {b}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1')[0][0]}')")
    # the ones that delete files: refused while gc.enabled=false
    calls["expire_snapshots"] = outcome(f"CALL tl.system.expire_snapshots(table => {q}, retain_last => 1, "
                                        "older_than => TIMESTAMP '2999-01-01 00:00:00')")
    calls["remove_orphan_files"] = outcome(f"CALL tl.system.remove_orphan_files(table => {q}, "
                                           "older_than => TIMESTAMP '2000-01-01 00:00:00')")
    return {"calls": calls, "snapshots": snaps, "rolled_back": rolled_back, "set_back": set_back,
            "changes": changes, "b": ids(b), "gc_enabled": rows(f"SHOW TBLPROPERTIES {b} ('gc.enabled')")}


def concurrent_writers():
    """Two Spark sessions (each its own catalog instance: own caches, own commits) append at the
    same time, each to the shared table and to its own table. The served tables carry
    commit.retry.num-retries=0: a commit that loses the race is refused (409
    CommitFailedException) and the writer retries the statement; anything else is an error."""
    spark.sql(f"CREATE TABLE {T}.shared (id BIGINT, kind STRING) USING iceberg")
    for w in (1, 2):
        spark.sql(f"CREATE TABLE {T}.own{w} (id BIGINT, kind STRING) USING iceberg")
    errors, refused = [], []
    start = threading.Barrier(2)

    def insert(s, w, sql):
        for _ in range(20):
            try:
                s.sql(sql)
                return
            except Exception as e:  # noqa: BLE001 - a refused commit is retried, anything else reported
                if "CommitFailedException" not in f"{type(e).__name__} {e}":
                    raise
                refused.append(f"writer {w}: {error_line(e)[:300]}")
        raise RuntimeError(f"writer {w}: refused 20 times: {sql}")

    def writer(w):
        s = spark.newSession()
        try:
            start.wait()
            for i in range(4):
                insert(s, w, f"INSERT INTO {T}.shared VALUES ({w * 100 + i}, 'w{w}')")
                insert(s, w, f"INSERT INTO {T}.own{w} VALUES ({w * 100 + i}, 'w{w}')")
        except Exception as e:  # noqa: BLE001 - reported
            errors.append(f"writer {w}: {type(e).__name__}: {error_line(e)}")

    threads = [threading.Thread(target=writer, args=(w,)) for w in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t in ("shared", "own1", "own2"):  # this session's catalog cached them as it created them
        spark.sql(f"REFRESH TABLE {T}.{t}")
    return {"errors": errors, "refused": refused, "shared": ids(f"{T}.shared"), "own1": ids(f"{T}.own1"),
            "own2": ids(f"{T}.own2"), "shared_snapshots": len(snapshot_ids(f"{T}.shared"))}


def expire_and_purge():
    """Spark's own clean-up through the server: expire every snapshot but the last of `a`, and
    DROP TABLE ... PURGE of `own1` (a plain DROP TABLE where the purge is refused). Whatever each
    does, no retained lakehouse version may lose a file."""
    out = {"expire": outcome(f"CALL tl.system.expire_snapshots(table => '{ns}.a', retain_last => 1, "
                             "older_than => TIMESTAMP '2999-01-01 00:00:00')"),
           "purge": outcome(f"DROP TABLE {T}.own1 PURGE")}
    if "own1" in [r[1] for r in rows(f"SHOW TABLES IN {T}")]:  # the purge was refused: a plain drop
        out["drop"] = outcome(f"DROP TABLE {T}.own1")
    out["tables"] = sorted(r[1] for r in rows(f"SHOW TABLES IN {T}"))
    out["a"] = ids(f"{T}.a")
    return out


step("setup", setup)
step("views", views)
step("branches_and_tags", branches_and_tags)
step("procedures", procedures)
step("concurrent_writers", concurrent_writers)
step("expire_and_purge", expire_and_purge)
spark.stop()
