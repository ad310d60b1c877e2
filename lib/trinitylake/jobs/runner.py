"""Entry point of every Spark maintenance job: ``jobs/<job>.py`` calls :func:`main`.

    spark-submit jobs/expire.py --lakehouse s3://bucket/lh --conf conf/expire.yaml --dry-run

:func:`main` parses the configuration (`trinitylake.config`), gets the Spark session (the
config's master and ``spark_conf``; under spark-submit or on Databricks the cluster's), opens
the lakehouse with the storage options and control URI, writes the run's ``begin`` row to the
control table, dispatches to ``run_<job>(spark, lakehouse, cfg, result) -> JobResult``, writes
the final row, logs and prints the result as JSON, and returns the exit code:

* 0: the job succeeded (or completed its dry run);
* 1: a TrinityLake error (unsafe operation refused, corrupt node, storage failure, ...);
* 2: a configuration error (unknown option, bad value, missing lakehouse URI);
* 3: the job finished but skipped part of its work (status ``partial``: the tables' jobs
  leave a damaged table alone and maintain the others, `trinitylake.tables_maintenance.damage`).

Every job function has the same signature (its first argument is the job's
`trinitylake.spark.execution.Execution`, which starts Spark only if a phase needs it); each job's record
in `trinitylake.jobs.registry` names it (``trinitylake.jobs.<job>.job:run_<job>``), imported only when asked for.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from trinitylake import job_flags, progress
from trinitylake.errors import ConfigError, TrinityLakeError
from trinitylake.jobs.registry import job_spec
from trinitylake.lakehouse import Lakehouse
from trinitylake.lakehouse.audit import job_begin, job_end
from trinitylake.lakehouse.context import AuditContext
from trinitylake.redact import install_log_redaction, redact_text, redact_value, warn_command_line_secrets
from trinitylake.runs.results import JobResult
from trinitylake.runs.retention import prune_runs, run_states
from trinitylake.spark.execution import DISTRIBUTED, Execution, Limits, warm_arrow
from trinitylake.spark.placement import promised_slots, start_seconds
from trinitylake.spark.session import get_spark
from trinitylake.storage import requests
from trinitylake.util import refuse_pandas_for_pyarrow

if TYPE_CHECKING:
    from trinitylake.config import JobConfig
    from trinitylake.util import Session

log = logging.getLogger("trinitylake.jobs")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_PARTIAL = 3
#: The status of a run that finished but skipped part of its work (exit `EXIT_PARTIAL`).
PARTIAL = "partial"


class JobFailedError(TrinityLakeError):
    """A job failed; `result` holds what it had done (status ``failed``)."""

    def __init__(self, message: str, result: JobResult):
        super().__init__(message)
        self.result = result


def job_function(job: str) -> Callable[..., JobResult]:
    """The ``run_<job>`` function of `job`, from its record in `trinitylake.jobs.registry`
    (imported lazily: the registry is the one list of jobs).

    Raises:
        ConfigError: no such job, or its module cannot be imported.
    """

    return job_spec(job).run_function()


def session_for(cfg: JobConfig, job: str) -> Session:
    """The Spark session: the active one (Databricks, tests), the one spark-submit prepared
    (its master wins), a client of ``cfg.remote``/``SPARK_REMOTE``, or a new one on the
    config's master."""
    from pyspark.sql import SparkSession  # only now: pyspark costs seconds, most jobs never start it

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    return get_spark(None if submitted else cfg.master, app_name=f"tlake-{job}", conf=dict(cfg.spark_conf),
                     remote=cfg.remote)


def execution_for(cfg: JobConfig, job: str, result: JobResult, spark: Session | None = None) -> Execution:
    """Placement of the job's phases; the session starts only when a phase needs it."""
    limits = Limits(local_max_items=cfg.local_max_items, driver_max_rows=cfg.driver_max_rows,
                    threads=cfg.threads, local_threads=cfg.local_threads)
    record: dict[str, Any] = {}
    result.details["execution"] = record

    # spark-submit's master is in its JVM, not in the config: unknown until the session starts.
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    master, conf = cfg.master, dict(cfg.spark_conf)
    promised = None if submitted else promised_slots(master, conf)
    return Execution(cfg.execution, spark=spark, session_factory=lambda: session_for(cfg, job),
                     limits=limits, record=record, label=f"tlake {job} {cfg.run_id}", promised=promised,
                     start_s=None if submitted else start_seconds(master, conf))


