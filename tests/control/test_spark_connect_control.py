"""The control table through Spark's Delta on a Spark Connect server (Delta's JARs from `make jars`).

Two processes with their own local Connect server and Delta (a JVM cannot gain JARs later, and
the test run's shared sessions have none):

* the CLI: ``tlake walk --control-engine spark --spark-conf spark.api.mode=connect``;
* a worker (this file run as a script): ``get_spark(..., conf={"spark.api.mode": "connect"},
  delta=True)``, where ``auto`` must pick Spark's Delta, also when the server hides its static
  confs (Databricks serverless, shared clusters), and a walk job audits through it.

Between them the CLI writes rows with delta-rs, so one ``txn_seq`` line runs through both
engines; the rows are read back with delta-rs and ``tlake show``.

    python tests/control/test_spark_connect_control.py LAKEHOUSE   # the worker; prints RESULT {json}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TLAKE = Path(sys.executable).with_name("tlake")
CONNECT = "pyspark.sql.connect.session"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT), os.environ.get("PYTHONPATH", "")))}
    for k in ("TLAKE_CONTROL_TABLE", "TLAKE_CONTROL_ENGINE", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        env.pop(k, None)
    return env


def _tlake(lh: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(TLAKE), "--lakehouse", str(lh), *args], capture_output=True, text=True, cwd=ROOT,
                          env=_env(), timeout=timeout)
    assert proc.returncode == 0, f"tlake {' '.join(args)}: {proc.stderr[-3000:]}"
    return proc


def _engine_of_commits(control: Path) -> list[str]:
    """Per Delta commit of the control table (oldest first): which engine wrote it."""
    out = []
    for f in sorted((control / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info is not None:
                out.append("spark" if "Apache-Spark" in str(info.get("engineInfo", "")) else "delta-rs")
    return out


@pytest.fixture(scope="module")
def connect_run(tmp_path_factory) -> dict[str, Any]:
    lh = tmp_path_factory.mktemp("connect-control") / "lh"
    _tlake(lh, "init")  # txn_seq 1 (delta-rs)
    _tlake(lh, "namespace", "create", "a")  # 2 (delta-rs)
    # 3: tlake walk through Spark's Delta on Connect; 4: tlake namespace create (delta-rs);
    # 5: an `auto` append; 6: a walk job with `auto` (see _worker).
    proc = subprocess.run([sys.executable, __file__, str(lh)], capture_output=True, text=True, cwd=ROOT,
                          env=_env(), timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    show = _tlake(lh, "show", "--all", "--json")
    return {"lh": lh, "worker": json.loads(lines[-1][len("RESULT "):]), "show": json.loads(show.stdout)}


@pytest.mark.spark
def test_cli_walk_appends_through_spark_delta_on_connect(connect_run):
    w = connect_run["worker"]
    assert w["cli_exit"] == 0
    walk = w["cli_walk"]
    assert walk["status"] == "succeeded" and walk["txn_seq"] == 3
    assert w["cli_session_module"] == CONNECT  # the session the CLI's job started for its rows
    # init and namespace create (delta-rs, one commit each after the table's creation), then the
    # walk's begin and end rows: commits of Spark's Delta (engineInfo Apache-Spark/... Delta-Lake/...).
    commits = w["cli_commits"]
    assert commits[-2:] == ["spark", "spark"] and "delta-rs" in commits[:-2], commits


@pytest.mark.spark
def test_auto_picks_spark_delta_under_connect(connect_run):
    w = connect_run["worker"]
    assert w["session_module"] == CONNECT
    assert w["has_delta"] is True
    assert w["has_delta_conf_hidden"] is True  # the SQL probe, when the server shows no static conf
    assert w["auto_engine"] == "spark"
    assert w["job_engine"] == "spark" and w["job_status"] == "succeeded" and w["job_txn_seq"] == 6
    assert w["spark_seqs"] == [1, 2, 3, 4, 5, 6]  # Spark reads the one table delta-rs also wrote


@pytest.mark.spark
def test_rows_read_back_with_delta_rs_in_txn_seq_order(connect_run):
    from deltalake import DeltaTable

    control = connect_run["lh"] / "_control"
    rows = DeltaTable(str(control)).to_pyarrow_table(columns=["txn_seq", "record_type", "command"]).to_pylist()
    seqs = sorted({r["txn_seq"] for r in rows})
    assert seqs == [1, 2, 3, 4, 5, 6]
    by_seq: dict[int, list[str]] = {}
    for r in rows:
        by_seq.setdefault(r["txn_seq"], []).append(r["command"] or "")
    assert set(by_seq[3]) == {"walk"} and len(by_seq[3]) == 2  # begin + end
    assert set(by_seq[5]) == {"test connect"} and set(by_seq[6]) == {"walk"}
    engines = _engine_of_commits(control)
    assert engines.count("spark") >= 5 and engines.count("delta-rs") >= 3, engines


@pytest.mark.spark
def test_tlake_show_lists_every_entry_newest_first(connect_run):
    show = connect_run["show"]
    seqs = [e["txn_seq"] for e in show]
    assert seqs == sorted(seqs, reverse=True) and set(seqs) >= {1, 2, 3, 4, 6}
    walks = [e for e in show if e["command"] == "walk"]
    assert [e["txn_seq"] for e in walks] == [6, 3] and all(e["state"] == "read" for e in walks)
    created = {e["txn_seq"]: e["state"] for e in show if e["command"] == "namespace create"}
    assert created == {4: "committed", 2: "committed"}


class _FakeConnect:
    """Stands in for a Connect client session (module name only) whose server refuses static confs."""

    def __init__(self, answer: BaseException | None):
        self.answer = answer
        self.statements: list[str] = []
        self.conf = self

    def get(self, key: str, default: str | None = None) -> str:
        raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] Configuration {key} is not available.")

    def sql(self, statement: str) -> _FakeConnect:
        self.statements.append(statement)
        return self

    def collect(self) -> list[Any]:
        if self.answer is not None:
            raise self.answer
        return []


_FakeConnect.__module__ = CONNECT


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (RuntimeError("[DELTA_TABLE_ONLY_OPERATION] `/x` is not a Delta table."), True),
        (RuntimeError("[DELTA_MISSING_DELTA_TABLE] `/x` is not a Delta table."), True),
        (RuntimeError("[PARSE_SYNTAX_ERROR] Syntax error at or near 'HISTORY'."), False),
        (RuntimeError("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: delta."), False),
        (ConnectionError("failed to connect to all addresses"), False),
    ],
)
def test_sql_probe_decides_when_the_server_hides_its_conf(answer, expected, monkeypatch):
    from trinitylake.control.spark_engine import DELTA_PROBE_SQL, session_has_delta

    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    fake = _FakeConnect(answer)
    assert session_has_delta(fake) is expected
    assert fake.statements == [DELTA_PROBE_SQL]


def test_a_classic_session_is_judged_by_its_conf_alone(monkeypatch):
    from trinitylake.control.spark_engine import session_has_delta

    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)

    class Classic(_FakeConnect):
        pass

    Classic.__module__ = "pyspark.sql.session"
    fake = Classic(None)
    assert session_has_delta(fake) is False and fake.statements == []


# ---- the worker ----------------------------------------------------------------------------------


def _worker(lh: str) -> dict[str, Any]:
    import contextlib
    import io
    import time

    from pyspark.sql import SparkSession

    from trinitylake.cli.app import cli
    from trinitylake.control import AuditRecord, ControlTable
    from trinitylake.control.spark_engine import session_has_delta
    from trinitylake.job_flags import parse_job_args
    from trinitylake.jobs.runner import run_job
    from trinitylake.lakehouse import Lakehouse

    out: dict[str, Any] = {}
    # tlake walk, in this process: its job starts the Connect server (with Delta) for its rows.
    argv = ["--lakehouse", lh, "walk", "--control-engine", "spark", "--spark-conf", "spark.api.mode=connect",
            "--spark-conf", "spark.sql.shuffle.partitions=2", "--master", "local[2]", "--execution", "local", "--json"]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            cli.main(args=argv, prog_name="tlake", standalone_mode=False)
            out["cli_exit"] = 0
        except SystemExit as e:
            out["cli_exit"] = e.code
    out["cli_walk"] = json.loads(buf.getvalue())
    out["cli_commits"] = _engine_of_commits(Path(lh) / "_control")
    spark = SparkSession.getActiveSession()
    out["cli_session_module"] = type(spark).__module__
    # Another process, without a session: delta-rs appends to what Spark's Delta wrote.
    _tlake(Path(lh), "namespace", "create", "b")

    # That session (get_spark(..., {"spark.api.mode": "connect"}, delta=True) made it) is the
    # active one: `auto` must choose Spark's Delta through it.
    out["session_module"] = type(spark).__module__
    out["has_delta"] = session_has_delta(spark)

    class HiddenConf:  # the same server, seen through a client that may not read static confs
        def __init__(self, inner: Any):
            self._inner = inner
            self.conf = self

        def get(self, key: str, default: str | None = None) -> str:
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] Configuration {key} is not available.")

        def sql(self, statement: str) -> Any:
            return self._inner.sql(statement)

    HiddenConf.__module__ = CONNECT
    out["has_delta_conf_hidden"] = session_has_delta(HiddenConf(spark))

    control = f"{lh}/_control"
    auto = ControlTable(control)  # auto, no session given: the active (Connect) session decides
    out["auto_engine"] = auto.engine
    txn = f"connect-{time.monotonic_ns()}"
    seq = auto.seq.allocate(txn)
    auto.append([AuditRecord(seq, t, txn, "test connect", {"engine": "auto"}) for t in ("begin", "committed")])

    # A job run in this process: its lakehouse's control table is `auto` too.
    lakehouse = Lakehouse.open(lh)
    cfg = parse_job_args("walk", ["--lakehouse", lh, "--execution", "local"], env={})
    result = run_job("walk", cfg, lakehouse=lakehouse)
    out["job_engine"] = lakehouse.auditor.control.engine
    out["job_status"] = result.status
    out["job_txn_seq"] = result.txn_seq
    out["spark_seqs"] = [r[0] for r in auto.dataframe().select("txn_seq").distinct().orderBy("txn_seq").collect()]
    spark.stop()
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print("RESULT " + json.dumps(_worker(sys.argv[1]), default=str), flush=True)
