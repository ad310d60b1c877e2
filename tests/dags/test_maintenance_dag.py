"""The maintenance DAGs parse, have the expected chain, and template from the logical date.

Runs in the Airflow virtualenv (``make test-dags``); skipped where Airflow is not installed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("airflow")

import copy  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

import pendulum  # noqa: E402

DAG_FOLDER = Path(__file__).resolve().parents[2] / "airflow_dags"
LIB = Path(__file__).resolve().parents[2] / "lib"
MAIN_PYTHON = LIB.parent / ".venv" / "bin" / "python"
DAG_IDS = ("trinitylake_maintenance", "trinitylake_maintenance_databricks")
EDGES = {
    ("lakehouse_guard", "expire"),
    ("expire", "tables_expire"),
    ("tables_expire", "tables_orphans"),
    ("tables_orphans", "orphans_dry_run"),
    ("orphans_dry_run", "orphans"),
    ("orphans", "is_export_day"),
    ("is_export_day", "export_weekly"),
}
SUNDAY = pendulum.datetime(2026, 11, 22, 3, 0, tz="UTC")  # a Sunday: export day
MONDAY = pendulum.datetime(2026, 11, 23, 3, 0, tz="UTC")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(str(DAG_FOLDER))


def _render(dag, task_id: str, logical_date, run_after=None):
    """Render every templated field of a copy of the task as Airflow would for that run."""
    from airflow.sdk.execution_time.context import VariableAccessor

    task = copy.deepcopy(dag.get_task(task_id))
    dag_run = types.SimpleNamespace(logical_date=logical_date, run_after=run_after or logical_date, run_id="test")
    context = {
        # Airflow's own Variable accessor: AIRFLOW_VAR_* (the environment secrets backend) first.
        "var": {"value": VariableAccessor(deserialize_json=False), "json": VariableAccessor(deserialize_json=True)},
        "dag": dag,
        "task": task,
        "dag_run": dag_run,
        "params": dag.params.dump(),
        "run_id": "test",
    }
    if logical_date is not None:
        context |= {
            "logical_date": logical_date,
            "ds": logical_date.strftime("%Y-%m-%d"),
            "ds_nodash": logical_date.strftime("%Y%m%d"),
            "ts": logical_date.isoformat(),
        }
    task.render_template_fields(context, jinja_env=dag.get_template_env())
    return task


def test_dagbag_imports_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(DAG_IDS) <= set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_dag_shape(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert {t.task_id for t in dag.tasks} == {"lakehouse_guard", "expire", "tables_expire", "tables_orphans",
                                              "orphans_dry_run", "orphans", "is_export_day", "export_weekly"}
    edges = {(up, t.task_id) for t in dag.tasks for up in t.upstream_task_ids}
    assert edges == EDGES
    assert dag.catchup is False
    assert dag.max_active_runs == 1
    assert dag.is_paused_upon_creation is True
    assert dag.start_date == pendulum.datetime(2026, 1, 1, tz="UTC")
    assert {"trinitylake", "maintenance"} <= set(dag.tags)
    assert dag.get_task("is_export_day").task_type == "ShortCircuitOperator"


def test_operator_types(dagbag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    spark = dagbag.dags["trinitylake_maintenance"]
    dbx = dagbag.dags["trinitylake_maintenance_databricks"]
    for task_id in ("expire", "tables_expire", "tables_orphans", "orphans_dry_run", "orphans", "export_weekly"):
        assert spark.get_task(task_id).task_type == "TrinityLakeSparkSubmitOperator"
        assert isinstance(spark.get_task(task_id), SparkSubmitOperator)
        assert dbx.get_task(task_id).task_type == "DatabricksSubmitRunOperator"


def test_spark_submit_templates_follow_the_logical_date(dagbag):
    dag = dagbag.dags["trinitylake_maintenance"]
    expire = _render(dag, "expire", SUNDAY)
    assert expire.application == "/opt/trinitylake/jobs/expire.py"
    # The packed environment (native pyarrow/deltalake/mmh3), not --py-files, which cannot ship them.
    assert expire.conf["spark.archives"] == "/opt/trinitylake/dist/trinitylake-env.tar.gz#env"
    assert expire.py_files is None
    assert expire.conf["spark.pyspark.python"] == "./env/bin/python"
    # As the README's cluster path: the interpreter as a property, never PYSPARK_PYTHON in the
    # environment, which a pip-installed spark-submit would run on the worker to find SPARK_HOME.
    assert not any(k.startswith("PYSPARK_") for k in (expire.env_vars or {}))
    assert expire.conf["spark.sql.session.timeZone"] == "UTC"
    assert expire.application_args == [
        "--lakehouse", "s3://CHANGE-ME/trinitylake",
        "--conf", "/opt/trinitylake/conf/expire.yaml",
        "--reference-time", "2026-11-22T03:00:00+00:00",
    ]  # fmt: skip
    assert "--dry-run" in _render(dag, "orphans_dry_run", SUNDAY).application_args
    assert "--dry-run" not in _render(dag, "orphans", SUNDAY).application_args

    export = _render(dag, "export_weekly", SUNDAY)
    assert export.application == "/opt/trinitylake/jobs/export.py"
    assert export.application_args == [
        "--lakehouse", "s3://CHANGE-ME/trinitylake",
        "--conf", "/opt/trinitylake/conf/export.yaml",
        "--reference-time", "2026-11-22T03:00:00+00:00",
        "--name", "weekly-20261122",
        "--target", "s3://CHANGE-ME/trinitylake-exports/weekly-20261122",
        "--as-of", "2026-11-22T03:00:00+00:00",
        "--if-exists", "keep",
    ]  # fmt: skip


def test_orphans_gate_reaches_both_orphans_runs(dagbag):
    """The orphans_max_candidates param becomes --max-candidates of the dry run and the real
    run (above it both fail, deleting nothing); expire and export do not get it."""
    dag = dagbag.dags["trinitylake_maintenance"]
    assert dag.params.dump()["orphans_max_candidates"] == 100_000
    for task_id in ("orphans_dry_run", "orphans"):
        args = list(_render(dag, task_id, SUNDAY).application_args)
        assert args[args.index("--max-candidates") + 1] == "100000"
    for task_id in ("expire", "export_weekly"):
        assert "--max-candidates" not in list(_render(dag, task_id, SUNDAY).application_args)


def test_rendering_is_a_function_of_the_run_not_of_now(dagbag):
    dag = dagbag.dags["trinitylake_maintenance"]
    first = _render(dag, "export_weekly", SUNDAY).application_args
    again = _render(dag, "export_weekly", SUNDAY).application_args
    other = _render(dag, "export_weekly", MONDAY).application_args
    assert first == again
    assert "weekly-20261123" in other and "2026-11-23T03:00:00+00:00" in other


def test_run_without_logical_date_uses_run_after(dagbag):
    dag = dagbag.dags["trinitylake_maintenance"]
    args = _render(dag, "export_weekly", None, run_after=MONDAY).application_args
    assert args[args.index("--reference-time") + 1] == "2026-11-23T03:00:00+00:00"
    assert args[args.index("--name") + 1] == "weekly-20261123"


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_export_gate_opens_on_export_weekday_only(dagbag, dag_id):
    gate = dagbag.dags[dag_id].get_task("is_export_day")
    params = dagbag.dags[dag_id].params.dump()
    assert params["export_weekday"] == 7
    run = types.SimpleNamespace
    assert gate.python_callable(dag_run=run(logical_date=SUNDAY, run_after=SUNDAY), params=params) is True
    assert gate.python_callable(dag_run=run(logical_date=MONDAY, run_after=MONDAY), params=params) is False
    assert gate.python_callable(dag_run=run(logical_date=None, run_after=SUNDAY), params=params) is True
    assert gate.python_callable(dag_run=run(logical_date=MONDAY, run_after=MONDAY), params={"export_weekday": 1})


def test_databricks_templates_follow_the_logical_date(dagbag):
    dag = dagbag.dags["trinitylake_maintenance_databricks"]
    export = _render(dag, "export_weekly", SUNDAY)
    assert export.spark_python_task == {
        "python_file": "/Workspace/Shared/trinitylake/jobs/export.py",
        "parameters": [
            "--lakehouse", "s3://CHANGE-ME/trinitylake",
            "--conf", "/Workspace/Shared/trinitylake/conf/export.yaml",
            "--reference-time", "2026-11-22T03:00:00+00:00",
            "--name", "weekly-20261122",
            "--target", "s3://CHANGE-ME/trinitylake-exports/weekly-20261122",
            "--as-of", "2026-11-22T03:00:00+00:00",
            "--if-exists", "keep",
        ],
        "source": "WORKSPACE",
    }  # fmt: skip
    assert export.libraries == [{"whl": "/Workspace/Shared/trinitylake/dist/trinitylake-0.1.0-py3-none-any.whl"}]
    assert export.run_name == "trinitylake-export_weekly-20261122T030000"
    assert export.new_cluster["spark_version"]


def test_databricks_payload_is_a_valid_submit_task(dagbag):
    jobs = pytest.importorskip("databricks.sdk.service.jobs")
    dag = dagbag.dags["trinitylake_maintenance_databricks"]
    for task_id in ("expire", "tables_expire", "tables_orphans", "orphans_dry_run", "orphans", "export_weekly"):
        payload = _render(dag, task_id, SUNDAY)._get_merged_json()
        task = jobs.SubmitTask.from_dict({"task_key": task_id, **payload})
        assert task.spark_python_task.python_file.endswith(".py")
        assert task.new_cluster.spark_version == payload["new_cluster"]["spark_version"]


#: Parses job arguments where the library and its dependencies are installed (the main venv,
#: as the jobs run them): JSON ``[[job, args], ...]`` on stdin, the parsed configs' fields out.
_PARSE = """
import json, sys
from trinitylake.job_flags import parse_job_args
out = []
for job, args in json.load(sys.stdin):
    cfg = parse_job_args(job, args, env={})
    out.append({k: getattr(cfg, k, None) for k in ("lakehouse", "reference_time", "dry_run", "name", "as_of",
                                                    "if_exists")})