def run_job(job: str, cfg: JobConfig, *, spark: Session | None = None, audit: bool = True,
            lakehouse: Lakehouse | None = None) -> JobResult:
    """Run one job with its audit rows; returns the result or raises.

    `spark`: a session to use when a phase goes to the executors (default: created on first
    use from the config; a job whose phases all stay on the driver never starts one).

    Raises:
        JobFailedError: the job failed after it started (its `result` says how far it got;
            the original error is the cause).
        TrinityLakeError: the lakehouse cannot be opened or the control table is unusable
            (nothing was done).
    """

    fn = job_function(job)
    # Redacted once, before anything touches storage: the rows, plans and results quote these
    # options, and this arms the scrubbing of the credential values from every later message
    # and log line, including the storage client's own (see trinitylake.redact).
    arguments = redact_value(cfg.to_dict(), learn=True)
    warm_arrow()
    opened_here = lakehouse is None
    if lakehouse is None:
        lakehouse = Lakehouse.open(cfg.lakehouse, storage_options=dict(cfg.storage_options) or None,
                                   control_uri=cfg.control_uri, audit=audit, context=AuditContext(job, arguments))
    # (A lakehouse the caller opened keeps its context: the job's own rows and commits name the
    # job and its arguments themselves.)
    _control_engine(lakehouse, cfg, job)
    result = JobResult(job=job, run_id=cfg.run_id, lakehouse=lakehouse.uri, dry_run=cfg.is_dry_run)
    ex = execution_for(cfg, job, result, spark)
    if ex.mode == DISTRIBUTED:
        ex.prestart()  # every phase will need it: its start overlaps the steps before the first
    # The version the runner's own `Lakehouse.open` just found (one discovery, not two: on an
    # object store each is a few round trips), else discovered now.
    opened = lakehouse.opened_version if opened_here else None
    result.version_before = opened if opened is not None else lakehouse.latest_version()
    started = datetime.now(UTC)
    result.txn_seq = job_begin(lakehouse.auditor, job, cfg.run_id, arguments, result.version_before)
    log.info("%s %s started on %s (version %s, txn_seq %s, execution %s)", job, cfg.run_id, lakehouse.uri,
             result.version_before, result.txn_seq, ex.mode)
    counted = requests.snapshot()
    try:
        result = fn(ex, lakehouse, cfg, result)
        if result.status == "running":
            result.status = "dry_run" if result.dry_run else "succeeded"
    except BaseException as e:
        result.status = "failed"
        result.error = redact_text(f"{type(e).__name__}: {e}")
        _finish(ex, lakehouse, result, counted)
        _end(lakehouse, job, cfg, arguments, started, result, e)
        if isinstance(e, KeyboardInterrupt | SystemExit):
            raise
        raise JobFailedError(f"{job} {cfg.run_id} failed: {result.error}", result) from e
    if not result.dry_run:
        _prune_bookkeeping(lakehouse, job, cfg, result)
    _finish(ex, lakehouse, result, counted)
    _end(lakehouse, job, cfg, arguments, started, result, None)
    return result


def _control_engine(lakehouse: Lakehouse, cfg: JobConfig, job: str) -> None:
    """The control table through the engine the config asks for; Spark's Delta gets the job's
    own session (started with Delta's JARs when the job has none yet)."""
    engine, table = cfg.control_engine, cfg.control_table
    auditor = lakehouse.auditor
    if not auditor.enabled or (engine == "auto" and not table and not os.environ.get("TLAKE_CONTROL_TABLE")
                               and not os.environ.get("TLAKE_CONTROL_ENGINE")):
        return  # auto without a name: ControlTable checks the active session itself
    from trinitylake.control import ControlTable  # only now: it imports deltalake (0.3 s)

    def session() -> Session:
        from pyspark.sql import SparkSession  # only now: pyspark costs seconds, most jobs never start it

        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
        return get_spark(None if submitted else cfg.master, app_name=f"tlake-{job}", conf=dict(cfg.spark_conf),
                         delta=True)

    auditor.use_control(ControlTable(auditor.control_uri, lakehouse.storage.options or None, engine=engine,
                                     # A session factory: ControlTable calls it when it needs Spark.
                                     table=table, spark=session))


