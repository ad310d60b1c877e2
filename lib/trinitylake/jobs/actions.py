"""A Python API for users who already have a Spark session: the jobs and the history as DataFrames.

In the style of Iceberg's ``SparkActions`` and Delta's ``DESCRIBE HISTORY``: build an action
with the job's own option names, ``execute()`` it, and read what it did as Spark DataFrames.
The session may be classic or Spark Connect (the DataFrame API only; nothing here needs the
session's JVM context).

Example (with ``spark`` an existing session)::

    from trinitylake.jobs.actions import TrinityLakeActions, history

    actions = TrinityLakeActions(spark, "s3://bucket/lakehouse")
    walk = actions.walk().execute()
    walk.reachable_files_df().groupBy("kind").count().show()

    dry = actions.orphans(dry_run=True).execute()          # plan only: nothing is deleted
    dry.candidate_files_df().show()
    done = actions.orphans().execute()
    done.deleted_files_df().count()

    history(spark, "s3://bucket/lakehouse").select("txn_seq", "record_type", "command").show()

Every action runs through the same runner as ``spark-submit jobs/<job>.py`` and ``tlake <job>``
(`trinitylake.jobs.runner.run_job`): the same options and defaults (defaults < ``conf`` file <
``TLAKE_<JOB>_<KEY>`` environment < the options given here), the same placement of each phase
(small phases stay on the driver, big ones go to the session's executors), the same audit rows
and the same plan folders. The DataFrames are read lazily from what the run persisted, never
collected on the driver:

===========  ============================  ===========================================================
job          DataFrame                     read from
===========  ============================  ===========================================================
walk         ``reachable_files_df``        the listing at ``output`` (``_maintenance/walk/<run_id>``)
orphans      ``candidate_files_df``        ``_maintenance/orphans/<run_id>/candidates``
orphans      ``deleted_files_df``          the candidates of a real run (every one was deleted)
expire       ``expired_versions_df``       ``plan.json`` (expired and left-over versions)
expire       ``candidate_files_df``        ``_maintenance/expire/<run_id>/candidates``
expire       ``deleted_files_df``          the candidates, or ``to_delete`` when versions committed
                                           during the run kept some of them
export       ``copied_files_df``           ``<target>/_export/<name>/plan`` joined with the per-part
                                           manifests of verified files, plus the root file
===========  ============================  ===========================================================

A job that fails raises `trinitylake.jobs.runner.JobFailedError` (its ``result`` says how far
it got), as ``run_job`` does. Listings on ``s3://`` are read through ``s3a://`` outside
Databricks (Hadoop's S3 filesystem, as for the control table); Spark cannot read ``memory://``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import pyarrow as pa

from trinitylake.config import JOB_OPTIONS, ExportConfig, JobConfig, load_job_config
from trinitylake.control import SCHEMA as CONTROL_SCHEMA
from trinitylake.control import ControlTable
from trinitylake.control.records import RECORD_TYPE_RANK
from trinitylake.control.spark_engine import is_table_name, session_has_delta
from trinitylake.errors import ConfigError
from trinitylake.format.paths import root_name
from trinitylake.jobs.orphans.job import CANDIDATE_SCHEMA as ORPHAN_CANDIDATE_SCHEMA
from trinitylake.jobs.registry import job_spec
from trinitylake.jobs.runner import run_job
from trinitylake.lakehouse import Lakehouse
from trinitylake.runs.folder import read_json
from trinitylake.runs.results import JobResult
from trinitylake.spark.execution import ddl, functions_for
from trinitylake.storage import Storage, join_uri, parse_uri, same_scheme, spark_location
from trinitylake.storage.target_options import resolve_target_options
from trinitylake.treewalk.walk_rows import OUTPUT_SCHEMA as WALK_OUTPUT_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from trinitylake.util import Session

__all__ = [
    "ActionResult",
    "JobAction",
    "ExpireResult",
    "ExportResult",
    "OrphansResult",
    "TrinityLakeActions",
    "WalkResult",
    "history",
]

#: Rows of a walk listing and of expire's candidates: path, kind, size, depth, first_version.
REACHED_SCHEMA = WALK_OUTPUT_SCHEMA
#: Rows of orphans' candidates: path, size, mtime (epoch seconds).
ORPHAN_SCHEMA = ORPHAN_CANDIDATE_SCHEMA
#: Rows of `ExpireResult.expired_versions_df`: ``expired`` now, or ``leftover`` of an earlier run.
EXPIRED_VERSIONS_SCHEMA = pa.schema([("version", pa.int64()), ("status", pa.string())])
#: Rows of `ExportResult.copied_files_df` (paths relative to the target root; sources are URIs).
COPIED_SCHEMA = pa.schema([("path", pa.string()), ("source", pa.string()), ("kind", pa.string()),
                           ("depth", pa.int32()), ("action", pa.string()), ("size", pa.int64()),
                           ("md5", pa.string())])
_PLAN_DDL = "target string, source string, kind string, depth int, action string"
_MANIFEST_DDL = "format string, part string, files map<string, array<string>>"


# ---- reading what a run persisted ----------------------------------------------------------
def _empty(spark: Session, schema: pa.Schema) -> DataFrame:
    return spark.createDataFrame(schema.empty_table(), schema=ddl(schema))


def _sql_type(f: pa.Field) -> str:
    return ddl(pa.schema([f])).split(" ", 1)[1]


def _read_listing(spark: Session, uri: str | None, schema: pa.Schema) -> Any:
    """A Parquet listing written by `trinitylake.spark.output.write_listing` (lazy)."""
    if not uri:
        return _empty(spark, schema)
    return spark.read.schema(ddl(schema)).parquet(spark_location(uri))


# ---- results ---------------------------------------------------------------------------------
class ActionResult:
    """What one executed action did: the job's `JobResult`, and its files as DataFrames."""

    def __init__(self, spark: Session, result: JobResult, config: JobConfig):
        self.spark = spark
        self.job_result = result
        self.config = config

    @property
    def status(self) -> str:
        """``succeeded`` or ``dry_run``."""
        return self.job_result.status

    @property
    def run_id(self) -> str:
        return self.job_result.run_id

    @property
    def dry_run(self) -> bool:
        return self.job_result.dry_run

    @property
    def counts(self) -> dict[str, int]:
        return self.job_result.counts

    @property
    def bytes(self) -> dict[str, int]:
        return self.job_result.bytes

    @property
    def txn_seq(self) -> int | None:
        """The run's row in the control table (`history`)."""
        return self.job_result.txn_seq

    def to_dict(self) -> dict[str, Any]:
        """The job's result, JSON-ready and redacted (as ``--json`` prints it)."""
        return self.job_result.to_dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.job_result.job} {self.run_id}: {self.status}, {self.counts})"


