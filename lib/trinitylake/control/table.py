"""The control table: a Delta table of audit rows, plus txn_seq markers. delta-rs creates and
reads it; appends after a handle's first are written by `log_append.LogAppender`.

Layout under the control URI (e.g. ``<lakehouse>/_control``)::

    _delta_log/...            the Delta log (delta-rs; readable by Spark+Delta, Databricks)
    part-*.parquet            audit rows
    _seq/<20 digits>          txn_seq markers (SeqAllocator), ignored by Delta
    _recovered/<20 digits>    claims of reconcile() per version, ignored by Delta

The rows go through one of two engines (``control.engine``): delta-rs on a path (the default
outside Spark jobs), or Spark's Delta (`trinitylake.control.spark_engine`) on a path or a
catalog table name, where clusters keep their Delta tables. Both write the same schema; the
txn_seq markers are files under the control location whichever engine writes the rows.

Engines without Delta support (Spark with no Delta JARs) read the active files with
``spark.read.parquet(*DeltaTable(uri).file_uris())``; never read the directory itself, it
also holds files that compaction removed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Schema, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from trinitylake.control.delta_options import delta_storage_options, fs_options
from trinitylake.control.delta_schema import EXPECTED_TYPES, conform, norm_type, type_str
from trinitylake.control.log_append import DeltaChanged, LogAppender
from trinitylake.control.records import (
    ADDED_COLUMNS,
    RECORD_TYPE_RANK,
    SCHEMA,
    AuditRecord,
    records_from_arrow,
    records_to_arrow,
)
from trinitylake.control.seq import SeqAllocator
from trinitylake.control.spark_engine import ENGINES, SparkDeltaRows, is_table_name, session_has_delta
from trinitylake.errors import ControlTableError
from trinitylake.json_data import JsonObject
from trinitylake.storage import Storage, hadoop_location, local_path_of_url, parse_uri, retry

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from trinitylake.util import Session

# Our own directories inside the control location; a location holding only these is "empty".
_OWN_PREFIXES = ("_seq/", "_recovered/", "_audited/")
_APPEND_ATTEMPTS = 25
#: Commits between the checkpoints delta-rs writes after an append (see `ensure`).
CHECKPOINT_INTERVAL = 10
#: Appends through one kept DeltaTable before it is loaded afresh. delta-rs 1.6's kept table
#: replays every commit since its load at each write (an append cost 14 ms at first and 51 ms
#: 400 appends later, here); one loaded afresh starts from the latest checkpoint (11-16 ms).
RELOAD_AFTER_APPENDS = CHECKPOINT_INTERVAL
#: delta-rs's post-commit hooks off at each append: its checkpoint hook on a kept table cost
#: about 40 ms (4 ms an append on average, a third of the append), where `_checkpoint` writes
#: the same checkpoint from a table loaded afresh in a few ms.
_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
#: Checkpoints between two clean-ups of the log files older than the table's log retention.
CLEANUP_EVERY_CHECKPOINTS = 10
#: A long-lived writer's next checkpoint comes once the commits since its last reach this share
#: of the table's files (at least CHECKPOINT_INTERVAL). A checkpoint lists every file (and, after a
#: compaction, every removed one until its retention ends): one cost 34 ms at 1,000 files and 181
#: ms at 12,000, 18 ms of an append's 36 ms of CPU there at a fixed interval (one-row appends; a
#: catalog server makes hundreds of thousands a day until the expire job compacts). Spaced, its
#: share of an append stays about the same (4.4 ms at 12,000); a reader replays that many commits.
CHECKPOINT_FILES_SHARE = 0.01


class ControlTable:
    """The Delta audit table at `uri`, and the txn_seq allocator beside it.

    Args:
        uri: location of the Delta table, e.g. ``<lakehouse>/_control``.
        storage_options: options of the lakehouse `Storage` (s3fs style: ``endpoint_url``,
            ``key``, ``secret``, ...). Upper-case delta-rs keys (``AWS_*``) are accepted too
            and passed to delta-rs as they are.

        engine: ``auto`` (Spark's Delta when `spark` or the active session has Delta, or when
            `table` is a catalog name; else delta-rs), ``spark`` or ``delta-rs``. Default:
            ``TLAKE_CONTROL_ENGINE``, else ``auto``.
        table: where the rows live when not at `uri`: a catalog table name
            (``catalog.schema.table``, Spark engine only) or a path. Default:
            ``TLAKE_CONTROL_TABLE``. The txn_seq markers stay under `uri` either way.
        spark: a Spark session, or a callable returning one (called only when the Spark engine
            is chosen; a job passes its own session factory so that the JARs it has are used).

    Nothing is read or written on construction.
    """

    def __init__(self, uri: str, storage_options: JsonObject | None = None, *, engine: str | None = None,
                 table: str | None = None, spark: Session | Callable[[], Session] | None = None):
        engine = engine or os.environ.get("TLAKE_CONTROL_ENGINE") or "auto"
        if engine not in ENGINES:
            raise ControlTableError(f"control engine {engine!r} is not one of {', '.join(ENGINES)}")
        self.requested_engine = engine
        self.table_name: str | None = None
        table = table or os.environ.get("TLAKE_CONTROL_TABLE") or None
        if table and is_table_name(table):
            self.table_name = table
        if self.table_name and engine == "delta-rs":
            raise ControlTableError(
                f"control table {self.table_name!r} is a catalog name: it needs control engine 'spark' or 'auto'")
        self._spark = spark
        self._rows: SparkDeltaRows | None = None
        self._engine: str | None = None
        parsed = parse_uri(uri)
        self.uri: str = parsed.uri
        self.storage = Storage(self.uri, fs_options(dict(storage_options or {})))
        self.seq = SeqAllocator(self.storage)
        rows = parse_uri(table) if table and not self.table_name else parsed
        # Rows at a path of their own: that path, not the control location, must hold no stranger files.
        self._rows_storage = Storage(rows.uri, self.storage.options) if rows is not parsed else self.storage
        self.rows_uri: str = self.table_name or rows.uri
        self._delta_uri = rows.local_path or rows.uri
        self._delta_options = delta_storage_options(rows.scheme, self.storage.options)
        self._ensured = False
        # the table this handle last appended through: the next append brings it up to date
        # (reads the log since) instead of loading it again (a long-lived writer: the catalog server)
        self._appended: DeltaTable | None = None
        self._appended_uses = 0  # appends through `_appended` since it was loaded
        self._checkpoint_due: int | None = None  # a checkpoint version an append left to `write_due_checkpoint`
        # the version from which this handle's next checkpoint is due (None: every CHECKPOINT_INTERVAL-th)
        self._next_checkpoint: int | None = None
        self._checkpointed: int | None = None  # the version of the last checkpoint this handle wrote
        self._log: LogAppender | None = None  # this handle's appends after its first (see `append`)

    def __repr__(self) -> str:
        return f"ControlTable({self.uri!r})" if not self.table_name else f"ControlTable({self.table_name!r})"

    def __getstate__(self) -> JsonObject:
        state = dict(self.__dict__)
        state["_ensured"] = False
        state["_spark"] = None  # sessions stay on the driver
        state["_rows"] = None
        state["_appended"] = None
        state["_log"] = None
        return state

    # ---- engine choice ----------------------------------------------------------------
    @property
    def engine(self) -> str:
        """The engine the rows go through: ``spark`` or ``delta-rs`` (chosen on first use)."""
        if self._engine is None:
            self._engine = self._choose_engine()
        return self._engine

    def _choose_engine(self) -> str:
        if self.requested_engine != "auto":
            return self.requested_engine
        if self.table_name:
            return "spark"
        given = self._spark
        spark: Session | None = None if given is None or callable(given) and not hasattr(given, "sql") else given  # type: ignore[assignment]
        if spark is None:
            # Never start a session to decide: only one that is already running counts, and a
            # process that never imported pyspark has none (importing it to ask costs every
            # `tlake` command 0.3-0.7 s: pyspark, and pandas through it).
            if "pyspark.sql" not in sys.modules:
                return "delta-rs"
            try:
                from pyspark.sql import SparkSession
            except ImportError:
                return "delta-rs"
            spark = SparkSession.getActiveSession()
        return "spark" if spark is not None and session_has_delta(spark) else "delta-rs"

    @property
    def spark_rows(self) -> SparkDeltaRows | None:
        """The Spark side of the table when the Spark engine is in use, else None."""
        if self.engine != "spark":
            return None
        if self._rows is None:
            if self.table_name:
                self._rows = SparkDeltaRows(self._spark, name=self.table_name)
            else:
                self._rows = SparkDeltaRows(self._spark, path=hadoop_location(self._delta_uri))
        return self._rows

    def dataframe(self) -> DataFrame:
        """The rows as a Spark DataFrame (Spark engine), e.g. ``ct.dataframe().orderBy("txn_seq")``."""
        rows = self.spark_rows
        if rows is None:
            raise ControlTableError(f"control table {self.uri} is read with delta-rs here; use to_arrow() "
                                    "or give engine='spark' and a session with Delta")
        return rows.dataframe()

    def delta_history(self) -> DataFrame:
        """Delta's commit history of the table (``DESCRIBE HISTORY``) as a Spark DataFrame."""
        rows = self.spark_rows
        if rows is None:
            raise ControlTableError(f"control table {self.uri}: DESCRIBE HISTORY needs the Spark engine")
        return rows.history()

    # ---- delta plumbing ---------------------------------------------------------------
    def _try_load(self) -> DeltaTable | None:
        """The Delta table, or None when the location holds no Delta table.

        (Not `DeltaTable.is_deltatable`: in deltalake 1.6.6 it holds the GIL during its S3
        request, which deadlocks against an S3 server running in the same process, e.g.
        moto's ThreadedMotoServer in tests.)
        """
        try:
            return DeltaTable(self._delta_uri, storage_options=self._delta_options)
        except TableNotFoundError:
            return None
        except DeltaError as e:
            raise ControlTableError(f"cannot read control table {self.uri}: {_first_line(e)}") from e
        except OSError as e:  # e.g. unreachable endpoint, bad credentials
            raise ControlTableError(f"cannot read control table {self.uri}: {_first_line(e)}") from e

    def _kept(self) -> DeltaTable | None:
        """The table the last append went through, as that append left it (None: none kept,
        or due to be loaded afresh).

        Not brought up to date first: delta-rs's commit lists the log after the table's version
        anyway, and commits a blind append above any other writer's commits it finds there
        (a commit that changed the table's metadata fails it, and the retry loads the table
        afresh). On an object store the update cost 2 of an append's 8 round trips."""
        dt, self._appended = self._appended, None  # one appender at a time uses it
        if dt is None or self._appended_uses >= RELOAD_AFTER_APPENDS:
            return None
        return dt

    def _is_delta(self) -> bool:
        return self._try_load() is not None

    def _load(self) -> DeltaTable:
        dt = self._try_load()
        if dt is None:
            raise ControlTableError(f"no control table at {self.uri}")
        return dt

    def delta_table(self) -> DeltaTable:
        """The rows' Delta table through delta-rs, at its latest version (for maintenance of
        the table itself: redaction, vacuum, checkpoints). Raises ControlTableError when the
        location holds no table."""
        return self._load()

    def _foreign_files(self) -> list[str]:
        """Files in the location that are neither Delta's nor ours (first few)."""
        found = []
        for fi in self._rows_storage.list(""):
            if fi.path.startswith(_OWN_PREFIXES):
                continue
            found.append(fi.path)
            if len(found) >= 5:
                break
        return found

    def _check_schema(self, dt: DeltaTable | pa.Schema) -> None:
        schema = Schema.from_arrow(dt) if isinstance(dt, pa.Schema) else dt.schema()
        actual = {f["name"]: f["type"] for f in json.loads(schema.to_json())["fields"]}
        for name, expected in EXPECTED_TYPES.items():
            if name not in actual:
                if name in ADDED_COLUMNS:
                    continue  # appended with schema evolution
                raise ControlTableError(
                    f"control table {self.uri} is incompatible: column {name!r} is missing "
                    f"(expected {type_str(expected)}); move the table away or point the control "
                    "location elsewhere"
                )
            if norm_type(actual[name]) != expected:
                raise ControlTableError(
                    f"control table {self.uri} is incompatible: column {name!r} has type "
                    f"{type_str(actual[name])}, expected {type_str(expected)}"
                )

    # ---- public API -------------------------------------------------------------------
    def exists(self) -> bool:
        rows = self.spark_rows
        return rows.exists() if rows is not None else self._is_delta()

    def ensure(self) -> None:
        """Create the Delta table if missing, and check a present one.

        Raises:
            ControlTableError: the location holds files but no Delta table, or a Delta table
                lacking one of our columns or with an incompatible column type. Nothing is
                written in that case.
        """
        self._ensure()

    def _ensure(self) -> DeltaTable | None:
        """`ensure`; returns the delta-rs table it read to check, when it read one (a first
        append writes through it instead of reading the table's log a second time)."""
        if self._ensured:
            return None
        rows = self.spark_rows
        if rows is not None:
            self._ensure_spark(rows)
            self._ensured = True
            return None
        for attempt in range(5):
            try:
                dt = self._try_load()
            except ControlTableError as e:
                # A _delta_log we cannot parse: not ours to touch.
                raise ControlTableError(f"control location {self.rows_uri} is not a readable Delta table: {e}") from e
            if dt is not None:
                self._check_schema(dt)
                self._ensured = True
                return dt
            foreign = self._foreign_files()
            if not foreign:
                break
            if attempt < 4 and all(f.startswith("_delta_log/") for f in foreign):
                # Another process may be creating the table right now: look again.
                time.sleep(0.1 * (attempt + 1))
                continue
            raise ControlTableError(
                f"control location {self.rows_uri} is not a Delta table but holds files "
                f"(e.g. {', '.join(foreign)}); refusing to create the control table there"
            )
        try:
            DeltaTable.create(
                self._delta_uri,
                Schema.from_arrow(SCHEMA),
                mode="error",
                name="trinitylake_control",
                description="TrinityLake control table: one row per transaction event, keyed by txn_seq",
                # Spark's Delta default; delta-rs's is 100. Every command and job run opens the
                # table and reads each commit file since the last checkpoint (delta-rs 1.6 GETs
                # each twice): up to about 200 requests on an object store instead of about 20.
                configuration={"delta.checkpointInterval": str(CHECKPOINT_INTERVAL)},
                storage_options=self._delta_options,
                # Without this, a creator that loses the race for version 0 retries its
                # CREATE TABLE as version 1 (new table id, metadata replaced).
                commit_properties=CommitProperties(max_commit_retries=0),
            )
        except Exception as e:  # noqa: BLE001 - a concurrent creator may have won
            dt = self._try_load()
            if dt is None:
                raise ControlTableError(f"cannot create control table {self.uri}: {_first_line(e)}") from e
            self._check_schema(dt)
        self._ensured = True
        return None

    def _ensure_spark(self, rows: SparkDeltaRows) -> None:
        if not rows.exists():
            if rows.path is not None:
                foreign = self._foreign_files()
                if foreign and not all(f.startswith("_delta_log/") for f in foreign):
                    raise ControlTableError(
                        f"control location {self.rows_uri} is not a Delta table but holds files "
                        f"(e.g. {', '.join(foreign)}); refusing to create the control table there")
            rows.create(SCHEMA, "TrinityLake control table: one row per transaction event, keyed by txn_seq")
        self._check_schema(_arrow_schema_of(rows))

    def append(self, records: list[AuditRecord], *, checkpoint: bool = True) -> None:
        """Append `records` in one Delta commit (created on first use).

        Concurrent appenders are safe: blind appends never conflict, and delta-rs retries a
        lost commit race; this method retries further with jittered backoff. After the first,
        a plain table's appends are written by `LogAppender` (2 round trips instead of delta-rs's 6).

        The append that makes a checkpoint version writes the checkpoint, unless `checkpoint`
        is false: then it is left to `write_due_checkpoint` (a server writes it after answering
        the writers whose rows these are; on an object store a checkpoint costs a few hundred ms).
        """
        if not records:
            return
        data = records_to_arrow(list(records))
        checked = self._ensure()
        rows = self.spark_rows
        if rows is not None:
            # Spark's Delta retries a lost race of blind appends itself.
            rows.append(data)
            return
        if checked is not None:
            self._log = LogAppender.of(self._rows_storage, checked)
        version = self._log_append(data)
        if version is None:
            version = self._delta_rs_append(data, checked)
        due = (version % CHECKPOINT_INTERVAL == 0 if self._next_checkpoint is None
               else version >= self._next_checkpoint)
        if due:
            if checkpoint:
                self._checkpoint(version)
            else:
                self._checkpoint_due = version

    def _log_append(self, data: pa.Table) -> int | None:
        """`data` appended by the `LogAppender` (None: delta-rs is to append it)."""
        appender = self._log
        if appender is None or any(name not in appender.schema.names for name in SCHEMA.names):
            return None
        try:
            version = appender.append(conform(data, appender.schema))
        except DeltaChanged as e:
            log.info("control table %s: appending through delta-rs (%s)", self.uri, e)
            self._log = None
            return None
        self._appended = None  # behind by now: a later delta-rs append loads the table afresh
        return version

    def _delta_rs_append(self, data: pa.Table, checked: DeltaTable | None) -> int:
        def append_once(n: int) -> None:
            # The first attempt writes through the table `_ensure` has just read, when it read
            # one here, or the one the previous append went through; a retry reads it again.
            kept = self._kept() if n == 1 and checked is None else None
            dt = checked if n == 1 and checked is not None else kept or self._load()
            table_schema = pa.schema(dt.schema().to_arrow())
            try:
                if any(name not in table_schema.names for name in SCHEMA.names):
                    # Our schema has columns the table lacks (added in a later release): evolve.
                    write_deltalake(dt, data, mode="append", schema_mode="merge", post_commithook_properties=_NO_HOOKS)
                else:
                    write_deltalake(dt, conform(data, table_schema), mode="append", post_commithook_properties=_NO_HOOKS)
                self._appended, self._appended_uses = dt, (self._appended_uses + 1 if kept is not None else 1)
            except CommitFailedError:
                raise  # a concurrent append won the commit: read the table again and retry
            except DeltaError as e:
                raise ControlTableError(f"cannot append to control table {self.uri}: {_first_line(e)}") from e

        def failed(e: BaseException, attempts: int) -> BaseException:
            if not isinstance(e, CommitFailedError):
                return e
            return ControlTableError(f"cannot append to control table {self.uri} after {attempts} attempts: "
                                     f"{_first_line(e)}")

        retry.call(append_once, fail=failed, retry_on=lambda e: isinstance(e, CommitFailedError),
                   attempts=_APPEND_ATTEMPTS)
        appended = self._appended
        assert appended is not None  # set by the attempt that succeeded
        self._log = LogAppender.of(self._rows_storage, appended)
        return appended.version()

    def write_due_checkpoint(self) -> None:
        """The checkpoint an append with ``checkpoint=False`` left due, if any (best effort)."""
        version, self._checkpoint_due = self._checkpoint_due, None
        if version is not None:
            self._checkpoint(version)

    def _checkpoint(self, version: int) -> None:
        """The checkpoint of `version` (the append that made it writes it, as delta-rs's hook
        would), and, when it passes a multiple of CHECKPOINT_INTERVAL * CLEANUP_EVERY_CHECKPOINTS
        versions, the clean-up of expired log files. This handle's next checkpoint is then due
        `CHECKPOINT_FILES_SHARE` of the table's files later (at least CHECKPOINT_INTERVAL).
        Best effort: a reader without it replays more commit files, nothing else."""
        since = version - 1 if self._checkpointed is None else self._checkpointed
        self._checkpointed, self._next_checkpoint = version, version + CHECKPOINT_INTERVAL  # also when this one fails
        try:
            dt = DeltaTable(self._delta_uri, storage_options=self._delta_options, version=version)
            dt.create_checkpoint()
            cleanup_every = CHECKPOINT_INTERVAL * CLEANUP_EVERY_CHECKPOINTS
            if version // cleanup_every > since // cleanup_every:
                dt.cleanup_metadata()
            files = dt.get_add_actions(flatten=False).num_rows
            self._next_checkpoint = version + max(CHECKPOINT_INTERVAL, int(files * CHECKPOINT_FILES_SHARE))
        except Exception as e:  # noqa: BLE001 - the rows are appended; only readers' speed is at stake
            log.warning("checkpoint of control table %s at version %s not written: %s", self.uri, version,
                        _first_line(e))

    def to_arrow(self, since_seq: int | None = None) -> pa.Table:
        """All rows (or those with ``txn_seq >= since_seq``), sorted by (txn_seq, record order).

        An absent table reads as empty; a location holding other files raises ControlTableError.
        """
        rows = self.spark_rows
        if rows is not None:
            if not rows.exists():
                return SCHEMA.empty_table()
            return _sorted(conform(rows.to_arrow(since_seq), SCHEMA))
        dt = self._try_load()
        if dt is None:
            foreign = self._foreign_files()
            if foreign:
                raise ControlTableError(
                    f"control location {self.rows_uri} is not a Delta table but holds files (e.g. {', '.join(foreign)})"
                )
            return SCHEMA.empty_table()
        return _sorted(read_delta_rows(dt, since_seq))

    def records(self, since_seq: int | None = None) -> list[AuditRecord]:
        """All rows as AuditRecords (or those with ``txn_seq >= since_seq``), sorted by
        (txn_seq, lifecycle position of record_type, recorded_at, file order)."""
        return records_from_arrow(self.to_arrow(since_seq))

    def compact(self, *, retention_hours: float = 168.0, prune_seq_keep: int | None = 1000) -> dict[str, float]:
        """Compact small files, write a checkpoint, clean up old log files and vacuum.

        Vacuum deletes only files removed longer than `retention_hours` ago (Delta's default
        7 days), so concurrent readers of older snapshots keep working. When `prune_seq_keep`
        is not None, txn_seq markers older than the newest `prune_seq_keep` are deleted.

        Returns:
            Numeric metrics: files added/removed by compaction, the table version after it,
            vacuumed files, pruned seq markers and seconds per phase.
        """
        self.ensure()
        m: dict[str, float] = {}
        t0 = time.perf_counter()
        rows = self.spark_rows
        if rows is not None:
            m.update(rows.compact(retention_hours))
            if prune_seq_keep is not None:
                m["seq_markers_pruned"] = float(self.seq.prune(prune_seq_keep))
            m["seconds_total"] = time.perf_counter() - t0
            return m
        dt = self._load()
        res = dt.optimize.compact()
        m["files_added"] = float(res.get("numFilesAdded", 0))
        m["files_removed"] = float(res.get("numFilesRemoved", 0))
        t1 = time.perf_counter()
        m["seconds_compact"] = t1 - t0
        dt = self._load()
        dt.create_checkpoint()
        dt.cleanup_metadata()
        m["version"] = float(dt.version())
        t2 = time.perf_counter()
        m["seconds_checkpoint"] = t2 - t1
        vacuumed = dt.vacuum(
            retention_hours=int(retention_hours),
            dry_run=False,
            enforce_retention_duration=retention_hours >= 168,
        )
        m["files_vacuumed"] = float(len(vacuumed))
        t3 = time.perf_counter()
        m["seconds_vacuum"] = t3 - t2
        if prune_seq_keep is not None:
            m["seq_markers_pruned"] = float(self.seq.prune(prune_seq_keep))
        m["seconds_total"] = time.perf_counter() - t0
        return m


