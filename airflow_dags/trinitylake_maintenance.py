"""TrinityLake maintenance: expire versions, clean orphan files, export weekly.

Two DAGs built from the one task table in ``trinitylake_tasks.py``::

    expire >> orphans_dry_run >> orphans >> is_export_day >> export_weekly

* ``trinitylake_maintenance`` runs each job with ``SparkSubmitOperator``
  (``spark-submit <repo>/jobs/<job>.py --lakehouse ... --conf <repo>/conf/<job>.yaml``, the
  wheel as ``--py-files``, Spark properties from ``trinitylake_tasks.SPARK_CONF``; cluster
  defaults come from the ``spark_default`` connection and the cluster's spark-defaults).
* ``trinitylake_maintenance_databricks`` submits the same jobs as one-time Databricks runs
  with ``DatabricksSubmitRunOperator`` (for a persistent Databricks job use
  ``conf/databricks/trinitylake_maintenance.json`` or the bundle in ``databricks.yml``).

Both DAGs start paused and target the same lakehouse: unpause exactly one of them.

Weekly export: both DAGs run daily and ``is_export_day`` (a ShortCircuitOperator) lets
``export_weekly`` run only when the logical date falls on the ``export_weekday`` param (ISO
weekday, 7 = Sunday); on other days the export shows as skipped. One DAG with a gate, rather
than a second weekly DAG, keeps one run at a time (``max_active_runs=1``), so an export never
overlaps an orphan cleanup.

Idempotency: every job gets ``--reference-time`` = the run's logical date (for a run triggered
without one, its ``run_after``), never "now", and the export is named ``weekly-<YYYYMMDD>`` of
that date and exports the version current at it. Clearing a run re-runs the same cutoffs.

Settings: per-run values are DAG params (editable in the trigger form); their defaults, the
connection ids and the schedule come from Airflow Variables given through the environment
(``AIRFLOW_VAR_TRINITYLAKE_LAKEHOUSE`` ...), read without touching the metadata database at
parse time:

=================================  ==========================================  ==========================
Variable (``AIRFLOW_VAR_<NAME>``)  meaning                                     default
=================================  ==========================================  ==========================
trinitylake_lakehouse              lakehouse URI (param ``lakehouse``)         s3://CHANGE-ME/trinitylake
trinitylake_export_root            export root URI (param ``export_root``)     s3://CHANGE-ME/...-exports
trinitylake_repo                   checkout with jobs/, conf/, dist/           /opt/trinitylake
trinitylake_databricks_root        workspace folder with jobs/, conf/, dist/   /Workspace/Shared/trinitylake
trinitylake_schedule               cron of both DAGs                           0 3 * * * (UTC)
trinitylake_spark_conn_id          spark-submit connection                     spark_default
trinitylake_databricks_conn_id     Databricks connection                       databricks_default
=================================  ==========================================  ==========================
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.databricks.operators.databricks import DatabricksSubmitRunOperator
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG, BaseOperator, Param

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # the DAG folder is on sys.path in Airflow, not always in tools and tests
    sys.path.insert(0, _HERE)
import trinitylake_tasks as tl  # noqa: E402

DAG_ID = "trinitylake_maintenance"
DATABRICKS_DAG_ID = "trinitylake_maintenance_databricks"


def _variable(name: str, default: str) -> str:
    """An Airflow Variable set through the environment (no metadata-database call at parse time)."""
    return os.environ.get(f"AIRFLOW_VAR_{name.upper()}", default)


SCHEDULE = _variable("trinitylake_schedule", tl.DAILY_CRON)
SPARK_CONN_ID = _variable("trinitylake_spark_conn_id", "spark_default")
DATABRICKS_CONN_ID = _variable("trinitylake_databricks_conn_id", "databricks_default")

# The run's logical date; a run triggered without one (Airflow 3 allows it) uses its run_after.
RUN_TIME = "(dag_run.logical_date or dag_run.run_after)"
REFERENCE_TIME = "{{ " + RUN_TIME + " | ts }}"
EXPORT_NAME = "weekly-{{ " + RUN_TIME + " | ds_nodash }}"

COMMON_PARAMS = {
    "lakehouse": Param(
        _variable("trinitylake_lakehouse", tl.DEFAULT_LAKEHOUSE), type="string", description="Lakehouse URI."
    ),
    "export_root": Param(
        _variable("trinitylake_export_root", tl.DEFAULT_EXPORT_ROOT),
        type="string",
        description="Weekly exports go to <export_root>/weekly-<YYYYMMDD>.",
    ),
    "export_weekday": Param(
        tl.DEFAULT_EXPORT_WEEKDAY,
        type="integer",
        minimum=1,
        maximum=7,
        description="ISO weekday of the weekly export (1 = Monday ... 7 = Sunday).",
    ),
}

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "trinitylake",
    "depends_on_past": False,
    "retry_delay": timedelta(minutes=5),
}


def _export_day(dag_run: Any, params: dict[str, Any], **_: Any) -> bool:
    when = dag_run.logical_date or dag_run.run_after
    return tl.is_export_day(when, params["export_weekday"])


def _build_dag(
    dag_id: str,
    description: str,
    tags: list[str],
    params: dict[str, Param],
    make_task: Callable[[tl.MaintenanceTask], BaseOperator],
) -> DAG:
    with DAG(
        dag_id=dag_id,
        description=description,
        schedule=SCHEDULE,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        # Both DAGs maintain the same lakehouse: they start paused, unpause the one you use.
        is_paused_upon_creation=True,
        default_args=DEFAULT_ARGS,
        params={**COMMON_PARAMS, **params},
        tags=["trinitylake", "maintenance", *tags],
        doc_md=__doc__,
    ) as dag:
        operators: dict[str, BaseOperator] = {}
        for task in tl.TASKS:
            operator = make_task(task)
            upstream = operators[task.upstream] if task.upstream else None
            if task.weekly:
                gate = ShortCircuitOperator(
                    task_id=tl.GATE_TASK_ID,
                    python_callable=_export_day,
                    doc_md="Skip the weekly export unless the logical date falls on params.export_weekday.",
                )
                if upstream is not None:
                    upstream >> gate
                upstream = gate
            if upstream is not None:
                upstream >> operator
            operators[task.task_id] = operator
    return dag


# ---- spark-submit -------------------------------------------------------------------------------

REPO = "{{ params.trinitylake_repo }}"


def _spark_submit_task(task: tl.MaintenanceTask) -> BaseOperator:
    return SparkSubmitOperator(
        task_id=task.task_id,
        doc_md=task.description,
        conn_id=SPARK_CONN_ID,
        name=f"trinitylake-{task.task_id}",
        application=f"{REPO}/jobs/{task.job}.py",
        py_files=f"{REPO}/dist/{tl.WHEEL}",
        conf=dict(tl.SPARK_CONF),
        application_args=tl.job_arguments(
            task,
            lakehouse="{{ params.lakehouse }}",
            conf_path=f"{REPO}/conf/{task.job}.yaml",
            reference_time=REFERENCE_TIME,
            export_name=EXPORT_NAME,
            export_root="{{ params.export_root }}",
        ),
        retries=task.retries,
        execution_timeout=timedelta(minutes=task.timeout_minutes),
    )


spark_dag = _build_dag(
    DAG_ID,
    "TrinityLake maintenance with spark-submit: expire, orphan cleanup, weekly export.",
    ["spark"],
    {
        "trinitylake_repo": Param(
            _variable("trinitylake_repo", tl.DEFAULT_REPO),
            type="string",
            description="Checkout holding jobs/, conf/ and dist/ (the wheel from `make dist`).",
        )
    },
    _spark_submit_task,
)


# ---- Databricks ---------------------------------------------------------------------------------

DATABRICKS_ROOT = "{{ params.databricks_root }}"


def _databricks_task(task: tl.MaintenanceTask) -> BaseOperator:
    return DatabricksSubmitRunOperator(
        task_id=task.task_id,
        doc_md=task.description,
        databricks_conn_id=DATABRICKS_CONN_ID,
        run_name=f"trinitylake-{task.task_id}-{{{{ {RUN_TIME} | ts_nodash }}}}",
        new_cluster=tl.databricks_new_cluster(),
        spark_python_task=tl.databricks_spark_python_task(
            task,
            jobs_root=DATABRICKS_ROOT,
            conf_root=DATABRICKS_ROOT,
            lakehouse="{{ params.lakehouse }}",
            export_root="{{ params.export_root }}",
            reference_time=REFERENCE_TIME,
            export_name=EXPORT_NAME,
        ),
        libraries=[{"whl": f"{DATABRICKS_ROOT}/dist/{tl.WHEEL}"}],
        timeout_seconds=task.timeout_minutes * 60,
        retries=task.retries,
        execution_timeout=timedelta(minutes=task.timeout_minutes + 15),
    )


databricks_dag = _build_dag(
    DATABRICKS_DAG_ID,
    "TrinityLake maintenance as Databricks runs: expire, orphan cleanup, weekly export.",
    ["databricks"],
    {
        "databricks_root": Param(
            _variable("trinitylake_databricks_root", tl.DEFAULT_DATABRICKS_ROOT),
            type="string",
            description="Workspace folder holding jobs/, conf/ and dist/ (the wheel).",
        )
    },
    _databricks_task,
)