class WalkResult(ActionResult):
    def reachable_files_df(self) -> DataFrame:
        """Every file the walked versions reach: ``path, kind, size, depth, first_version``.

        ``path`` is relative to the lakehouse root (a full URI for files outside it, e.g. an
        export's); ``kind`` is root, node, definition or lakehouse_def."""
        return _read_listing(self.spark, self.job_result.output_location, REACHED_SCHEMA)


class OrphansResult(ActionResult):
    def candidate_files_df(self) -> DataFrame:
        """The orphans the run found (``path, size, mtime``), dry run or not: format-owned files
        older than the cutoff that no retained version, export or open transaction reaches."""
        return _read_listing(self.spark, self.job_result.output_location, ORPHAN_SCHEMA)

    def deleted_files_df(self) -> DataFrame:
        """The files the run deleted (empty for a dry run). A run that fails to delete one
        raises, so those of a returned real run are all of its candidates."""
        if self.dry_run:
            return _empty(self.spark, ORPHAN_SCHEMA)
        return self.candidate_files_df()


class ExpireResult(ActionResult):
    def expired_versions_df(self) -> DataFrame:
        """``version, status``: ``expired`` by this run's plan, or ``leftover`` (expired by an
        earlier run that stopped before deleting their files; this run finishes them)."""
        rows: dict[str, list[Any]] = {"version": [], "status": []}
        loc = self.job_result.plan_location
        if loc:
            plan = read_json(Storage(loc.rsplit("/", 1)[0], dict(self.config.storage_options) or None), "plan.json")
            for status, versions in (("leftover", plan.get("leftover_versions", [])),
                                     ("expired", plan.get("plan", {}).get("expired", []))):
                rows["version"].extend(int(v) for v in versions)
                rows["status"].extend(status for _ in versions)
        table = pa.table(rows, schema=EXPIRED_VERSIONS_SCHEMA)
        return self.spark.createDataFrame(table, schema=ddl(EXPIRED_VERSIONS_SCHEMA)).orderBy("version")

    def candidate_files_df(self) -> DataFrame:
        """``path, kind, size, depth, first_version`` of the files only the expired versions
        reach (what the plan decided to delete)."""
        return _read_listing(self.spark, self.job_result.output_location, REACHED_SCHEMA)

    def deleted_files_df(self) -> DataFrame:
        """The files the run deleted (empty for a dry run): its candidates, less those that
        versions committed while it ran still reach."""
        if self.dry_run:
            return _empty(self.spark, REACHED_SCHEMA)
        narrowed = self.job_result.details.get("delete_location")
        return _read_listing(self.spark, narrowed or self.job_result.output_location, REACHED_SCHEMA)


