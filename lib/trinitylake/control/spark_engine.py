"""The control table's rows through Spark's Delta (delta-spark, or the cluster's own Delta).

Used where clusters keep Delta tables: a path read and written by Spark's Delta, or a catalog
table name (``catalog.schema.table``, Unity Catalog, a Hive metastore, a local
``spark_catalog`` with Delta's catalog) that must not be written around the catalog.

Only the rows go through Spark. The ``txn_seq`` markers stay files beside the lakehouse
(`SeqAllocator` under the control location), so sequencing is the same exclusive-create
mechanism whichever engine appends the rows, and a table written by one engine is read and
appended by the other (the schema is the same: `trinitylake.control.records.SCHEMA`).

Concurrent appends are blind appends, which Delta's optimistic concurrency never rejects
against each other; Spark's Delta retries a lost commit race itself.

This module imports pyspark only inside functions: the control package stays importable
without it.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from trinitylake.errors import ControlTableError
from trinitylake.json_data import JsonObject
from trinitylake.util import is_connect_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from trinitylake.util import Session

log = logging.getLogger(__name__)

ENGINES = ("auto", "spark", "delta-rs")

# A catalog table name: one to three dot-separated identifiers, each plain or back-quoted.
_IDENT = r"(?:[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)"
_NAME_RE = re.compile(rf"^{_IDENT}(?:\.{_IDENT}){{0,2}}$")


def is_table_name(value: str) -> bool:
    """True for ``catalog.schema.table``-style names; False for paths and URIs."""
    return "/" not in value and ":" not in value and bool(_NAME_RE.match(value))


def session_has_delta(spark: Session) -> bool:
    """Whether `spark` can read and write Delta through Spark: a Databricks runtime (which
    always has Delta), Delta's SQL extension or catalog in the session's conf, or, for a
    Spark Connect session whose server hides or refuses those static confs, a Delta statement
    the server parses (`_delta_sql_probe`)."""

    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return True
    try:
        ext = spark.conf.get("spark.sql.extensions", "") or ""
        cat = spark.conf.get("spark.sql.catalog.spark_catalog", "") or ""
        if "DeltaSparkSessionExtension" in ext or "DeltaCatalog" in cat:
            return True
    except Exception:  # noqa: BLE001 - a Connect server may refuse to show a static conf
        pass
    # A classic session's conf is the whole truth; a Connect server's may not be shown to its
    # clients (Databricks serverless, a shared cluster), so ask the server itself.
    return is_connect_session(spark) and _delta_sql_probe(spark)


#: A Delta-only statement on a path that never exists: parsed only by a server with Delta's SQL
#: extension, then refused for the missing table, without reading or writing anything.
DELTA_PROBE_SQL = "DESCRIBE HISTORY delta.`/__tlake_delta_probe__/none`"
# Answers of a server with Delta to DELTA_PROBE_SQL (error classes and message fragments).
_DELTA_ANSWERS = ("DELTA_", "is not a Delta table", "PATH_NOT_FOUND", "DeltaAnalysisException")
# Answers of a server without it: the statement does not parse, or `delta` is no data source.
_NO_DELTA_ANSWERS = ("PARSE_SYNTAX_ERROR", "ParseException", "DATA_SOURCE_NOT_FOUND")


# The probe's answer per Connect session: a job asks several times (control table, actions),
# and each probe is a failed statement on the server.
_probe_answers: dict[str, bool] = {}


class _ThisThreadOnly(logging.Filter):
    """Drops the records of one thread: pyspark logs every failed statement with its query
    context at ERROR (``SQLQueryContextLogger``, with the server's stack: ~10 KB a record),
    and the probe fails on purpose."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread


def _delta_sql_probe(spark: Session) -> bool:
    """Whether the server behind `spark` parses Delta's SQL (`DELTA_PROBE_SQL`): a Delta error
    about the missing table means yes; a parse error, or anything else, means no (delta-rs then
    writes the rows, which always works). Asked once per session; the failed statement is
    logged at DEBUG here, not at ERROR by pyspark."""
    key = str(getattr(spark, "session_id", "") or id(spark))
    if key in _probe_answers:
        return _probe_answers[key]
    quiet = _ThisThreadOnly()
    loggers = [logging.getLogger(n) for n in ("SQLQueryContextLogger", "DataFrameQueryContextLogger")]
    for lg in loggers:
        lg.addFilter(quiet)
    try:
        spark.sql(DELTA_PROBE_SQL).collect()
        answer = True  # a server that describes even a missing path has Delta
    except Exception as e:  # noqa: BLE001 - the answer is in the error
        text = f"{type(e).__name__}: {e}"
        answer = not any(k in text for k in _NO_DELTA_ANSWERS) and any(k in text for k in _DELTA_ANSWERS)
        log.debug("Delta probe of the Connect server: %s -> %s", text.splitlines()[0][:300], answer)
    finally:
        for lg in loggers:
            lg.removeFilter(quiet)
    _probe_answers[key] = answer
    return answer


def _sql_type(t: pa.DataType) -> str:
    """Spark SQL type of one of the control schema's Arrow types."""
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_int32(t):
        return "INT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "STRING"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"  # instants in UTC, as delta-rs's timestamp with time zone
    if pa.types.is_map(t):
        return f"MAP<{_sql_type(t.key_type)}, {_sql_type(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"ARRAY<{_sql_type(t.value_type)}>"
    raise ControlTableError(f"control schema type {t} has no Spark SQL equivalent here")


def ddl(schema: pa.Schema) -> str:
    """Column list of CREATE TABLE for `schema` (NOT NULL where the Arrow field is)."""
    cols = []
    for f in schema:
        cols.append(f"`{f.name}` {_sql_type(f.type)}{'' if f.nullable else ' NOT NULL'}")
    return ", ".join(cols)


class SparkDeltaRows:
    """Rows of a Delta table read and written through a Spark session.

    Args:
        spark: the session, or a callable returning it (called on first use, so that a job
            whose rows go elsewhere never starts Spark).
        path: the table's location (``delta.`path```), or
        name: its catalog name; exactly one of the two.
    """

    def __init__(self, spark: Session | Callable[[], Session] | None, *, path: str | None = None, name: str | None = None):
        if (path is None) == (name is None):
            raise ValueError("give exactly one of path and name")
        self._spark = spark
        self.path = path
        self.name = name

    def __repr__(self) -> str:
        return f"SparkDeltaRows({self.name or self.path!r})"

    def __getstate__(self) -> JsonObject:
        # A session never travels to executors; they re-resolve it if ever asked.
        state = dict(self.__dict__)
        if not callable(state["_spark"]):  # a session object (a factory may travel)
            state["_spark"] = None
        return state

    @property
    def spark(self) -> Session:
        s = self._spark
        if s is None:
            from pyspark.sql import SparkSession

            s = SparkSession.getActiveSession()
            if s is None:
                raise ControlTableError(f"control table {self.ref}: the Spark engine needs a Spark session with Delta")
        elif callable(s) and not hasattr(s, "sql"):
            s = s()
        self._spark = s
        return s  # type: ignore[return-value]  # a factory was called just above

    @property
    def ref(self) -> str:
        """How Spark SQL names the table."""
        if self.name is not None:
            return self.name
        return "delta.`" + str(self.path).replace("`", "``") + "`"

    # ---- reading ----------------------------------------------------------------------
    def exists(self) -> bool:
        if self.name is not None:
            return bool(self.spark.catalog.tableExists(self.name))
        try:
            self.spark.sql(f"DESCRIBE DETAIL {self.ref}").collect()
            return True
        except Exception as e:  # noqa: BLE001 - AnalysisException: not a Delta table (yet)
            if _is_missing(e):
                return False
            raise ControlTableError(f"cannot read control table {self.ref}: {_first_line(e)}") from e

    def dataframe(self) -> DataFrame:
        """The rows as a Spark DataFrame (unsorted; order by ``txn_seq`` to read the history)."""
        if self.name is not None:
            return self.spark.read.table(self.name)
        return self.spark.read.format("delta").load(self.path)

    def history(self) -> DataFrame:
        """Delta's own commit history of the table (``DESCRIBE HISTORY``) as a DataFrame."""
        return self.spark.sql(f"DESCRIBE HISTORY {self.ref}")

    def arrow_schema(self) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.dataframe().schema, timezone="UTC")

    def to_arrow(self, since_seq: int | None = None) -> pa.Table:
        df = self.dataframe()
        if since_seq is not None:
            df = df.where(df["txn_seq"] >= int(since_seq))
        try:
            return df.toArrow()
        except Exception as e:  # noqa: BLE001
            raise ControlTableError(f"cannot read control table {self.ref}: {_first_line(e)}") from e

    # ---- writing ----------------------------------------------------------------------
    def create(self, schema: pa.Schema, comment: str) -> None:
        """CREATE TABLE IF NOT EXISTS with `schema` (a concurrent creator's table is kept)."""
        try:
            if self.name is not None:
                self.spark.sql(f"CREATE TABLE IF NOT EXISTS {self.name} ({ddl(schema)}) USING DELTA COMMENT '{comment}'")
            else:
                # Not CREATE TABLE delta.`path`: Spark calls a non-empty directory (ours holds
                # _seq/) an existing table and refuses. An empty append creates version 0.
                (self.spark.createDataFrame(schema.empty_table()).write.format("delta").mode("append")
                 .option("userMetadata", comment).save(self.path))
        except Exception as e:  # noqa: BLE001 - a concurrent creator may have won
            if self.exists():
                return
            raise ControlTableError(f"cannot create control table {self.ref}: {_first_line(e)}") from e

    def append(self, data: pa.Table) -> None:
        """One Delta commit appending `data`; columns the table lacks are added (mergeSchema)."""
        try:
            df = self.spark.createDataFrame(data)
            w = df.write.format("delta").mode("append").option("mergeSchema", "true")
            if self.name is not None:
                w.saveAsTable(self.name)
            else:
                w.save(self.path)
        except Exception as e:  # noqa: BLE001
            raise ControlTableError(f"cannot append to control table {self.ref}: {_first_line(e)}") from e

    def compact(self, retention_hours: float) -> dict[str, float]:
        """OPTIMIZE then VACUUM (files removed longer than `retention_hours` ago)."""
        m: dict[str, float] = {}
        row = self.spark.sql(f"OPTIMIZE {self.ref}").collect()
        if row and "metrics" in row[0].asDict():
            met = row[0]["metrics"]
            m["files_added"] = float(getattr(met, "numFilesAdded", 0) or 0)
            m["files_removed"] = float(getattr(met, "numFilesRemoved", 0) or 0)
        if retention_hours < 168:
            # Delta refuses a short retention unless its safety check is off for this session.
            self.spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        self.spark.sql(f"VACUUM {self.ref} RETAIN {int(retention_hours)} HOURS").collect()
        m["version"] = float(self.history().agg({"version": "max"}).collect()[0][0])
        return m


def _is_missing(e: BaseException) -> bool:
    text = str(e)
    return any(k in text for k in ("DELTA_MISSING_DELTA_TABLE", "is not a Delta table", "PATH_NOT_FOUND",
                                   "DELTA_TABLE_NOT_FOUND", "TABLE_OR_VIEW_NOT_FOUND", "doesn't exist"))


def _first_line(e: BaseException) -> str:
    for ln in str(e).splitlines():
        if ln.strip():
            return ln.strip()[:500]
    return type(e).__name__
