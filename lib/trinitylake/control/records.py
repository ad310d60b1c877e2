"""Rows of the control (audit) table and their Arrow schema.

One transaction or job run owns one ``txn_seq`` and writes one or more rows: a short CLI
transaction usually writes a single ``committed``/``failed``/``read`` row that carries both
``started_at`` and ``ended_at``; a long-running job writes ``begin`` first and
``completed``/``failed`` at the end. ``recovered`` rows are written by
:func:`trinitylake.control.reconcile` for versions whose writer died before recording them.
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import socket
import uuid
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from trinitylake.errors import ValidationError
from trinitylake.json_data import JsonObject
from trinitylake.redact import redact_text, redact_value

RECORD_TYPES = ("begin", "committed", "failed", "completed", "read", "recovered")

#: What a run did, as `show`, its JSON and the report name it (see :func:`run_state`).
RUN_STATES = ("committed", "deleted", "dry_run", "read", "failed", "recovered", "running")

# Order of rows within one txn_seq: lifecycle position first, then recorded_at. A
# `recovered` row ranks below `committed`: when reconcile() ran while the writer was between
# its tree commit and its audit append, the writer's own row must still be the final state.
RECORD_TYPE_RANK = {"begin": 0, "read": 1, "recovered": 1, "committed": 2, "failed": 2, "completed": 3}

_TS = pa.timestamp("us", tz="UTC")

SCHEMA = pa.schema(
    [
        pa.field("txn_seq", pa.int64(), nullable=False),
        pa.field("record_type", pa.string(), nullable=False),
        pa.field("txn_id", pa.string(), nullable=False),
        pa.field("command", pa.string(), nullable=False),
        pa.field("arguments", pa.string()),  # JSON object
        pa.field("user", pa.string()),
        pa.field("host", pa.string()),
        pa.field("spark_app_id", pa.string()),
        pa.field("started_at", _TS),
        pa.field("ended_at", _TS),
        pa.field("version_before", pa.int64()),
        pa.field("version_after", pa.int64()),
        pa.field("based_on_seq", pa.int64()),
        pa.field("based_on_version", pa.int64()),
        pa.field("parent_seq", pa.int64()),
        pa.field("metrics", pa.map_(pa.string(), pa.float64())),
        pa.field("changes", pa.list_(pa.string())),
        pa.field("error_class", pa.string()),
        pa.field("error_message", pa.string()),
        pa.field("isolation", pa.string()),
        pa.field("attempts", pa.int64()),
        pa.field("recorded_at", _TS),  # when the row was appended (display only, never for ordering txns)
    ]
)

# Columns added after the first release of the control table, with the release that added
# them. A table lacking one of these is still valid: `ControlTable.append` adds the column
# with Delta schema evolution (schema_mode="merge"). Every other column of SCHEMA is
# required. Add new columns at the END of SCHEMA and list them here.
ADDED_COLUMNS: dict[str, str] = {}


@dataclass
class AuditRecord:
    """One row of the control table."""

    txn_seq: int
    record_type: str  # one of RECORD_TYPES
    txn_id: str
    command: str  # CLI command or job name, e.g. "table create", "expire"
    arguments: dict[str, Any] = field(default_factory=dict)  # stored as a JSON string
    user: str | None = None
    host: str | None = None
    spark_app_id: str | None = None
    started_at: datetime | None = None  # UTC
    ended_at: datetime | None = None  # UTC
    version_before: int | None = None
    version_after: int | None = None
    based_on_seq: int | None = None
    based_on_version: int | None = None
    parent_seq: int | None = None  # a job run's seq when this txn was made by a job
    metrics: dict[str, float] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)
    error_class: str | None = None
    error_message: str | None = None
    isolation: str | None = None
    attempts: int | None = None
    recorded_at: datetime | None = None  # set by ControlTable.append when None

    def validate(self) -> None:
        if self.record_type not in RECORD_TYPES:
            raise ValidationError(f"audit record txn_seq={self.txn_seq}: unknown record_type {self.record_type!r}")
        if not isinstance(self.txn_seq, int) or self.txn_seq < 0:
            raise ValidationError(f"audit record: txn_seq must be a non-negative int, got {self.txn_seq!r}")
        if self.txn_id is None or self.command is None:
            raise ValidationError(f"audit record txn_seq={self.txn_seq}: txn_id and command are required")


def new_txn_id() -> str:
    """A fresh transaction id (UUID4, hex with dashes)."""
    return str(uuid.uuid4())


def utcnow() -> datetime:
    return datetime.now(UTC)


_USER_VARS = ("LOGNAME", "USER", "LNAME", "USERNAME")  # where getpass.getuser looks first


def default_user() -> str | None:
    """This process's user (getpass's), looked up once per user environment: without those
    variables (a server started by a service manager) getuser reads /etc/passwd each time, and
    every audit row names its user (once a commit on a catalog server's path)."""
    return _user_of((os.getuid() if hasattr(os, "getuid") else None, *(os.environ.get(v) for v in _USER_VARS)))


@functools.lru_cache(maxsize=16)
def _user_of(_environment: tuple[object, ...]) -> str | None:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return os.environ.get("USER")


def default_host() -> str | None:
    try:
        return socket.gethostname()
    except OSError:
        return None


def _utc(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def records_to_arrow(records: list[AuditRecord], recorded_at: datetime | None = None) -> pa.Table:
    """Arrow table in SCHEMA. Naive datetimes are taken as UTC."""
    now = recorded_at or utcnow()
    cols: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for r in records:
        r.validate()
        cols["txn_seq"].append(r.txn_seq)
        cols["record_type"].append(r.record_type)
        cols["txn_id"].append(r.txn_id)
        # Redacted here, where every row is built, whoever built the record: the control table
        # is read widely (SQL, dashboards) and Delta keeps old files for time travel.
        cols["command"].append(redact_text(r.command))
        cols["arguments"].append(json.dumps(redact_value(r.arguments or {}), sort_keys=True, default=str))
        for name in ("user", "host", "spark_app_id", "error_class", "isolation"):
            cols[name].append(getattr(r, name))
        cols["error_message"].append(redact_text(r.error_message))
        for name in ("version_before", "version_after", "based_on_seq", "based_on_version", "parent_seq", "attempts"):
            v = getattr(r, name)
            cols[name].append(None if v is None else int(v))
        cols["started_at"].append(_utc(r.started_at))
        cols["ended_at"].append(_utc(r.ended_at))
        cols["recorded_at"].append(_utc(r.recorded_at) or now)
        cols["metrics"].append([(str(k), float(v)) for k, v in (r.metrics or {}).items()])
        cols["changes"].append([redact_text(str(c)) for c in (r.changes or [])])
    return pa.Table.from_pydict(cols, schema=SCHEMA)


_FIELD_ORDER = [f.name for f in fields(AuditRecord)]
_FIELD_NAMES = set(_FIELD_ORDER)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _column_values(tbl: pa.Table, name: str) -> list[Any]:
    """Python values of one column; timestamps converted fast (pyarrow's tz-aware
    `to_pylist` costs ~30 us per value)."""
    col = tbl.column(name)
    if pa.types.is_timestamp(col.type):
        micros = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64()).to_pylist()
        return [None if m is None else _EPOCH + timedelta(microseconds=m) for m in micros]
    return col.to_pylist()


def records_from_arrow(tbl: pa.Table) -> list[AuditRecord]:
    """AuditRecords from a control-table Arrow table (columns the dataclass lacks are ignored;
    columns the table lacks read as None / empty)."""
    n = tbl.num_rows
    cols = {name: (_column_values(tbl, name) if name in tbl.column_names else [None] * n) for name in _FIELD_ORDER}
    cols["arguments"] = [_parse_arguments(a) for a in cols["arguments"]]
    cols["metrics"] = [dict(m) if m else {} for m in cols["metrics"]]
    cols["changes"] = [list(c) if c else [] for c in cols["changes"]]
    return [AuditRecord(*vals) for vals in zip(*(cols[name] for name in _FIELD_ORDER), strict=True)]


def _parse_arguments(args: object) -> JsonObject:
    if isinstance(args, str):
        if not args:
            return {}
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError:
            return {"_raw": args}
        return parsed if isinstance(parsed, dict) else {"_value": parsed}
    return dict(args) if isinstance(args, dict) else {}


def record_from_row(row: JsonObject) -> AuditRecord:
    """An AuditRecord from one `to_pylist()` row; unknown (newer) columns are ignored."""
    kw = {k: v for k, v in row.items() if k in _FIELD_NAMES}
    kw["arguments"] = _parse_arguments(kw.get("arguments"))
    m = kw.get("metrics")
    kw["metrics"] = dict(m) if m else {}
    kw["changes"] = list(kw.get("changes") or [])
    for k in ("started_at", "ended_at", "recorded_at"):
        kw[k] = _utc(kw.get(k))
    return AuditRecord(**kw)


def run_state(record_type: str, metrics: dict[str, float] | None = None, arguments: JsonObject | None = None) -> str:
    """The operator's classification of a transaction or job run, from its final row.

    The row's `record_type` says only whether a version was produced (``completed``) or not
    (``read``), so a cleanup that deleted files read as ``read`` and a dry run looked like a
    real one. The job's final row also carries ``status_<status>`` and ``files_deleted``
    metrics, from which this derives (first match wins):

    * ``failed``, ``recovered``, ``running``: as recorded;
    * ``partial``: the run finished but skipped part of its work (status metric; the tables'
      jobs leaving a damaged table alone, the row's ``changes`` say which);
    * ``dry_run``: the run was a dry run (status metric, or ``dry_run`` in its arguments);
    * ``deleted``: the run removed files (``files_deleted`` or ``files_deleted_roots`` > 0),
      whether or not it also committed a version (an expire does both);
    * ``committed``: it produced a version (``committed``/``completed``);
    * ``read``: it changed nothing.
    """
    m = metrics or {}
    if record_type in ("failed", "recovered", "running", "begin"):
        return "running" if record_type == "begin" else record_type
    if m.get("status_partial"):
        return "partial"
    if m.get("status_dry_run") or (arguments or {}).get("dry_run") is True:
        return "dry_run"
    if (m.get("files_deleted") or 0) > 0 or (m.get("files_deleted_roots") or 0) > 0:
        return "deleted"
    if record_type in ("committed", "completed"):
        return "committed"
    return "read"
