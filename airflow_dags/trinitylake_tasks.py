"""The one task table of the TrinityLake maintenance pipeline.

Both orchestrations are built from :data:`TASKS`:

* the Airflow DAGs in ``trinitylake_maintenance.py`` (spark-submit and Databricks variants);
* the Databricks job definitions that ``conf/databricks/generate.py`` writes
  (``conf/databricks/trinitylake_maintenance.json`` for the Jobs API and
  ``conf/databricks/resources/trinitylake_maintenance.job.yml`` for the asset bundle).

The pipeline, once a day::

    expire -> tables_expire -> tables_orphans -> orphans_dry_run -> orphans -> is_export_day
      -> export_weekly

``tables_expire`` and ``tables_orphans`` maintain the lakehouse's Iceberg tables (snapshot
expiry, then orphan files under the tables' locations) right after the lakehouse's own expire,
so that table files only the just-expired versions reached are deleted the same day.

``is_export_day`` lets the weekly export run only when the run's date falls on
``export_weekday`` (ISO: Monday = 1 ... Sunday = 7, default Sunday): a ShortCircuitOperator in
Airflow, a ``condition_task`` on Databricks. One daily schedule with a gate keeps a single
run at a time (the export never overlaps an orphan cleanup) and one place to look.

Every job gets ``--lakehouse``, ``--conf conf/<job>.yaml`` and ``--reference-time`` set to the
run's logical (scheduled) time, never "now", so that a re-run of a date computes the same
cutoffs; the export is named after that date and exports the version current at it.

An export to another store (disaster recovery to another S3 endpoint or account) takes the
target's own storage options from the environment of its driver (:func:`job_environment`):
``TLAKE_EXPORT_TARGET_STORAGE_OPTIONS`` (a JSON object or ``key=value,key=value``; empty: none,
the target shares the lakehouse's options) for the non-secret ones, and the target's
credentials from ``TLAKE_TARGET_AWS_ACCESS_KEY_ID`` / ``TLAKE_TARGET_AWS_SECRET_ACCESS_KEY`` (and
``TLAKE_TARGET_S3_ENDPOINT_URL``) set on the worker or cluster from a secret store, never in a
job's parameters. An environment variable rather than a flag: a templated value that may be
empty cannot add or leave out a command-line flag, and an empty variable counts as unset.

This module is pure Python (no Airflow, no Databricks SDK imports) so that the generator and
the tests of the main virtualenv can import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: Version of the ``trinitylake`` wheel the jobs ship (``make dist``); a test compares it
#: with pyproject.toml.
PACKAGE_VERSION = "0.1.0"
WHEEL = f"trinitylake-{PACKAGE_VERSION}-py3-none-any.whl"
#: The packed environment ``make dist`` writes (wheel + runtime dependencies, venv-pack): shipped
#: with ``spark-submit --archives dist/<ENV_ARCHIVE>#env`` and run as ``./env/bin/python``.
#: pyarrow, deltalake and mmh3 are native code, which ``--py-files`` cannot ship.
ENV_ARCHIVE = "trinitylake-env.tar.gz"
#: Spark properties that make driver (cluster mode) and executors use the unpacked archive.
ENV_ARCHIVE_CONF: dict[str, str] = {"spark.pyspark.python": "./env/bin/python"}

#: The export's ``target_storage_options`` from the environment (trinitylake.options; empty: unset).
TARGET_OPTIONS_ENV = "TLAKE_EXPORT_TARGET_STORAGE_OPTIONS"

#: Task id of the weekly gate (ShortCircuitOperator / condition_task).
GATE_TASK_ID = "is_export_day"
#: ISO weekday of the weekly export (7 = Sunday).
DEFAULT_EXPORT_WEEKDAY = 7

#: Spark properties of cluster runs (spark-submit ``--conf`` and the Databricks job cluster).
#: Local runs use conf/spark-defaults.conf instead (which also turns the UI off).
SPARK_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "64",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}

DAILY_CRON = "0 3 * * *"
DAILY_QUARTZ_CRON = "0 0 3 * * ?"
TIMEZONE = "UTC"

# Defaults of the values an operator sets per deployment (Airflow Variables / Databricks job
# parameters); the CHANGE-ME locations fail loudly rather than touch a real bucket.
DEFAULT_LAKEHOUSE = "s3://CHANGE-ME/trinitylake"
DEFAULT_EXPORT_ROOT = "s3://CHANGE-ME/trinitylake-exports"
DEFAULT_REPO = "/opt/trinitylake"
DEFAULT_DATABRICKS_ROOT = "/Workspace/Shared/trinitylake"


@dataclass(frozen=True)
class MaintenanceTask:
    """One step of the pipeline.

    Attributes:
        task_id: the Airflow task_id and the Databricks task_key.
        job: runs ``jobs/<job>.py`` with ``conf/<job>.yaml``.
        upstream: the task this one waits for (None for the first).
        extra_args: flags added after the common ones (e.g. ``--dry-run``).
        weekly: runs only behind the ``is_export_day`` gate.
        timeout_minutes: hard limit of one attempt.
        retries: retries of a failed attempt; every job is idempotent (expire commits before
            it deletes, orphans re-lists, export skips files already copied).
        description: one line for the UI.
    """

    task_id: str
    job: str
    upstream: str | None
    description: str
    extra_args: tuple[str, ...] = ()
    weekly: bool = False
    timeout_minutes: int = 120
    retries: int = 2


TASKS: tuple[MaintenanceTask, ...] = (
    MaintenanceTask(
        "expire",
        "expire",
        None,
        "Expire versions past max_version_age (commit first), then delete the files only they reached.",
    ),
    MaintenanceTask(
        "tables_expire",
        "tables_expire",
        "expire",
        "Expire old snapshots of the Iceberg tables (their properties' ages; many tables per version), then "
        "delete the files no retained snapshot or lakehouse version reaches.",
    ),
    MaintenanceTask(
        "tables_orphans",
        "tables_orphans",
        "tables_expire",
        "Delete files older than 3 days under the Iceberg tables' locations that no live metadata reaches.",
        timeout_minutes=60,
    ),
    MaintenanceTask(
        "orphans_dry_run",
        "orphans",
        "tables_orphans",
        "List orphan candidates and record them in the control table; delete nothing.",
        extra_args=("--dry-run",),
        timeout_minutes=60,
    ),
    MaintenanceTask(
        "orphans",
        "orphans",
        "orphans_dry_run",
        "Delete format-owned files older than the transaction TTL that nothing references.",
    ),
    MaintenanceTask(
        "export_weekly",
        "export",
        "orphans",
        "Weekly full export of the version current at the run's date to <export_root>/weekly-<date>.",
        weekly=True,
        timeout_minutes=240,
    ),
)


def task_by_id(task_id: str) -> MaintenanceTask:
    for task in TASKS:
        if task.task_id == task_id:
            return task
    raise KeyError(task_id)


def job_arguments(
    task: MaintenanceTask,
    *,
    lakehouse: str,
    conf_path: str,
    reference_time: str,
    export_name: str,
    export_root: str,
    max_candidates: str | None = None,
) -> list[str]:
    """Command-line arguments of ``jobs/<job>.py`` for one task.

    The values are placeholders of the orchestrator (Jinja in Airflow, ``{{job.…}}`` dynamic
    value references on Databricks), so one table serves both. `max_candidates` is the orphans
    gate: both orphans tasks fail, deleting nothing, above it (the dry run first, so the real
    run never starts); None leaves it to ``conf/orphans.yaml``.
    """
    args = ["--lakehouse", lakehouse, "--conf", conf_path, "--reference-time", reference_time, *task.extra_args]
    if task.job == "orphans" and max_candidates is not None:
        args += ["--max-candidates", max_candidates]
    if task.job == "export":
        # keep: a second run on export day (a manual trigger, a run of a later time that day) finds
        # that day's export done and keeps it; a re-run of the same run resumes or verifies it.
        args += ["--name", export_name, "--target", f"{export_root}/{export_name}", "--as-of", reference_time,
                 "--if-exists", "keep"]
    return args


def job_environment(task: MaintenanceTask, *, target_storage_options: str | None = None) -> dict[str, str]:
    """Environment variables of ``jobs/<job>.py`` for one task: the export's target storage
    options (:data:`TARGET_OPTIONS_ENV`, a placeholder of the orchestrator like the arguments);
    none for the other jobs, or when `target_storage_options` is None."""
    if task.job == "export" and target_storage_options is not None:
        return {TARGET_OPTIONS_ENV: target_storage_options}
    return {}


def is_export_day(when: datetime, export_weekday: int | str = DEFAULT_EXPORT_WEEKDAY) -> bool:
    """True when ``when`` falls on the ISO weekday of the weekly export (7 = Sunday)."""
    weekday = int(export_weekday)
    if not 1 <= weekday <= 7:
        raise ValueError(f"export_weekday must be an ISO weekday 1..7 (7 = Sunday), got {export_weekday!r}")
    return when.isoweekday() == weekday


# ---- Databricks -------------------------------------------------------------------------------

JOB_NAME = "trinitylake_maintenance"
JOB_CLUSTER_KEY = "maintenance"
#: Databricks dynamic value references: the trigger (scheduled) time plays the logical date.
DBX_REFERENCE_TIME = "{{job.trigger.time.timestamp_ms}}"
DBX_EXPORT_NAME = "weekly-{{job.trigger.time.iso_date}}"
DBX_WEEKDAY = "{{job.trigger.time.iso_weekday}}"


#: Runtime of the classic job cluster: an LTS line, any maintenance release (``.x``), Spark 4.
DATABRICKS_SPARK_VERSION = "17.3.x-scala2.13"
#: Access mode of the classic job cluster. Dedicated: the jobs' Python on the executors
#: (``mapInArrow``) reads the lakehouse through fsspec with the cluster's own credentials (its
#: instance profile, or ``spark_env_vars`` from a secret scope). Standard (USER_ISOLATION) mode
#: would run the same code (no RDD or SparkContext anywhere, Spark Connect underneath) but
#: isolates user code from the cluster's credentials and reaches storage only through Unity
#: Catalog; that is the serverless variant's setting (:func:`databricks_serverless_job`).
DATABRICKS_ACCESS_MODE = "DATA_SECURITY_MODE_DEDICATED"
#: Serverless environment of the serverless variant: its version (Python 3.12, Spark Connect)
#: and the key the tasks name. ``environment_version`` replaces the older ``client`` field.
SERVERLESS_ENVIRONMENT_KEY = "trinitylake"
SERVERLESS_ENVIRONMENT_VERSION = "4"
SERVERLESS_JOB_NAME = "trinitylake_maintenance_serverless"


def databricks_new_cluster(spark_env_vars: dict[str, str] | None = None) -> dict[str, Any]:
    """The job cluster every Spark task runs on (AWS node type; change for Azure/GCP).

    Executor credentials: the cluster's instance profile (``aws_attributes``), or
    ``spark_env_vars`` ``AWS_*`` referencing a secret scope (``{{secrets/<scope>/<key>}}``);
    never job parameters. An export target on another store: its options in `spark_env_vars`
    (:func:`job_environment`), its credentials as ``TLAKE_TARGET_AWS_*`` from a secret scope.
    """
    cluster: dict[str, Any] = {
        "spark_version": DATABRICKS_SPARK_VERSION,
        "node_type_id": "i3.xlarge",
        "num_workers": 2,
        "data_security_mode": DATABRICKS_ACCESS_MODE,
        "spark_conf": dict(SPARK_CONF),
    }
    if spark_env_vars:
        cluster["spark_env_vars"] = dict(spark_env_vars)
    return cluster


def databricks_spark_python_task(
    task: MaintenanceTask,
    *,
    jobs_root: str,
    conf_root: str,
    lakehouse: str,
    export_root: str,
    reference_time: str = DBX_REFERENCE_TIME,
    export_name: str = DBX_EXPORT_NAME,
    source: str | None = "WORKSPACE",
) -> dict[str, Any]:
    """``spark_python_task`` of one task: ``<jobs_root>/jobs/<job>.py --conf <conf_root>/conf/<job>.yaml ...``."""
    spec: dict[str, Any] = {
        "python_file": f"{jobs_root}/jobs/{task.job}.py",
        "parameters": job_arguments(
            task,
            lakehouse=lakehouse,
            conf_path=f"{conf_root}/conf/{task.job}.yaml",
            reference_time=reference_time,
            export_name=export_name,
            export_root=export_root,
        ),
    }
    if source:
        spec["source"] = source
    return spec


def databricks_job(
    *,
    root: str = DEFAULT_DATABRICKS_ROOT,
    conf_root: str | None = None,
    wheel: str | None = None,
    source: str | None = "WORKSPACE",
    lakehouse_default: str = DEFAULT_LAKEHOUSE,
    export_root_default: str = DEFAULT_EXPORT_ROOT,
    pause_status: str = "PAUSED",
    serverless: bool = False,
    export_target_storage_options: str | None = None,
) -> dict[str, Any]:
    """The Jobs API 2.2 job settings of the pipeline (one task per row).

    Args:
        root: where ``jobs/`` lives (a workspace path, or a path relative to a bundle file).
        conf_root: where ``conf/`` lives when the job runs; defaults to ``root``.
        wheel: the wheel library path; defaults to ``<root>/dist/<WHEEL>``.
        source: ``spark_python_task.source`` (None for bundles, which upload the files).
        lakehouse_default, export_root_default: defaults of the job parameters.
        pause_status: of the daily schedule.
        serverless: no cluster: every Spark task names the job's serverless environment
            (``environment_key``), whose ``dependencies`` install the wheel; else one job
            cluster (:func:`databricks_new_cluster`) with the wheel as a task library.
        export_target_storage_options: the export target's options on the job cluster
            (:data:`TARGET_OPTIONS_ENV`; e.g. a bundle variable); None: not set (the job's
            ``conf/export.yaml`` decides). Serverless compute has no cluster environment: its
            storage is reached through Unity Catalog.
    """
    wheel = wheel or f"{root}/dist/{WHEEL}"
    conf_root = conf_root or root
    tasks: list[dict[str, Any]] = []
    for task in TASKS:
        upstream = task.upstream
        if task.weekly:
            tasks.append(
                {
                    "task_key": GATE_TASK_ID,
                    "description": "Run the weekly export only on export_weekday (ISO, 7 = Sunday).",
                    "depends_on": [{"task_key": upstream}],
                    "condition_task": {
                        "op": "EQUAL_TO",
                        "left": DBX_WEEKDAY,
                        "right": "{{job.parameters.export_weekday}}",
                    },
                }
            )
        spec = databricks_spark_python_task(
            task,
            jobs_root=root,
            conf_root=conf_root,
            lakehouse="{{job.parameters.lakehouse}}",
            export_root="{{job.parameters.export_root}}",
            source=source,
        )
        entry: dict[str, Any] = {"task_key": task.task_id, "description": task.description}
        if task.weekly:
            entry["depends_on"] = [{"task_key": GATE_TASK_ID, "outcome": "true"}]
        elif upstream:
            entry["depends_on"] = [{"task_key": upstream}]
        if serverless:
            entry |= {"environment_key": SERVERLESS_ENVIRONMENT_KEY, "spark_python_task": spec}
        else:
            entry |= {"job_cluster_key": JOB_CLUSTER_KEY, "spark_python_task": spec, "libraries": [{"whl": wheel}]}
        entry |= {
            "timeout_seconds": task.timeout_minutes * 60,
            "max_retries": task.retries,
            "min_retry_interval_millis": 300_000,
            "retry_on_timeout": False,
        }
        tasks.append(entry)
    job: dict[str, Any] = {
        "name": SERVERLESS_JOB_NAME if serverless else JOB_NAME,
        "description": "TrinityLake maintenance: expire versions, clean orphans, weekly export"
        + (" (serverless)." if serverless else "."),
        "tags": {"project": "trinitylake", "component": "maintenance"},
        "max_concurrent_runs": 1,
        "queue": {"enabled": True},
        "parameters": [
            {"name": "lakehouse", "default": lakehouse_default},
            {"name": "export_root", "default": export_root_default},
            {"name": "export_weekday", "default": str(DEFAULT_EXPORT_WEEKDAY)},
        ],
    }
    if serverless:
        job["environments"] = [
            {
                "environment_key": SERVERLESS_ENVIRONMENT_KEY,
                "spec": {"environment_version": SERVERLESS_ENVIRONMENT_VERSION, "dependencies": [wheel]},
            }
        ]
    else:
        export = next(task for task in TASKS if task.job == "export")
        env = job_environment(export, target_storage_options=export_target_storage_options)
        job["job_clusters"] = [{"job_cluster_key": JOB_CLUSTER_KEY, "new_cluster": databricks_new_cluster(env)}]
    job["tasks"] = tasks
    job["schedule"] = {
        "quartz_cron_expression": DAILY_QUARTZ_CRON,
        "timezone_id": TIMEZONE,
        "pause_status": pause_status,
    }
    return job


def databricks_serverless_job(**kwargs: Any) -> dict[str, Any]:
    """The same pipeline on serverless compute (Spark Connect; see :func:`databricks_job`).

    No cluster and no instance profile: storage is reached through Unity Catalog (external
    locations, volumes), and the control rows go through the runtime's Delta
    (``--control-table`` may name a Unity Catalog table).
    """
    return databricks_job(serverless=True, **kwargs)
