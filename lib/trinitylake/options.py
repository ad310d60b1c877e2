"""The option table of the maintenance jobs: every option of every job declared once, with
its type, default, help text and validation (`Option`). `trinitylake.config` loads and merges
values for them (YAML, environment, flags); `trinitylake.job_flags` derives the command-line
flags from them; `conf/<job>.yaml` documents them (a test checks that every option is there)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from trinitylake.values import NULL_WORDS, PARSERS, parse_duration, parse_text

ENV_PREFIX = "TLAKE"


# ---- the option table ---------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One configuration key: how it is typed, defaulted, validated, documented and spelled.

    Attributes:
        name: the key in YAML and in :class:`JobConfig` (snake_case).
        kind: ``uri``, ``text``, ``id``, ``export_name``, ``int``, ``bool``, ``duration``
            (-> ms), ``timestamp`` (-> epoch ms), ``versions``, ``storage_options``,
            ``spark_conf`` or ``choice``.
        default: the default, spelled as a user would write it (parsed like any other value).
        help: one line for ``--help`` and the docs.
        nullable: null is a legal value (it means "derive it", see the help).
        required: the merged value must not be null.
        minimum, maximum: inclusive bounds of an ``int``.
        choices: legal values of a ``choice`` (compared case-insensitively).
        flag: the command-line flag, when it is not ``--<name-with-dashes>``.
    """

    name: str
    kind: str
    default: Any
    help: str
    nullable: bool = False
    required: bool = False
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    flag: str | None = None

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def is_map(self) -> bool:
        return self.kind in ("storage_options", "spark_conf")

    def parse(self, value: object, *, bare_ms: bool = False) -> Any:
        """Validate and normalize one value; raises ValueError with the reason.

        The strings ``null``/``none``/``~`` mean null for a nullable option (so that a flag or
        an environment variable can reset one). A duration needs a unit (``90s``, ``36h``); with
        `bare_ms` (values a Python caller passes, not text a user wrote) an int is milliseconds.
        """
        if isinstance(value, str) and value.strip().lower() in NULL_WORDS and (self.nullable or self.required):
            return None
        if value is None:
            if self.nullable or self.required:
                return None
            raise ValueError("must not be null")
        if self.kind == "choice":
            text = parse_text(value) if isinstance(value, str) else str(value)
            for choice in self.choices:
                if text.lower() == choice.lower():
                    return choice
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {value!r}")
        if self.kind == "duration":
            return parse_duration(value, bare_ms=bare_ms)
        parsed = PARSERS[self.kind](value)
        if self.kind == "int":
            if self.minimum is not None and parsed < self.minimum:
                raise ValueError(f"must be >= {self.minimum}, got {parsed}")
            if self.maximum is not None and parsed > self.maximum:
                raise ValueError(f"must be <= {self.maximum}, got {parsed}")
        return parsed


def _opt(name: str, kind: str, default: object, help: str, **kw: Any) -> Option:
    return Option(name=name, kind=kind, default=default, help=help, **kw)


_DELETE_BATCH: dict[str, Any] = {"minimum": 1, "maximum": 1000}

