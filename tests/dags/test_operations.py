"""Operations of the maintenance DAGs: Variables read at run time through the Variable API,
a shared pool, the guard against both DAGs running on one lakehouse, failure alerts and
deferrable Databricks tasks.

Runs in the Airflow virtualenv (``make test-dags``); skipped where Airflow is not installed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("airflow")

import sys  # noqa: E402
import types  # noqa: E402

from tests.dags.test_maintenance_dag import DAG_IDS, SUNDAY, _render  # noqa: E402

JOB_TASKS = ("expire", "tables_expire", "tables_orphans", "orphans_dry_run", "orphans", "export_weekly")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    from tests.dags.test_maintenance_dag import DAG_FOLDER

    return DagBag(str(DAG_FOLDER))


def test_variables_come_from_the_variable_api_at_run_time(dagbag, monkeypatch):
    dag = dagbag.dags["trinitylake_maintenance"]
    # Set after parsing: only a run-time read (var.value.get) can see it.
    monkeypatch.setenv("AIRFLOW_VAR_TRINITYLAKE_LAKEHOUSE", "s3://from-variable/lh")
    monkeypatch.setenv("AIRFLOW_VAR_TRINITYLAKE_REPO", "/srv/tl")
    expire = _render(dag, "expire", SUNDAY)
    assert expire.application_args[:2] == ["--lakehouse", "s3://from-variable/lh"]
    assert expire.application == "/srv/tl/jobs/expire.py"
    assert dag.params.dump()["lakehouse"] == ""  # empty param: the Variable decides
    dbx = _render(dagbag.dags["trinitylake_maintenance_databricks"], "export_weekly", SUNDAY)
    assert dbx.spark_python_task["parameters"][1] == "s3://from-variable/lh"
    # A param given in the trigger form wins over the Variable.
    dag.params["lakehouse"] = "s3://from-trigger/lh"
    try:
        assert _render(dag, "expire", SUNDAY).application_args[1] == "s3://from-trigger/lh"
    finally:
        dag.params["lakehouse"] = ""


def test_the_dag_file_reads_no_variable_at_parse_time():
    source = (__import__("pathlib").Path(__file__).resolve().parents[2] / "airflow_dags"
              / "trinitylake_maintenance.py").read_text()
    assert "Variable.get(" not in source and "from airflow.models import Variable" not in source


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_every_task_is_in_the_shared_pool_and_alerts(dagbag, dag_id):
    from trinitylake_alerts import MaintenanceFailureNotifier

    dag = dagbag.dags[dag_id]
    for t in dag.tasks:
        assert t.pool == "trinitylake_maintenance", t.task_id
        callbacks = t.on_failure_callback if isinstance(t.on_failure_callback, list) else [t.on_failure_callback]
        assert any(isinstance(c, MaintenanceFailureNotifier) for c in callbacks), t.task_id


def test_databricks_tasks_defer(dagbag):
    dag = dagbag.dags["trinitylake_maintenance_databricks"]
    for task_id in JOB_TASKS:
        assert dag.get_task(task_id).deferrable is True


@pytest.mark.parametrize(("dag_id", "sibling"), [(DAG_IDS[0], DAG_IDS[1]), (DAG_IDS[1], DAG_IDS[0])])
def test_guard_fails_while_the_other_dag_runs(dagbag, dag_id, sibling):
    from trinitylake_alerts import check_no_sibling_running

    guard = dagbag.dags[dag_id].get_task("lakehouse_guard")
    assert guard.downstream_task_ids == {"expire"} and not guard.upstream_task_ids
    assert sibling in guard.doc_md
    asked = []

    def count(dag, states):
        asked.append((dag, tuple(states)))
        return 1

    with pytest.raises(RuntimeError, match=f"{sibling} has 1 active run"):
        check_no_sibling_running(sibling, count)
    assert asked == [(sibling, ("queued", "running"))]
    check_no_sibling_running(sibling, lambda dag, states: 0)  # nothing running: passes


def test_failure_notifier_logs_and_calls_the_configured_hook(dagbag, monkeypatch, caplog):
    from trinitylake_alerts import MaintenanceFailureNotifier

    received = []
    hooks = types.ModuleType("tl_test_hooks")
    hooks.page = received.append
    monkeypatch.setitem(sys.modules, "tl_test_hooks", hooks)
    monkeypatch.setenv("AIRFLOW_VAR_TRINITYLAKE_FAILURE_HOOK", "tl_test_hooks:page")
    from airflow.sdk.execution_time.context import VariableAccessor

    ti = types.SimpleNamespace(task_id="orphans", dag_id="trinitylake_maintenance", try_number=2, log_url="http://x/log")
    context = {"ti": ti, "dag": dagbag.dags["trinitylake_maintenance"],
               "dag_run": types.SimpleNamespace(run_id="scheduled__2026-11-22"), "params": {"lakehouse": "s3://b/lh"},
               "exception": RuntimeError("3 orphan files could not be deleted"),
               "var": {"value": VariableAccessor(deserialize_json=False)}}
    with caplog.at_level("ERROR"):
        MaintenanceFailureNotifier()(context)
    assert len(received) == 1
    msg = received[0]
    assert (msg["task_id"], msg["run_id"], msg["lakehouse"]) == ("orphans", "scheduled__2026-11-22", "s3://b/lh")
    assert "3 orphan files could not be deleted" in msg["text"]
    assert "tlake --lakehouse s3://b/lh show --job orphans" in msg["text"]
    assert msg["text"] in caplog.text


def test_failure_notifier_without_hook_only_logs(monkeypatch, caplog):
    from trinitylake_alerts import MaintenanceFailureNotifier, resolve_hook

    monkeypatch.delenv("AIRFLOW_VAR_TRINITYLAKE_FAILURE_HOOK", raising=False)
    from airflow.sdk.execution_time.context import VariableAccessor

    context = {"ti": types.SimpleNamespace(task_id="expire_dry_run", dag_id="d"), "params": {},
               "var": {"value": VariableAccessor(deserialize_json=False)}, "reason": "task_failure"}
    with caplog.at_level("ERROR"):
        MaintenanceFailureNotifier()(context)
    assert "show --job expire" in caplog.text
    with pytest.raises(ValueError, match="package.module:function"):
        resolve_hook("no_colon")


def test_failure_notifier_as_a_dag_run_callback_of_dags_test(monkeypatch, caplog):
    """`airflow dags test` (Airflow 3.3) runs the DAG's callback with a SerializedDAG, which has
    no template environment: the alert still names the lakehouse and calls the hook."""
    from trinitylake_alerts import MaintenanceFailureNotifier

    received = []
    hooks = types.ModuleType("tl_test_hooks_run")
    hooks.page = received.append
    monkeypatch.setitem(sys.modules, "tl_test_hooks_run", hooks)
    monkeypatch.setenv("AIRFLOW_VAR_TRINITYLAKE_FAILURE_HOOK", "tl_test_hooks_run:page")
    monkeypatch.setenv("AIRFLOW_VAR_TRINITYLAKE_LAKEHOUSE", "/data/my lh")
    context = {"dag": types.SimpleNamespace(dag_id="trinitylake_maintenance"),
               "dag_run": types.SimpleNamespace(run_id="manual__1"), "params": {"lakehouse": ""}, "reason": "task_failure"}
    with caplog.at_level("ERROR"):
        MaintenanceFailureNotifier()(context)
    assert len(received) == 1
    assert received[0]["lakehouse"] == "/data/my lh"
    assert received[0]["command"] == "tlake --lakehouse '/data/my lh' show"
    assert "(the trinitylake_lakehouse Variable)" not in caplog.text


def test_failure_alert_names_the_rendered_lakehouse_and_a_runnable_command(dagbag):
    from trinitylake_alerts import failure_message

    task = _render(dagbag.dags["trinitylake_maintenance"], "export_weekly", SUNDAY)
    ti = types.SimpleNamespace(task_id="export_weekly", dag_id="trinitylake_maintenance", task=task)
    msg = failure_message({"ti": ti, "task": task, "params": {"lakehouse": ""}, "exception": RuntimeError("x")})
    assert msg["lakehouse"] == "s3://CHANGE-ME/trinitylake"
    assert msg["command"] == "tlake --lakehouse s3://CHANGE-ME/trinitylake show --job export"
    assert msg["command"] in msg["text"]