class ExportResult(ActionResult):
    def _target_options(self, export_dir: str) -> dict[str, Any] | None:
        """The target's storage options as the run had them: its own (``target_storage_options``,
        ``TLAKE_TARGET_*``), else the lakehouse's when the scheme is the same."""
        cfg = self.config
        own = resolve_target_options(export_dir, cfg.target_storage_options if isinstance(cfg, ExportConfig) else {})
        if own is not None:
            return own
        return (dict(cfg.storage_options) or None) if same_scheme(export_dir, self.job_result.lakehouse) else None

    def copied_files_df(self) -> DataFrame:
        """Every file of the export, verified at the target: ``path`` (relative to the target
        root), ``source`` (URI), ``kind`` (root, node, def, odf), ``depth``, ``action`` (copy
        or rewrite), ``size`` and ``md5`` as verified at the target. A re-run that resumed an
        interrupted export lists the files of both runs. Spark reads the plan and manifests at the
        target itself: a target on another store needs the session's own access to it (e.g.
        ``spark.hadoop.fs.s3a.bucket.<bucket>.endpoint``)."""
        spark = self.spark
        F = functions_for(spark)  # noqa: N806
        r = self.job_result
        export_dir = r.plan_location
        if not export_dir:
            return _empty(spark, COPIED_SCHEMA)
        cols = [F.col(f.name).cast(_sql_type(f)).alias(f.name) for f in COPIED_SCHEMA]
        # The root file is copied last, outside the plan's parts; the plan index (one small
        # JSON file, which Spark's readers skip for its leading underscore) records it.
        target = Storage(export_dir, self._target_options(export_dir))
        root = read_json(target, "plan/_plan.json")["root"]
        source = join_uri(parse_uri(r.lakehouse).uri, root_name(int(r.details["version"])))
        row = [root["path"], source, "root", 0, root["action"], int(root["size"]), root["md5"]]
        index = spark.createDataFrame(pa.table([[v] for v in row], schema=COPIED_SCHEMA), schema=ddl(COPIED_SCHEMA))
        if not r.counts.get("batches"):
            return index
        plan = spark.read.schema(_PLAN_DDL).parquet(spark_location(f"{export_dir}/plan"))
        verified = (spark.read.text(spark_location(f"{export_dir}/copied"), wholetext=True)
                    .select(F.explode(F.from_json("value", _MANIFEST_DDL)["files"]).alias("target", "v"))
                    .select("target", F.col("v")[0].cast("bigint").alias("size"), F.col("v")[1].alias("md5")))
        files = plan.join(verified, "target", "inner").withColumnRenamed("target", "path").select(*cols)
        return files.unionByName(index)


