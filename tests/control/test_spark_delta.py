"""The control table through Spark's Delta (real Delta JARs from `make jars`) and delta-rs.

All checks share one worker process (tests/control/_delta_worker.py) with a Delta-enabled
session: Delta's JARs must be on the JVM's class path from its start, and the test run's
shared session has none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trinitylake.control import ControlTable
from trinitylake.errors import ControlTableError
from trinitylake.spark.session import DELTA_CATALOG, DELTA_EXTENSIONS, delta_conf, delta_jars_dir

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def observed(tmp_path_factory) -> dict:
    wd = tmp_path_factory.mktemp("delta")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT), os.environ.get("PYTHONPATH", "")))}
    env.pop("TLAKE_CONTROL_TABLE", None)
    env.pop("TLAKE_CONTROL_ENGINE", None)
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "control" / "_delta_worker.py"), str(wd)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_delta_conf_puts_the_fetched_jars_on_the_class_path():
    conf = delta_conf()
    assert conf["spark.sql.extensions"] == DELTA_EXTENSIONS
    assert conf["spark.sql.catalog.spark_catalog"] == DELTA_CATALOG
    jars = conf["spark.jars"].split(",")  # `make jars` ran (the Makefile's test target needs it)
    assert any(Path(j).name.startswith("delta-spark_4.2_2.13-") for j in jars)
    assert all(Path(j).parent == delta_jars_dir() for j in jars)
    # Spark's own newer Jackson/Scala/Hadoop must not be shadowed by Delta's older ones.
    assert not any(Path(j).name.startswith(("scala-library-", "jackson-databind-", "hadoop-client-")) for j in jars)


def test_session_has_delta_and_auto_picks_spark(observed):
    assert observed["session_has_delta"] is True
    assert observed["auto_engine"] == "spark"


def test_engines_share_one_table_and_one_seq_line(observed):
    assert observed["seqs"] == [1, 2, 3]
    expected = [[s, t, f"test {e}"] for s, e in ((1, "spark"), (2, "delta-rs"), (3, "spark"))
                for t in ("begin", "committed")]
    assert observed["rows_spark"] == expected
    assert observed["rows_rs"] == expected
    assert observed["full_equal"] is True  # every column reads the same through both engines


def test_spark_reads_it_with_format_delta_sql_and_history(observed):
    assert observed["format_delta_count"] == 6
    assert observed["sql_seqs"] == [1, 2, 3]
    assert observed["history_ops"][0] == "WRITE" and len(observed["history_ops"]) == 4  # create + 3 appends
    assert observed["dataframe_cols"][0] == "txn_seq" and "recorded_at" in observed["dataframe_cols"]


def test_spark_appends_to_a_table_delta_rs_created(observed):
    assert observed["rs_created_seqs"] == [1, 2]
    assert observed["rs_created"] == [[1, "test delta-rs"], [1, "test delta-rs"], [2, "test spark"], [2, "test spark"]]


def test_catalog_table_name_keeps_rows_in_the_catalog_and_markers_beside_the_lakehouse(observed):
    assert observed["named_engine"] == "spark"
    assert observed["named_seqs"] == [1, 2]
    assert observed["named_rows"] == 4
    assert observed["named_location"].endswith("/warehouse/ops.db/trinitylake_control")
    assert observed["named_markers"] == ["00000000000000000001", "00000000000000000002"]
    assert observed["named_read_back"] == [[1, "begin"], [1, "committed"], [2, "begin"], [2, "committed"]]


def test_concurrent_spark_and_delta_rs_appends_keep_every_row(observed):
    assert observed["concurrent_rows"] == observed["concurrent_expected_rows"] == 16
    assert observed["concurrent_distinct_seqs"] == 8  # exclusive sequencing across engines
    assert observed["concurrent_spark_rows"] == 16


def test_compaction_through_spark_keeps_the_rows(observed):
    assert observed["compact_version"] > 4
    assert observed["rows_after_compact"] == 6


def test_a_catalog_name_refuses_the_delta_rs_engine(tmp_path):
    with pytest.raises(ControlTableError, match="catalog name"):
        ControlTable(str(tmp_path / "_control"), engine="delta-rs", table="main.ops.ctl")


def test_an_unknown_engine_is_refused(tmp_path):
    with pytest.raises(ControlTableError, match="not one of auto, spark, delta-rs"):
        ControlTable(str(tmp_path / "_control"), engine="duckdb")


def test_auto_without_a_delta_session_is_delta_rs(tmp_path, monkeypatch):
    monkeypatch.delenv("TLAKE_CONTROL_TABLE", raising=False)
    monkeypatch.delenv("TLAKE_CONTROL_ENGINE", raising=False)
    ct = ControlTable(str(tmp_path / "_control"))
    assert ct.engine == "delta-rs"  # no active Delta session in this process
    with pytest.raises(ControlTableError, match="delta-rs"):
        ct.dataframe()


def test_rows_at_a_path_of_their_own_keep_the_markers_under_the_control_location(tmp_path, monkeypatch):
    from .test_table import full_record

    monkeypatch.delenv("TLAKE_CONTROL_TABLE", raising=False)
    (tmp_path / "_control" / "_audited").mkdir(parents=True)  # our own markers are not strangers
    (tmp_path / "_control" / "_audited" / "00000000000000000000").write_bytes(b"1")
    ct = ControlTable(str(tmp_path / "_control"), engine="delta-rs", table=str(tmp_path / "rows"))
    seq = ct.seq.allocate("t1")
    ct.append([full_record(seq)])
    assert (tmp_path / "rows" / "_delta_log").is_dir() and (tmp_path / "_control" / "_seq").is_dir()
    assert not (tmp_path / "_control" / "_delta_log").exists()
    assert [r.txn_seq for r in ControlTable(str(tmp_path / "_control"), table=str(tmp_path / "rows")).records()] == [1]
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.csv").write_text("x")
    with pytest.raises(ControlTableError, match=r"control location file://.*/junk is not a Delta table"):
        ControlTable(str(tmp_path / "_control"), engine="delta-rs", table=str(tmp_path / "junk")).ensure()