def _prune_bookkeeping(lakehouse: Lakehouse, job: str, cfg: JobConfig, result: JobResult) -> None:
    """The job's last step: prune old ``_maintenance/<job>/`` run folders
    (`trinitylake.runs.retention`); a failure is a warning, never the job's outcome."""

    try:
        control = lakehouse.auditor.control if lakehouse.auditor.enabled else None

        def states() -> dict[str, str]:  # read only when there may be something to prune
            return run_states(control.records(), job) if control is not None and control.exists() else {}
        out = prune_runs(lakehouse.storage, job, current_run_id=cfg.run_id, keep_runs=cfg.keep_runs,
                         max_age_ms=cfg.keep_runs_max_age, now_ms=cfg.reference_time,
                         states=states)
        result.details["bookkeeping"] = out.to_dict()
    except Exception as e:  # noqa: BLE001 - bookkeeping never fails a job that did its work
        log.warning("%s %s: could not prune _maintenance/%s: %s", job, cfg.run_id, job, redact_text(str(e)))
        result.details["bookkeeping"] = {"error": redact_text(f"{type(e).__name__}: {e}")}


def _finish(ex: Execution, lakehouse: Lakehouse, result: JobResult, counted: dict[str, int]) -> None:
    """Record whether (and how) Spark was used, and the requests the run sent (the driver's
    since `counted`, plus what the executors' tasks sent back)."""
    result.requests = requests.add(requests.since(counted), ex.executor_requests)
    result.details["spark"] = {"started": ex.started, "session_seconds": ex.session_seconds,
                               "mode": "connect" if ex.is_connect else ("classic" if ex.started else None)}
    if ex.started:
        try:
            app = ex.spark.conf.get("spark.app.id", None)
        except Exception:  # noqa: BLE001 - some servers refuse to show it
            app = None
        if not app and ex.is_connect:
            app = f"connect:{getattr(ex.spark, 'session_id', '')}"
        lakehouse.auditor.spark_app_id = app


def _end(lakehouse: Lakehouse, job: str, cfg: JobConfig, arguments: dict[str, object], started: datetime, result: JobResult,
         error: BaseException | None) -> None:

    try:
        result.version_after = lakehouse.latest_version()
    except Exception:  # noqa: BLE001 - the lakehouse may have become unreachable; keep what we know
        pass
    try:
        job_end(lakehouse.auditor, result.txn_seq, job, cfg.run_id, arguments, started, status=result.status,
                metrics=result.metrics(), version_before=result.version_before, version_after=result.version_after,
                error=error, notes=[str(n) for n in result.details.get(PARTIAL) or []])
    except Exception as e:  # noqa: BLE001 - the audit row never hides the job's own outcome
        log.warning("could not write the final control-table row of %s %s: %s", job, cfg.run_id, e)


def main(job: str, argv: Sequence[str] | None = None, *, spark: Session | None = None) -> int:
    """Run `job` from the command line; returns the exit code (see the module docstring)."""

    if spark is None:  # a spark-submit process of ours, not a caller's notebook
        refuse_pandas_for_pyarrow()
    try:
        # Looked up on its module at call time: the outcome file (jobs/outcome.py) wraps it.
        cfg = job_flags.parse_job_args(job, list(sys.argv[1:] if argv is None else argv))
    except ConfigError as e:
        print(f"error (ConfigError): {e}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(level=getattr(logging, cfg.log_level, logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    install_log_redaction()
    warn_command_line_secrets(argv if argv is not None else sys.argv[1:])

    remove_progress = progress.add_listener(progress.LogProgress())  # one log line per phase, with counts
    try:
        result = run_job(job, cfg, spark=spark)
    except JobFailedError as e:
        log.error("%s", e)
        print(json.dumps(e.result.to_dict(), default=str))
        return EXIT_CONFIG if isinstance(e.__cause__, ConfigError) else EXIT_ERROR
    except ConfigError as e:
        log.error("%s %s: %s", job, cfg.run_id, e)
        return EXIT_CONFIG
    except TrinityLakeError as e:
        log.error("%s %s failed: %s: %s", job, cfg.run_id, type(e).__name__, e)
        return EXIT_ERROR
    finally:
        remove_progress()
    log.info("%s %s %s: %s", job, result.run_id, result.status, json.dumps(result.counts, sort_keys=True))
    print(json.dumps(result.to_dict(), default=str))
    return EXIT_PARTIAL if result.status == PARTIAL else EXIT_OK