# ---- actions ---------------------------------------------------------------------------------
R = TypeVar("R", bound=ActionResult)


class JobAction(Generic[R]):
    """One job run to be: its options (the job's own names), then `execute`, which returns the
    job's result class (its record in `trinitylake.jobs.registry` names both)."""

    def __init__(self, actions: TrinityLakeActions, job: str, options: Mapping[str, object]):
        spec = job_spec(job)
        self.job = spec.name
        self.result_class: type[R] = spec.result_class()
        self._actions = actions
        self._options: dict[str, object] = {}
        self.options(**options)

    def option(self, name: str, value: object) -> JobAction[R]:
        """Set one option (``dry_run``, ``execution``, ``older_than``, ...); returns the action.

        Raises:
            ConfigError: the job has no such option.
        """
        key = name.replace("-", "_")
        if key not in JOB_OPTIONS[self.job] or key == "lakehouse":
            known = ", ".join(k for k in JOB_OPTIONS[self.job] if k != "lakehouse")
            raise ConfigError(f"{self.job} has no option {name!r}; its options are {known}")
        self._options[key] = value
        return self

    def options(self, **options: object) -> JobAction[R]:
        """Set several options; returns the action."""
        for k, v in options.items():
            self.option(k, v)
        return self

    def config(self) -> JobConfig:
        """The job's configuration as `execute` would run it now (values parsed and checked)."""
        a = self._actions
        overrides = {**a.common_options, **self._options, "lakehouse": a.uri}
        return load_job_config(self.job, a.conf_files.get(self.job), overrides=overrides, env=a.env)

    def execute(self) -> R:
        """Run the job on the actions' session; returns its result with its DataFrames.

        Raises:
            ConfigError: an unknown option or a bad value (nothing was done).
            JobFailedError: the job failed after it started (`trinitylake.jobs.runner`).
            TrinityLakeError: the lakehouse cannot be opened or the control table is unusable.
        """
        cfg = self.config()
        a = self._actions
        lakehouse = a.open(cfg)
        result = run_job(self.job, cfg, spark=a.spark, audit=a.audit, lakehouse=lakehouse)
        return self.result_class(a.spark, result, cfg)


class TrinityLakeActions:
    """The maintenance jobs of one lakehouse, run on an existing Spark session.

    Args:
        spark: a classic or Spark Connect session; phases big enough for the executors run
            there, and the result DataFrames belong to it.
        lakehouse: the lakehouse URI (``s3://bucket/lh``, ``file:///...``, a local path) or an
            open `Lakehouse` (its URI, storage options, control URI and audit setting are used;
            each run opens it anew).
        conf: ``job -> YAML file`` (e.g. ``{"orphans": "conf/orphans.yaml"}``), the jobs'
            ``--conf`` layer.
        env: where ``TLAKE_<JOB>_<KEY>`` variables are read (default ``os.environ``; ``{}``
            ignores them).
        audit: write the runs' rows to the control table (as every job does).
        **common_options: options given to every job (``storage_options``, ``control_uri``,
            ``control_table``, ``execution``, ``threads``, ``reference_time``, ...).
    """

    def __init__(self, spark: Session, lakehouse: str | Lakehouse, *, conf: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None, audit: bool = True, **common_options: object):
        self.spark = spark
        self._lakehouse: Lakehouse | None = None
        if isinstance(lakehouse, str):
            self.uri = parse_uri(lakehouse).uri
        else:
            self._lakehouse = lakehouse
            self.uri = lakehouse.uri
            audit = audit and lakehouse.auditor.enabled
            common_options.setdefault("control_uri", lakehouse.auditor.control_uri)
            if lakehouse.storage.options:
                common_options.setdefault("storage_options", dict(lakehouse.storage.options))
        self.audit = audit
        self.conf_files = dict(conf or {})
        self.env = env
        self.common_options = {k.replace("-", "_"): v for k, v in common_options.items()}

    def open(self, cfg: JobConfig) -> Lakehouse:
        """The lakehouse one run works on (a fresh object: runs do not share its caches)."""
        return Lakehouse.open(cfg.lakehouse, storage_options=dict(cfg.storage_options) or None,
                              control_uri=cfg.control_uri, audit=self.audit)

    def walk(self, **options: object) -> JobAction[WalkResult]:
        """List every file reachable from the retained versions (or ``versions=[...]``)."""
        return JobAction(self, "walk", options)

    def orphans(self, **options: object) -> JobAction[OrphansResult]:
        """Delete old format-owned files nothing references (``dry_run=True``: plan only)."""
        return JobAction(self, "orphans", options)

    def expire(self, **options: object) -> JobAction[ExpireResult]:
        """Expire old versions and delete what only they reach (``dry_run=True``: plan only)."""
        return JobAction(self, "expire", options)

    def export(self, **options: object) -> JobAction[ExportResult]:
        """Copy a version to ``target`` under ``name`` (``mode`` full, partial or minimal); a
        target on another store takes ``target_storage_options={...}`` (or the ``TLAKE_TARGET_*``
        environment, `trinitylake.storage.target_options`)."""
        return JobAction(self, "export", options)