def _arrow_schema_of(rows: SparkDeltaRows) -> pa.Schema:
    """Arrow schema of a Spark-read table with our timestamps' zone (Spark's carry none)."""
    fields = []
    for f in rows.arrow_schema():
        t = pa.timestamp("us", tz="UTC") if pa.types.is_timestamp(f.type) else f.type
        fields.append(pa.field(f.name, t, f.nullable))
    return pa.schema(fields)


# delta-rs quotes Rust's io::Error as `Os { code: 20, kind: NotADirectory, message: "Not a
# directory" }`; an operator needs the message (with the path delta-rs printed before it).
_RUST_OS_ERROR = re.compile(r'\s*(?:Error:\s*)?Os \{ code: \d+, kind: \w+, message: "([^"]*)" \}')


def _first_line(e: BaseException) -> str:
    """delta-rs errors carry multi-line backtraces and Rust debug forms; keep the message."""
    lines = []
    for ln in _RUST_OS_ERROR.sub(lambda m: f": {m.group(1)}", str(e)).replace(":: ", ": ").splitlines():
        ln = ln.strip().lstrip("\u21b3").strip()
        if re.match(r"^\d+: ", ln):  # start of a Rust backtrace
            break
        if ln:
            lines.append(ln)
    return " ".join(lines[:4]) if lines else type(e).__name__