print(json.dumps(out))
"""


def _parse_in_main_venv(calls: list[tuple[str, list[str]]]) -> list[dict]:
    """`trinitylake.job_flags.parse_job_args` of each (job, args) in the main venv's Python (the
    Airflow venv does not hold the library's dependencies, and this test must not skip for it)."""
    import json
    import subprocess

    assert MAIN_PYTHON.exists(), f"{MAIN_PYTHON} is missing: `make venv` (make test-dags builds it)"
    proc = subprocess.run([str(MAIN_PYTHON), "-c", _PARSE], input=json.dumps(calls), capture_output=True, text=True,
                          timeout=120, cwd=str(LIB.parent))
    assert proc.returncode == 0, f"the rendered arguments do not parse: {proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_rendered_arguments_parse_as_job_configs(dagbag, dag_id):
    """What the DAG passes is exactly what jobs/<job>.py accepts (trinitylake.config), parsed in
    the main venv, where the library imports."""
    dag = dagbag.dags[dag_id]
    calls = []
    for task_id, job in (("expire", "expire"), ("tables_expire", "tables_expire"), ("tables_orphans", "tables_orphans"),
                         ("orphans_dry_run", "orphans"), ("export_weekly", "export")):
        task = _render(dag, task_id, SUNDAY)
        args = task.application_args if dag_id == DAG_IDS[0] else task.spark_python_task["parameters"]
        args = [str(a) for a in args]
        conf = args[args.index("--conf") + 1]
        args[args.index("--conf") + 1] = str(LIB.parent / "conf" / Path(conf).name)
        calls.append((job, args))
    parsed = _parse_in_main_venv(calls)
    assert len(parsed) == 5
    for (job, _args), cfg in zip(calls, parsed, strict=True):
        assert cfg["lakehouse"] == "s3://CHANGE-ME/trinitylake", job
        assert cfg["reference_time"] == 1795316400000, job  # 2026-11-22T03:00:00Z
        if job == "orphans":
            assert cfg["dry_run"] is True
        if job == "export":
            assert (cfg["name"], cfg["as_of"], cfg["if_exists"]) == ("weekly-20261122", 1795316400000, "keep")