# ---- history ---------------------------------------------------------------------------------
def history(spark: Session, lakehouse_or_path: str | Lakehouse, control_table: str | None = None, *,
            storage_options: Mapping[str, object] | None = None, newest_first: bool = False) -> Any:
    """The control table's rows (`trinitylake.control.SCHEMA`) as a DataFrame, ordered by
    ``txn_seq`` and, within one transaction, by lifecycle (``begin`` before its final row).

    Args:
        spark: a classic or Spark Connect session.
        lakehouse_or_path: an open `Lakehouse` or a lakehouse URI (its control table is
            ``<lakehouse>/_control``).
        control_table: where the rows are when not there (as the jobs' ``control_table``
            option): a catalog name (``catalog.schema.table``) or a path. Default:
            ``TLAKE_CONTROL_TABLE``, else the control URI.
        storage_options: fsspec options of the lakehouse storage (a `Lakehouse` brings its own).
        newest_first: order by descending ``txn_seq`` (as ``tlake show``) instead.

    A session with Delta (`trinitylake.control.spark_engine.session_has_delta`) reads the
    table through Spark's Delta, lazily; any other reads it with delta-rs into Arrow and hands
    it to ``createDataFrame``. A lakehouse without a control table gives no rows.
    """
    if isinstance(lakehouse_or_path, str):
        lh_uri = parse_uri(lakehouse_or_path).uri
        control_uri = f"{lh_uri}/_control"
        options = dict(storage_options or {})
    else:
        control_uri = lakehouse_or_path.auditor.control_uri
        options = dict(storage_options or lakehouse_or_path.storage.options or {})
    table = control_table or os.environ.get("TLAKE_CONTROL_TABLE") or None
    engine = "spark" if (table and is_table_name(table)) or session_has_delta(spark) else "delta-rs"
    ct = ControlTable(control_uri, options or None, engine=engine, table=table, spark=spark)
    rows = ct.spark_rows
    if rows is None:
        df = spark.createDataFrame(ct.to_arrow())
    elif rows.exists():
        df = rows.dataframe()
    else:
        df = spark.createDataFrame(CONTROL_SCHEMA.empty_table())
    F = functions_for(spark)  # noqa: N806
    # Within one txn_seq: lifecycle position (`RECORD_TYPE_RANK`, as ControlTable.records), then
    # recorded_at; transactions themselves are ordered by txn_seq alone.
    ranks = F.create_map(*[F.lit(x) for kv in RECORD_TYPE_RANK.items() for x in kv])
    rank = F.coalesce(ranks[F.col("record_type")], F.lit(9))
    keys = [F.col("txn_seq"), rank, F.col("recorded_at")]
    return df.orderBy(*[k.desc() if newest_first else k.asc() for k in keys])