# fmt: off
#: Options every job has.
COMMON_OPTIONS: tuple[Option, ...] = (
    _opt("lakehouse", "uri", None, "URI of the lakehouse (required): s3://bucket/path, file:///path or a local path.",
         required=True),
    _opt("master", "text", "local[*]",
         "Spark master for a local run; ignored when spark-submit or Databricks already set spark.master."),
    _opt("control_uri", "uri", None, "URI of the control (audit) table; null means <lakehouse>/_control.",
         nullable=True),
    _opt("storage_options", "storage_options", {},
         "fsspec options for the lakehouse storage (e.g. endpoint_url, key, secret); merged across layers.",
         flag="--storage-option"),
    _opt("spark_conf", "spark_conf", {}, "Extra Spark properties for the session; merged across layers.",
         flag="--spark-conf"),
    _opt("remote", "text", None,
         "Spark Connect server to run on (sc://host:port); null means SPARK_REMOTE when set, else a classic session "
         "on master (spark_conf spark.api.mode=connect starts a local Connect server instead).", nullable=True),
    _opt("execution", "choice", "auto",
         "Where phases run: 'auto' puts each phase on the driver (threads, no Spark job) or on the executors by its "
         "size, 'local' keeps every phase on the driver, 'distributed' sends every phase to the executors.",
         choices=("auto", "local", "distributed")),
    _opt("local_max_items", "int", 200_000,
         "auto: a phase with at most this many items (node files of a walk level, listed files, candidates, files "
         "to copy) runs on the driver; bigger ones on the executors (crossover measured in BENCHMARKS.md).",
         minimum=0),
    _opt("driver_max_rows", "int", 1_200_000,
         "auto: most rows a driver phase may hold (walk output, listing, candidates); a walk growing past it hands "
         "its remaining levels to the executors. Bounds the driver's memory.", minimum=1),
    _opt("threads", "int", 16, "Threads of a driver phase, and concurrent I/O requests inside one executor task.",
         minimum=1, maximum=256),
    _opt("local_threads", "int", 1,
         "`threads` for a lakehouse on local files (file://): their system calls are short, and more threads only "
         "contend for the interpreter lock (16 made an orphans listing and walk 2x slower than 1). Deletes keep "
         "`threads` (an unlink waits on the filesystem). Raise it for a network filesystem mounted as a local path "
         "(NFS, FUSE).", minimum=1, maximum=256),
    _opt("reference_time", "timestamp", None,
         "The instant the job treats as now (ISO-8601 or epoch ms); every age cutoff is measured back from it. "
         "Null means the wall clock; Airflow passes the logical date so that re-runs are idempotent.",
         nullable=True),
    _opt("run_id", "id", None, "Identifier of this run in the control table and output paths; null generates one.",
         nullable=True),
    _opt("control_engine", "choice", "auto",
         "Engine writing the control table's rows: 'spark' (Spark's Delta, in the job's session), 'delta-rs', or "
         "'auto' (Spark when the job's session has Delta or control_table is a catalog name, else delta-rs).",
         choices=("auto", "spark", "delta-rs")),
    _opt("control_table", "text", None,
         "The control table's rows as a catalog table (catalog.schema.table, e.g. Unity Catalog) or a path; null "
         "means the control URI. The txn_seq markers stay under the control URI.", nullable=True),
    _opt("log_level", "choice", "INFO", "Python log level.", choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
    _opt("keep_runs", "int", 20,
         "_maintenance/<job>/<run_id> folders of this job kept whatever their age (the newest N runs); older "
         "ones go once past keep_runs_max_age. The running run, unfinished runs and the last failed run always stay.",
         minimum=0),
    _opt("keep_runs_max_age", "duration", "30d",
         "Age past which a run's _maintenance folder is pruned, beyond the newest keep_runs (dry runs prune "
         "nothing)."),
)

_JOB_SPECIFIC: dict[str, tuple[Option, ...]] = {
    "walk": (
        _opt("versions", "versions", "retained",
             "Versions whose reachable files to list: 'retained' (every version still readable) or a list such as "
             "1,2,3."),
        _opt("output", "uri", None,
             "Where to write the reachable-file listing; null means <lakehouse>/_maintenance/walk/<run_id>.",
             nullable=True),
        _opt("batch_size", "int", 256, "Node paths handled per Spark task (bigger batches, less task overhead).",
             minimum=1),
        _opt("parallelism", "int", 0, "Number of Spark partitions for the walk; 0 means Spark's default.", minimum=0),
    ),
    "expire": (
        _opt("max_version_age", "duration", None,
             "Versions older than this may expire; null means the lakehouse definition's value, else 7d.",
             nullable=True),
        _opt("min_versions_to_keep", "int", None,
             "Always keep at least this many latest versions; null means the lakehouse definition's value, else 3.",
             nullable=True, minimum=1),
        _opt("clock_skew_margin", "duration", "10m",
             "Extra age a version needs beyond the transaction TTL before it may expire (clock skew between writers)."),
        _opt("dry_run", "bool", False, "Plan and report only: commit nothing, delete nothing."),
        _opt("delete_batch_size", "int", 1000, "Keys per bulk delete request (S3 allows at most 1000).",
             **_DELETE_BATCH),
        _opt("max_retries", "int", 5, "Retries of a failed delete batch (with backoff) before the run fails.",
             minimum=0),
        _opt("compact_control_table", "bool", True, "Compact (optimize) the control table after the run."),
    ),
    "orphans": (
        _opt("older_than", "duration", None,
             "Only files older than this are orphan candidates; null means the lakehouse transaction TTL, which is "
             "also the floor.", nullable=True),
        _opt("unsafe_min_age", "bool", False,
             "Allow older_than below the transaction TTL floor (can delete files of in-flight commits)."),
        _opt("dry_run", "bool", False, "List the orphan candidates only; delete nothing."),
        _opt("max_candidates", "int", None,
             "Fail (deleting nothing, dry run or not) when more candidates than this are found; null: no limit.",
             nullable=True, minimum=0),
        _opt("delete_batch_size", "int", 1000, "Keys per bulk delete request (S3 allows at most 1000).",
             **_DELETE_BATCH),
        _opt("max_retries", "int", 5, "Retries of a failed delete batch (with backoff) before the run fails.",
             minimum=0),
        _opt("prefix_mismatch", "choice", "error",
             "What to do when a listed file and a referenced file differ only by scheme or authority: 'error' stops "
             "the run, 'ignore' keeps such files.", choices=("error", "ignore")),
    ),
    "export": (
        _opt("name", "export_name", None,
             "Name under which the export is recorded in the lakehouse definition (required; not all digits).",
             required=True),
        _opt("target", "uri", None, "Root URI the snapshot is copied to (required; outside the lakehouse).",
             required=True),
        _opt("target_storage_options", "storage_options", {},
             "fsspec options for the target's storage (e.g. endpoint_url, key, secret): another endpoint or "
             "account. When any is given, or a TLAKE_TARGET_* variable is set, the target uses only these (and "
             "those variables), never storage_options; when none is, a target of the lakehouse's scheme shares "
             "storage_options. Merged across layers.", flag="--target-storage-option"),
        _opt("version", "int", None, "Version to export; null means the latest (or the one current at as_of).",
             nullable=True, minimum=0),
        _opt("as_of", "timestamp", None, "Export the version current at this instant instead of a version number.",
             nullable=True),
        _opt("mode", "choice", "full",
             "'full' copies every reachable file, 'partial' copies node levels down to depth, 'minimal' only the "
             "root node.", choices=("full", "partial", "minimal")),
        _opt("depth", "int", 1, "Node levels below the root to copy in partial mode (ignored otherwise).", minimum=0),
        _opt("batch_size", "int", 1024, "Files per plan part: the unit of a copy task, of its result manifest "
             "and of a resume; node files read per Spark task while planning.", minimum=1),
        _opt("verify_checksum", "bool", True, "Compare the size and checksum of every copied file."),
        _opt("with_tables", "bool", False,
             "Also copy the Iceberg tables whose metadata lives under the lakehouse's root (metadata, manifest "
             "lists, manifests, data and delete files), rewriting their paths to the target; full exports only."),
        _opt("table_snapshots", "choice", "all",
             "With with_tables: 'all' copies every retained snapshot of each table, 'current' only the current one.",
             choices=("all", "current")),
        _opt("if_exists", "choice", "fail",
             "When the lakehouse already records a finished export of this name at this target holding another "
             "version: 'fail' refuses, 'keep' counts it as done (nothing is copied or overwritten; the result names "
             "the version it holds). For scheduled exports named by day, e.g. a manual re-run on export day.",
             choices=("fail", "keep")),
    ),
    "tables_expire": (
        _opt("older_than", "duration", None,
             "Snapshots older than this may expire; null means each table's history.expire.max-snapshot-age-ms "
             "(Iceberg's default 5d); below the lakehouse's transaction TTL it needs unsafe_min_age.", nullable=True),
        _opt("unsafe_min_age", "bool", False,
             "Allow older_than below the lakehouse's transaction TTL (snapshots of in-flight transactions may "
             "expire)."),
        _opt("retain_last", "int", None,
             "Keep at least this many snapshots of each branch; null means each table's "
             "history.expire.min-snapshots-to-keep (Iceberg's default 1).", nullable=True, minimum=1),
        _opt("tables", "text", None,
             "Comma-separated namespaces or NS.TABLE names to maintain; null means every Iceberg table of the latest "
             "version.", nullable=True),
        _opt("batch_size", "int", 100, "Tables committed per lakehouse version (one transaction a batch).",
             minimum=1),
        _opt("dry_run", "bool", False, "Plan and report only: commit nothing, delete nothing."),
        _opt("delete_batch_size", "int", 1000, "Keys per bulk delete request (S3 allows at most 1000).",
             **_DELETE_BATCH),
    ),
    "tables_orphans": (
        _opt("older_than", "duration", "3d",
             "Only files under a table's location modified longer ago than this are orphan candidates; 3d (Iceberg's "
             "default) is also the floor."),
        _opt("unsafe_min_age", "bool", False,
             "Allow older_than below the 3-day floor (can delete files of in-flight table commits)."),
        _opt("tables", "text", None,
             "Comma-separated namespaces or NS.TABLE names whose locations to clean; null means every Iceberg table "
             "of the latest version.", nullable=True),
        _opt("dry_run", "bool", False, "List the orphan candidates only; delete nothing."),
        _opt("prefix_mismatch", "choice", "error",
             "A listed file whose path a live file names through another scheme or authority: 'error' stops the "
             "run, 'ignore' keeps such files, 'delete' deletes them (Iceberg's prefix_mismatch_mode).",
             choices=("error", "ignore", "delete")),
        _opt("equal_schemes", "text", None,
             "Extra scheme equivalences as from=to pairs, comma-separated (s3a and s3n are s3 always).",
             nullable=True),
        _opt("equal_authorities", "text", None,
             "Authority (bucket, namenode) equivalences as from=to pairs, comma-separated.", nullable=True),
        _opt("delete_batch_size", "int", 1000, "Keys per bulk delete request (S3 allows at most 1000).",
             **_DELETE_BATCH),
    ),
}
# fmt: on

#: Every option of every job, in display order: ``JOB_OPTIONS[job][key] -> Option``.
JOB_OPTIONS: Mapping[str, Mapping[str, Option]] = MappingProxyType(
    {job: MappingProxyType({o.name: o for o in (*COMMON_OPTIONS, *extra)}) for job, extra in _JOB_SPECIFIC.items()}
)


def env_var_names(job: str, key: str) -> tuple[str, ...]:
    """Environment variables that set ``key`` of ``job``, strongest first.

    Example:
        >>> env_var_names("orphans", "dry_run"), env_var_names("walk", "lakehouse")
        (('TLAKE_ORPHANS_DRY_RUN',), ('TLAKE_WALK_LAKEHOUSE', 'TLAKE_LAKEHOUSE'))
    """
    names = [f"{ENV_PREFIX}_{job.upper()}_{key.upper()}"]
    if any(o.name == key for o in COMMON_OPTIONS):
        names.append(f"{ENV_PREFIX}_{key.upper()}")
    return tuple(names)