@pytest.mark.parametrize("day", range(7))
def test_every_weekday_a_scheduled_run_and_a_later_manual_run_the_same_day(dagbag, day):
    """Each day of a week (2026-11-23 is a Monday), with export_weekday set to that day and to the
    default: the gate opens only on export day; the scheduled run (03:00) and a manual run later
    that day (14:27) export under the same day's name, with the logical time as the version, and
    ``--if-exists keep`` (the later run keeps the day's export instead of failing on the name)."""
    dag = dagbag.dags["trinitylake_maintenance"]
    gate = dag.get_task("is_export_day")
    params = dag.params.dump()
    scheduled = MONDAY.add(days=day)
    manual = scheduled.add(hours=11, minutes=27)
    for when in (scheduled, manual):
        run = types.SimpleNamespace(logical_date=when, run_after=when)
        assert gate.python_callable(dag_run=run, params=params) is (when.isoweekday() == 7)
        assert gate.python_callable(dag_run=run, params={**params, "export_weekday": when.isoweekday()}) is True
        args = list(_render(dag, "export_weekly", when).application_args)
        assert args[args.index("--name") + 1] == f"weekly-{when:%Y%m%d}"
        assert args[args.index("--as-of") + 1] == when.isoformat()
        assert args[args.index("--if-exists") + 1] == "keep"
