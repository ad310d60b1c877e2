"""TrinityLakeSparkSubmitOperator: where the job's Python comes from, where spark-submit comes
from, the result as XCom, and permanent errors failing without retries while transient ones retry.

A fake ``spark-submit`` on PATH plays the job: it records its arguments, writes the outcome
`trinitylake.jobs.outcome` would write to ``$TLAKE_RESULT_FILE`` and exits with the job's code. The
live ``airflow dags test`` with the real spark-submit is in test_live_dag.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("airflow")

import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

from tests.dags.test_maintenance_dag import DAG_FOLDER  # noqa: E402

if str(DAG_FOLDER) not in sys.path:  # as in Airflow, where the DAG folder is on sys.path
    sys.path.insert(0, str(DAG_FOLDER))

FAKE_SPARK_SUBMIT = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_ARGS"
env > "$FAKE_ENV"
if [ -n "$FAKE_OUTCOME" ] && [ -n "$TLAKE_RESULT_FILE" ]; then cp "$FAKE_OUTCOME" "$TLAKE_RESULT_FILE"; fi
exit "${FAKE_RC:-0}"
"""

RESULT = {"job": "expire", "run_id": "expire-1", "status": "succeeded", "counts": {"deleted": 3}}


def _tarball(path: Path) -> None:
    """A stand-in for `make dist`'s environment: bin/python and a marker."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data, mode in (("bin/python", b"#!/bin/sh\nexit 0\n", 0o755), ("pyvenv.cfg", b"home = /x\n", 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def fake(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    _tarball(repo / "dist" / "trinitylake-env.tar.gz")
    (repo / "conf").mkdir()
    (repo / "conf" / "expire.yaml").write_text("dry_run: true\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "spark-submit").write_text(FAKE_SPARK_SUBMIT)
    (bin_dir / "spark-submit").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "args"))
    monkeypatch.setenv("FAKE_ENV", str(tmp_path / "env"))
    monkeypatch.setenv("FAKE_OUTCOME", "")
    monkeypatch.setenv("AIRFLOW_CONN_TL_LOCAL", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("AIRFLOW_CONN_TL_YARN_CLIENT", json.dumps({"conn_type": "spark", "host": "yarn"}))
    monkeypatch.setenv("AIRFLOW_CONN_TL_YARN_CLUSTER",
                       json.dumps({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}))

    def outcome(rc: int, **fields):
        monkeypatch.setenv("FAKE_RC", str(rc))
        if fields:
            path = tmp_path / "outcome.json"
            path.write_text(json.dumps({"job": "expire", "exit_code": rc, **fields}))
            monkeypatch.setenv("FAKE_OUTCOME", str(path))

    def args() -> list[str]:
        return (tmp_path / "args").read_text().splitlines()

    return types.SimpleNamespace(repo=repo, bin=bin_dir, outcome=outcome, args=args, tmp=tmp_path)


def _operator(repo: Path, conn_id: str = "tl_local"):
    from trinitylake_spark import TrinityLakeSparkSubmitOperator

    return TrinityLakeSparkSubmitOperator(
        task_id="expire", conn_id=conn_id, repo=str(repo), application=f"{repo}/jobs/expire.py",
        conf={"spark.sql.session.timeZone": "UTC", "spark.pyspark.python": "./env/bin/python",
              "spark.archives": f"{repo}/dist/trinitylake-env.tar.gz#env"},
        application_args=["--lakehouse", "/lh", "--conf", f"{repo}/conf/expire.yaml"], retries=2)


class _TI:
    def __init__(self):
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def _conf(args: list[str]) -> dict[str, str]:
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args[:-1]) if a == "--conf" and "=" in args[i + 1])


def _env_dir(repo: Path) -> Path:
    key = hashlib.sha256((repo / "dist" / "trinitylake-env.tar.gz").read_bytes()).hexdigest()[:16]
    return repo / "build" / "airflow-env" / key


def test_local_master_runs_the_unpacked_environment_and_pushes_the_result(fake):
    """local[2]: no executors to ship the archive to; driver and workers run the environment
    unpacked once (keyed by the tarball's hash); the job's result is the XCom return_value."""
    fake.outcome(0, status="succeeded", permanent=False, result=RESULT)
    ti = _TI()
    assert _operator(fake.repo).execute({"ti": ti}) == RESULT
    conf = _conf(fake.args())
    python = str(_env_dir(fake.repo) / "bin" / "python")
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == python
    assert "spark.archives" not in conf
    assert (fake.args()[fake.args().index("--master") + 1]) == "local[2]"
    assert Path(python).is_file()
    result_file = [line for line in (fake.tmp / "env").read_text().splitlines() if line.startswith("TLAKE_RESULT_FILE=")]
    assert result_file and not os.path.exists(result_file[0].split("=", 1)[1])  # removed after the task
    # A second task reuses the unpacked environment (same tarball, same folder, not unpacked again).
    marker = Path(python).parent / "marker"
    marker.write_text("x")
    assert _operator(fake.repo).execute({"ti": _TI()}) == RESULT
    assert marker.exists()


def test_client_and_cluster_mode_keep_the_archive_for_the_executors(fake):
    client = _operator(fake.repo, "tl_yarn_client")
    assert client._prepare() is not None  # the driver runs here: its outcome file comes back
    assert client.conf["spark.pyspark.python"] == "./env/bin/python"
    assert client.conf["spark.archives"].endswith("dist/trinitylake-env.tar.gz#env")
    assert client.conf["spark.pyspark.driver.python"] == str(_env_dir(fake.repo) / "bin" / "python")

    cluster = _operator(fake.repo, "tl_yarn_cluster")
    assert cluster._prepare() is None  # the driver is on the cluster: no file comes back
    assert cluster.conf["spark.pyspark.python"] == "./env/bin/python"
    assert "spark.pyspark.driver.python" not in cluster.conf
    assert "TLAKE_RESULT_FILE" not in (cluster.env_vars or {})


def test_cluster_mode_ships_the_conf_file_and_names_it_by_its_base_name(fake):
    """The driver's container has no checkout: the job's --conf YAML goes with --files, and the
    job reads it from its working directory (spark-submit's own arguments, as submitted)."""
    fake.outcome(0)
    cluster = _operator(fake.repo, "tl_yarn_cluster")
    cluster.execute({"ti": _TI()})  # the provider refuses a durable YARN cluster task without RM polling
    assert cluster.durable is False
    args = fake.args()
    assert args[args.index("--deploy-mode") + 1] == "cluster"
    assert args[args.index("--files") + 1] == f"{fake.repo}/conf/expire.yaml"
    assert args[args.index(f"{fake.repo}/jobs/expire.py") + 1:] == ["--lakehouse", "/lh", "--conf", "expire.yaml"]
    # Client mode: the driver runs on this worker, where the path is.
    _operator(fake.repo, "tl_yarn_client").execute({"ti": _TI()})
    assert "--files" not in fake.args() and fake.args()[-1] == f"{fake.repo}/conf/expire.yaml"


def test_ship_conf_file():
    from airflow.sdk.exceptions import AirflowFailException
    from trinitylake_spark import ship_conf_file

    conf = str(DAG_FOLDER.parent / "conf" / "orphans.yaml")
    args = ["--lakehouse", "s3://b/lh", "--conf", conf, "--dry-run"]
    shipped = ship_conf_file(args, "s3://b/extra.txt")
    assert shipped == (["--lakehouse", "s3://b/lh", "--conf", "orphans.yaml", "--dry-run"],
                       f"s3://b/extra.txt,{conf}")
    assert ship_conf_file(*shipped) == shipped  # a second call changes nothing
    assert ship_conf_file(["--lakehouse", "s3://b/lh"], None) == (["--lakehouse", "s3://b/lh"], None)
    with pytest.raises(AirflowFailException, match="--conf file /nowhere/expire.yaml is not on this worker"):
        ship_conf_file(["--conf", "/nowhere/expire.yaml"], None)
    with pytest.raises(AirflowFailException, match="already ships another orphans.yaml"):
        ship_conf_file(args, "/elsewhere/orphans.yaml")


@pytest.mark.parametrize("error_type", ["AlreadyExistsError", "LakehouseNotFoundError", "UnsafeOperationError"])
def test_a_permanent_error_fails_the_task_without_retries(fake, error_type):
    from airflow.sdk.exceptions import AirflowFailException

    fake.outcome(1, status="failed", error_type=error_type, error="an export named 'weekly-20261126' already exists",
                 permanent=True, result={**RESULT, "status": "failed"})
    ti = _TI()
    with pytest.raises(AirflowFailException, match=f"{error_type}: an export named .*permanent: not retried"):
        _operator(fake.repo).execute({"ti": ti})
    assert ti.pushed["failed_result"]["status"] == "failed"


@pytest.mark.parametrize("error_type", ["StorageError", "CommitConflictError", "Py4JJavaError"])
def test_a_transient_error_raises_for_a_retry(fake, error_type):
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    fake.outcome(1, status="failed", error_type=error_type, error="connection reset", permanent=False, result=None)
    operator = _operator(fake.repo)
    with pytest.raises(AirflowException) as raised:
        operator.execute({"ti": _TI()})
    assert not isinstance(raised.value, AirflowFailException)  # Airflow retries it
    assert operator.retries == 2


def test_without_an_outcome_the_exit_code_decides(fake):
    """No outcome file (the interpreter lacked the packages, the JVM died): exit code 2, a
    configuration error, is permanent; any other code is retried."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    fake.outcome(2)
    with pytest.raises(AirflowFailException, match="exit code 2"):
        _operator(fake.repo).execute({"ti": _TI()})
    fake.outcome(137)
    with pytest.raises(AirflowException) as raised:
        _operator(fake.repo).execute({"ti": _TI()})
    assert not isinstance(raised.value, AirflowFailException)


def test_the_dag_tasks_retry_transient_errors(fake):
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(str(DAG_FOLDER)).dags["trinitylake_maintenance"]
    for task_id in ("expire", "orphans_dry_run", "orphans", "export_weekly"):
        assert dag.get_task(task_id).retries == 2


def test_spark_submit_comes_from_spark_home_or_the_repository_venv(fake, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException
    from trinitylake_spark import find_spark_submit

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("SPARK_HOME", raising=False)
    with pytest.raises(AirflowFailException, match="spark-submit is not on this worker's PATH.*SPARK_HOME"):
        find_spark_submit("spark-submit", fake.repo)
    monkeypatch.setenv("SPARK_HOME", str(fake.tmp))  # $SPARK_HOME/bin/spark-submit
    assert find_spark_submit("spark-submit", fake.repo) == str(fake.bin)
    monkeypatch.delenv("SPARK_HOME")
    venv_bin = fake.repo / ".venv/lib/python3.11/site-packages/pyspark/bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "spark-submit").write_text(FAKE_SPARK_SUBMIT)
    assert find_spark_submit("spark-submit", fake.repo) == str(venv_bin)


def test_no_archive_fails_at_once_naming_make_dist(fake):
    from airflow.sdk.exceptions import AirflowFailException

    (fake.repo / "dist" / "trinitylake-env.tar.gz").unlink()
    with pytest.raises(AirflowFailException, match="make dist"):
        _operator(fake.repo).execute({"ti": _TI()})


@pytest.mark.parametrize(("master", "deploy_mode", "where"), [
    ("local", None, "local"), ("local[2]", None, "local"), ("local[*]", "client", "local"),
    ("local-cluster[1,1,1024]", None, "client"), ("yarn", None, "client"), ("yarn", "cluster", "cluster"),
    ("spark://h:7077", "client", "client"), ("k8s://https://h", "cluster", "cluster"),
])
def test_driver_location(master, deploy_mode, where):
    from trinitylake_spark import driver_location

    assert driver_location({"master": master, "deploy_mode": deploy_mode}) == where
