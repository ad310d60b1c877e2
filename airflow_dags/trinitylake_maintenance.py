"""TrinityLake maintenance: expire versions, clean orphan files, export weekly.

Two DAGs built from the one task table in ``trinitylake_tasks.py``::

    expire >> tables_expire >> tables_orphans >> orphans_dry_run >> orphans >> is_export_day >> export_weekly

* ``trinitylake_maintenance`` runs each job with ``TrinityLakeSparkSubmitOperator``
  (``trinitylake_spark.py``, a ``SparkSubmitOperator``): ``spark-submit <repo>/jobs/<job>.py
  --lakehouse ... --conf <repo>/conf/<job>.yaml``, Spark properties from
  ``trinitylake_tasks.SPARK_CONF``, master and deploy mode from the ``spark_default``
  connection. The job's Python is the environment ``make dist`` packs
  (``<repo>/dist/trinitylake-env.tar.gz``), placed by where the driver runs, decided when the
  task runs from the connection:

  - master ``local[N]`` (one machine; the README's recipe): the worker unpacks the tarball
    once into ``<repo>/build/airflow-env/<hash>/`` and driver and Python workers run it
    (``spark.pyspark.python`` and ``spark.pyspark.driver.python``); nothing is shipped.
  - client mode on a cluster: executors get ``--archives ...#env`` and run
    ``./env/bin/python``; the driver runs the copy unpacked on the worker.
  - cluster mode: driver and executors run ``./env/bin/python`` from the archive.

  The interpreter is always a Spark property, never ``PYSPARK_PYTHON`` in the task's
  environment (a pip-installed spark-submit runs that path on the worker to find
  ``SPARK_HOME``). ``spark-submit`` is the worker's own: the first on ``PATH``, else
  ``$SPARK_HOME/bin``, else the pyspark of ``<repo>/.venv`` (``make venv``); the Airflow
  virtualenv has none (the provider no longer takes a ``spark-home`` connection extra).
  Results: the job's result (what ``tlake <job> --json`` prints) is the task's XCom
  ``return_value`` wherever the driver runs on the worker (local and client mode).
  Retries: a permanent error (a typed error a retry cannot change: no lakehouse there, an
  export name that exists, a refused unsafe operation, a bad option) fails the task at once
  (``AirflowFailException``); a transient one (storage that kept failing, a commit conflict,
  Spark or the JVM dying) is retried twice, 5 minutes apart.
* ``trinitylake_maintenance_databricks`` submits the same jobs as one-time Databricks runs
  with ``DatabricksSubmitRunOperator`` (for a persistent Databricks job use
  ``conf/databricks/trinitylake_maintenance.json`` or the bundle in ``databricks.yml``).

Both DAGs start paused and target the same lakehouse: unpause exactly one of them.

Weekly export: both DAGs run daily and ``is_export_day`` (a ShortCircuitOperator) lets
``export_weekly`` run only when the logical date falls on the ``export_weekday`` param (ISO
weekday, 7 = Sunday); on other days the export shows as skipped. One DAG with a gate, rather
than a second weekly DAG, keeps one run at a time (``max_active_runs=1``), so an export never
overlaps an orphan cleanup.

No walk task: ``walk`` is a read-only inventory of the files the retained versions reach
(``tlake walk``), and ``expire`` and ``orphans`` each run that same walk themselves before they
delete anything; a task of its own would read every node file once more and change nothing.
Run it by hand (``tlake walk`` or ``spark-submit jobs/walk.py``) to look at a lakehouse.

Export to another store (disaster recovery to another S3 endpoint or account): the
``export_target_storage_options`` param (else the Variable of that name) becomes the export
task's ``TLAKE_EXPORT_TARGET_STORAGE_OPTIONS``: the target's own fsspec options, a JSON object
or ``key=value,key=value`` (e.g. ``{"endpoint_url": "https://s3.dr.example.com"}``). Empty (the
default): none, the target shares the lakehouse's options. The target's credentials never go
through a param or the command line: set ``TLAKE_TARGET_AWS_ACCESS_KEY_ID`` and
``TLAKE_TARGET_AWS_SECRET_ACCESS_KEY`` (and ``TLAKE_TARGET_S3_ENDPOINT_URL``) in the worker's
environment (spark-submit's driver inherits it) or, on Databricks, in the cluster's
``spark_env_vars`` from a secret scope; the job redacts them from everything it records.

Idempotency: every job gets ``--reference-time`` = the run's logical date (for a run triggered
without one, its ``run_after``), never "now", and the export is named ``weekly-<YYYYMMDD>`` of
that date and exports the version current at it. Clearing a run re-runs the same cutoffs.
A second run on export day at another time (a manual trigger, a run triggered without a logical
date) finds that day's export already recorded, holding an earlier version: the task passes
``--if-exists keep``, so it counts that export as done and succeeds, copying and overwriting
nothing (its result says ``already_exported`` and the version kept). An export is never
overwritten; for a later version the same day, run ``tlake export`` under another name.

Settings: per-run values are DAG params (editable in the trigger form). A param left empty
takes the Airflow Variable of the same setting, read when the task runs through the Variable
API (``{{ var.value.get(...) }}`` in templated fields: the UI, a secrets backend or
``AIRFLOW_VAR_<NAME>``), never at parse time, so parsing touches no database. The schedule,
the pool and the spark-submit connection id are parse-time settings and come from
``AIRFLOW_VAR_<NAME>`` environment variables only:

=========================================  ====================================================  =============================
Variable (``AIRFLOW_VAR_<NAME>``)          meaning                                               default
=========================================  ====================================================  =============================
trinitylake_lakehouse                      lakehouse URI (param ``lakehouse``)                   s3://CHANGE-ME/trinitylake
trinitylake_export_root                    export root URI (param ``export_root``)               s3://CHANGE-ME/...-exports
trinitylake_export_target_storage_options  export target's storage options (param of that name)  (none)
trinitylake_repo                           checkout with jobs/, conf/, dist/                     /opt/trinitylake
trinitylake_databricks_root                workspace folder with jobs/, conf/, dist/             /Workspace/Shared/trinitylake
trinitylake_schedule                       cron of both DAGs                                     0 3 * * * (UTC)
trinitylake_spark_conn_id                  spark-submit connection (environment only)            spark_default
trinitylake_databricks_conn_id             Databricks connection                                 databricks_default
trinitylake_pool                           pool of every task (environment only)                 trinitylake_maintenance
trinitylake_failure_hook                   ``module:function`` alerted on failures               (none: log only)
=========================================  ====================================================  =============================

Operations: every task of both DAGs runs in the pool ``trinitylake_maintenance`` (create it
with one slot: ``airflow pools set trinitylake_maintenance 1 "TrinityLake maintenance"``), so
the two DAGs' jobs never overlap; and the first task, ``lakehouse_guard``, fails a run while
the other DAG has a run queued or running (both unpaused is a mistake, and is alerted).
Failures of any task call ``trinitylake_alerts.MaintenanceFailureNotifier``. The Databricks
tasks are deferrable: while a run is on the cluster they wait in the triggerer, not in a
worker slot.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.databricks.operators.databricks import DatabricksSubmitRunOperator
from airflow.providers.standard.operators.python import PythonOperator, ShortCircuitOperator
from airflow.sdk import DAG, BaseOperator, Param

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # the DAG folder is on sys.path in Airflow, not always in tools and tests
    sys.path.insert(0, _HERE)
import trinitylake_alerts as alerts  # noqa: E402
import trinitylake_tasks as tl  # noqa: E402
from trinitylake_spark import TrinityLakeSparkSubmitOperator  # noqa: E402

DAG_ID = "trinitylake_maintenance"
DATABRICKS_DAG_ID = "trinitylake_maintenance_databricks"


def _variable(name: str, default: str) -> str:
    """A parse-time setting: an Airflow Variable set through the environment (no
    metadata-database call at parse time)."""
    return os.environ.get(f"AIRFLOW_VAR_{name.upper()}", default)


def _setting(param: str, variable: str, default: str) -> str:
    """A run-time setting: the param when given, else the Variable (UI, secrets backend or
    environment, read by the task through the Variable API), else `default`."""
    return "{{ params." + param + " or var.value.get('" + variable + "', '" + default + "') }}"


SCHEDULE = _variable("trinitylake_schedule", tl.DAILY_CRON)
SPARK_CONN_ID = _variable("trinitylake_spark_conn_id", "spark_default")
DATABRICKS_CONN_ID = "{{ var.value.get('trinitylake_databricks_conn_id', 'databricks_default') }}"
POOL = _variable("trinitylake_pool", "trinitylake_maintenance")
GUARD_TASK_ID = "lakehouse_guard"
LAKEHOUSE = _setting("lakehouse", "trinitylake_lakehouse", tl.DEFAULT_LAKEHOUSE)
EXPORT_ROOT = _setting("export_root", "trinitylake_export_root", tl.DEFAULT_EXPORT_ROOT)
EXPORT_TARGET_STORAGE_OPTIONS = _setting("export_target_storage_options", "trinitylake_export_target_storage_options",
                                         "")

# The run's logical date; a run triggered without one (Airflow 3 allows it) uses its run_after.
RUN_TIME = "(dag_run.logical_date or dag_run.run_after)"
REFERENCE_TIME = "{{ " + RUN_TIME + " | ts }}"
EXPORT_NAME = "weekly-{{ " + RUN_TIME + " | ds_nodash }}"

COMMON_PARAMS = {
    "lakehouse": Param(
        "", type="string", description="Lakehouse URI; empty: the trinitylake_lakehouse Variable."
    ),
    "export_root": Param(
        "",
        type="string",
        description="Weekly exports go to <export_root>/weekly-<YYYYMMDD>; empty: the trinitylake_export_root Variable.",
    ),
    "export_target_storage_options": Param(
        "",
        type="string",
        description="Storage options of the export target on another store (another S3 endpoint or account), "
        'as a JSON object or key=value,key=value, e.g. {"endpoint_url": "https://s3.dr.example.com"}; no '
        "credentials (TLAKE_TARGET_AWS_* in the worker's environment). Empty: the "
        "trinitylake_export_target_storage_options Variable, else none (the target shares the lakehouse's options).",
    ),
    "orphans_max_candidates": Param(
        100_000,
        type=["null", "integer"],
        minimum=0,
        description="Orphans gate: the dry run (and the real run) fail, deleting nothing, when more orphan "
        "candidates than this are found; null: no limit.",
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
    "pool": POOL,
    "on_failure_callback": alerts.MaintenanceFailureNotifier(),
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
    sibling_dag_id: str,
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
        on_failure_callback=alerts.MaintenanceFailureNotifier(),
    ) as dag:
        guard = PythonOperator(
            task_id=GUARD_TASK_ID,
            python_callable=alerts.guard_callable(sibling_dag_id),
            doc_md=f"Fail while {sibling_dag_id} (the same lakehouse) has a run queued or running.",
        )
        operators: dict[str, BaseOperator] = {}
        for task in tl.TASKS:
            operator = make_task(task)
            upstream = operators[task.upstream] if task.upstream else guard
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

REPO = _setting("trinitylake_repo", "trinitylake_repo", tl.DEFAULT_REPO)


def _spark_submit_task(task: tl.MaintenanceTask) -> BaseOperator:
    return TrinityLakeSparkSubmitOperator(
        task_id=task.task_id,
        repo=REPO,
        env_archive=f"dist/{tl.ENV_ARCHIVE}",
        doc_md=task.description,
        conn_id=SPARK_CONN_ID,
        name=f"trinitylake-{task.task_id}",
        application=f"{REPO}/jobs/{task.job}.py",
        # spark.archives is --archives as a property: `conf` is templated, the operator's own
        # `archives` argument is not (and REPO is a template). With a local master the operator
        # drops it and runs the environment unpacked on the worker (trinitylake_spark.py).
        conf={**tl.SPARK_CONF, **tl.ENV_ARCHIVE_CONF, "spark.archives": f"{REPO}/dist/{tl.ENV_ARCHIVE}#env"},
        application_args=tl.job_arguments(
            task,
            lakehouse=LAKEHOUSE,
            conf_path=f"{REPO}/conf/{task.job}.yaml",
            reference_time=REFERENCE_TIME,
            export_name=EXPORT_NAME,
            export_root=EXPORT_ROOT,
            max_candidates="{{ params.orphans_max_candidates }}",
        ),
        # Templated; an empty value is dropped when the task runs (trinitylake_spark.py).
        env_vars=tl.job_environment(task, target_storage_options=EXPORT_TARGET_STORAGE_OPTIONS) or None,
        retries=task.retries,
        execution_timeout=timedelta(minutes=task.timeout_minutes),
    )


spark_dag = _build_dag(
    DAG_ID,
    "TrinityLake maintenance with spark-submit: expire, orphan cleanup, weekly export.",
    ["spark"],
    {
        "trinitylake_repo": Param(
            "",
            type="string",
            description="Checkout holding jobs/, conf/ and dist/ (the wheel from `make dist`); empty: the "
            "trinitylake_repo Variable.",
        )
    },
    _spark_submit_task,
    DATABRICKS_DAG_ID,
)


# ---- Databricks ---------------------------------------------------------------------------------

DATABRICKS_ROOT = _setting("databricks_root", "trinitylake_databricks_root", tl.DEFAULT_DATABRICKS_ROOT)


def _databricks_task(task: tl.MaintenanceTask) -> BaseOperator:
    return DatabricksSubmitRunOperator(
        task_id=task.task_id,
        doc_md=task.description,
        databricks_conn_id=DATABRICKS_CONN_ID,
        run_name=f"trinitylake-{task.task_id}-{{{{ {RUN_TIME} | ts_nodash }}}}",
        new_cluster=tl.databricks_new_cluster(
            tl.job_environment(task, target_storage_options=EXPORT_TARGET_STORAGE_OPTIONS)),
        spark_python_task=tl.databricks_spark_python_task(
            task,
            jobs_root=DATABRICKS_ROOT,
            conf_root=DATABRICKS_ROOT,
            lakehouse=LAKEHOUSE,
            export_root=EXPORT_ROOT,
            reference_time=REFERENCE_TIME,
            export_name=EXPORT_NAME,
        ),
        libraries=[{"whl": f"{DATABRICKS_ROOT}/dist/{tl.WHEEL}"}],
        timeout_seconds=task.timeout_minutes * 60,
        retries=task.retries,
        execution_timeout=timedelta(minutes=task.timeout_minutes + 15),
        # Waits for the Databricks run in the triggerer, not holding a worker slot for hours.
        deferrable=True,
    )


databricks_dag = _build_dag(
    DATABRICKS_DAG_ID,
    "TrinityLake maintenance as Databricks runs: expire, orphan cleanup, weekly export.",
    ["databricks"],
    {
        "databricks_root": Param(
            "",
            type="string",
            description="Workspace folder holding jobs/, conf/ and dist/ (the wheel); empty: the "
            "trinitylake_databricks_root Variable.",
        )
    },
    _databricks_task,
    DAG_ID,
)