def read_delta_rows(dt: DeltaTable, since_seq: int | None = None) -> pa.Table:
    """The table's rows (those with ``txn_seq >= since_seq``), read through delta-rs's dataset.

    A local table is scanned through Arrow's own local filesystem. delta-rs's default is a
    Python filesystem, and Arrow's threads release its objects (fragments, read buffers) after
    the scan; one released while the interpreter exits aborts the process ("terminate called
    without an active exception": about one `tlake report` in 40 here, and keeping the dataset
    referenced only moved the release to the read buffers). Remote tables keep delta-rs's
    filesystem: delta-rs's QueryBuilder avoids it, but its ranged GETs hang on the moto server.
    """
    local = local_path_of_url(dt.table_uri)
    fs = None
    if local is not None:
        fs = pafs.SubTreeFileSystem(local, pafs.LocalFileSystem())
    ds = dt.to_pyarrow_dataset(filesystem=fs)
    return ds.to_table(filter=(pc.field("txn_seq") >= since_seq) if since_seq is not None else None)


def _sorted(tbl: pa.Table) -> pa.Table:
    if tbl.num_rows == 0:
        return tbl
    types = tbl.column("record_type").to_pylist()
    rank = pa.array([RECORD_TYPE_RANK.get(t, 9) for t in types], pa.int8())
    keys = tbl.select(["txn_seq"]).append_column("_rank", rank)
    sort_keys = [("txn_seq", "ascending"), ("_rank", "ascending")]
    if "recorded_at" in tbl.column_names:
        keys = keys.append_column("recorded_at", tbl.column("recorded_at"))
        sort_keys.append(("recorded_at", "ascending"))
    keys = keys.append_column("_row", pa.array(range(tbl.num_rows), pa.int64()))
    sort_keys.append(("_row", "ascending"))
    return tbl.take(pc.sort_indices(keys, sort_keys=sort_keys))
