"""`tlake control redact`: remove credentials from control-table rows written before
redaction existed, physically.

Rewriting a Delta row is not enough: the old data file stays for time travel, and the Delta
log keeps per-file statistics whose min/max values quote the first row's text. So the
command, in order:

1. rewrites the rows whose ``arguments``, ``error_message``, ``command`` or ``changes``
   change under :mod:`trinitylake.redact`, with one delta-rs MERGE (concurrent appends are
   safe: a conflicting commit is retried);
2. vacuums with retention 0, deleting the data files the MERGE replaced (and any other file
   removed earlier, e.g. by compaction);
3. writes a checkpoint and deletes the log entries (commit files and older checkpoints)
   before it, so no statistic of an old file remains.

Consequence for time travel of the control table: versions before the redaction can no
longer be read (their files and log entries are gone); the rows themselves all remain.
A reader running a query on an old snapshot while this runs may fail and must retry.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trinitylake.control.table import read_delta_rows
from trinitylake.errors import ControlTableError
from trinitylake.json_data import JsonObject
from trinitylake.redact import redact_text, redact_value
from trinitylake.storage import retry

if TYPE_CHECKING:
    from trinitylake.control.table import ControlTable

_KEY = ("txn_seq", "record_type", "txn_id", "recorded_at")
_REWRITTEN = ("command", "arguments", "error_message", "changes")
_LOG_FILE = re.compile(r"^_delta_log/(\d{20})\.(json|checkpoint\.parquet|checkpoint\.\d+\.\d+\.parquet|crc)$")
_ATTEMPTS = 8


@dataclass
class RedactResult:
    """What `redact_control_table` found and did."""

    rows_scanned: int = 0
    rows_redacted: int = 0
    files_vacuumed: int = 0
    log_files_deleted: int = 0
    table_version: int | None = None
    dry_run: bool = False
    seconds: float = 0.0

    def to_dict(self) -> JsonObject:
        return asdict(self)


def _redact_arguments(text: object) -> Any:
    if not isinstance(text, str) or not text:
        return text
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return redact_text(text)
    # Same serialisation as records_to_arrow, so a row without secrets compares equal.
    return json.dumps(redact_value(parsed), sort_keys=True, default=str)


def redacted_rows(tbl: pa.Table) -> pa.Table:
    """The rows of `tbl` that hold a credential, with the redacted values (key columns plus
    the rewritten ones)."""
    cols: dict[str, list[Any]] = {
        name: tbl.column(name).to_pylist() if name in tbl.column_names else [None] * tbl.num_rows for name in _REWRITTEN
    }
    keep: list[int] = []
    new: dict[str, list[Any]] = {name: [] for name in _REWRITTEN}
    for i in range(tbl.num_rows):
        row = {
            "command": redact_text(cols["command"][i]),
            "arguments": _redact_arguments(cols["arguments"][i]),
            "error_message": redact_text(cols["error_message"][i]),
            "changes": None if cols["changes"][i] is None else [redact_text(c) for c in cols["changes"][i]],
        }
        if any(row[name] != cols[name][i] for name in _REWRITTEN):
            keep.append(i)
            for name in _REWRITTEN:
                new[name].append(row[name])
    out = tbl.select([c for c in _KEY if c in tbl.column_names]).take(pa.array(keep, pa.int64()))
    for name in _REWRITTEN:
        if name in tbl.column_names:
            out = out.append_column(tbl.schema.field(name), pa.array(new[name], tbl.schema.field(name).type))
    return out


def redact_control_table(control: ControlTable, *, dry_run: bool = False) -> RedactResult:
    """Rewrite the rows of `control` that hold credentials and delete every older copy of
    them (data files and Delta log); see the module docstring.

    Raises:
        ControlTableError: the table cannot be read or rewritten (nothing was deleted when
            the rewrite itself failed).
    """
    from deltalake.exceptions import CommitFailedError, DeltaError


    t0 = time.perf_counter()
    res = RedactResult(dry_run=dry_run)
    if not control.exists():
        raise ControlTableError(f"no control table at {control.uri}")
    def rewrite_once(_n: int) -> None:
        dt = control.delta_table()
        tbl = read_delta_rows(dt)
        res.rows_scanned = tbl.num_rows
        source = redacted_rows(tbl)
        res.rows_redacted = source.num_rows
        if dry_run or source.num_rows == 0:
            return
        missing = [c for c in _KEY if c not in source.column_names]
        if missing:
            raise ControlTableError(f"control table {control.uri} lacks key column(s) {', '.join(missing)}")
        pred = " AND ".join(
            f"(t.{c} = s.{c} OR (t.{c} IS NULL AND s.{c} IS NULL))" if c == "recorded_at" else f"t.{c} = s.{c}"
            for c in _KEY)
        updates = {c: f"s.{c}" for c in _REWRITTEN if c in source.column_names}
        try:
            dt.merge(source, pred, source_alias="s", target_alias="t").when_matched_update(updates).execute()
        except CommitFailedError:
            raise  # a concurrent append won the commit: read the table again and retry
        except DeltaError as e:
            raise ControlTableError(f"cannot rewrite control table {control.uri}: {str(e).splitlines()[0]}") from e

    def failed(e: BaseException, _attempts: int) -> BaseException:
        if isinstance(e, CommitFailedError):
            return ControlTableError(f"cannot rewrite control table {control.uri}: {e}")
        return e

    retry.call(rewrite_once, fail=failed, retry_on=lambda e: isinstance(e, CommitFailedError), attempts=_ATTEMPTS)
    if not dry_run and res.rows_redacted:
        dt = control.delta_table()
        # Retention 0 is what makes the clear text physically gone; it also ends time travel
        # to the versions before the rewrite (documented in the README).
        res.files_vacuumed = len(dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False))
        dt = control.delta_table()
        dt.create_checkpoint()
        res.table_version = dt.version()
        res.log_files_deleted = _delete_log_before(control, res.table_version)
    else:
        res.table_version = control.delta_table().version()
    res.seconds = time.perf_counter() - t0
    return res


def _delete_log_before(control: ControlTable, checkpoint_version: int) -> int:
    """Delete the commit files and checkpoints older than `checkpoint_version` (Delta's own
    log cleanup, without its retention period): their `add` actions carry statistics that
    quote the old rows. Readers start from the new checkpoint."""
    doomed = []
    for fi in control.storage.list("_delta_log/"):
        m = _LOG_FILE.match(fi.path)
        if m and int(m.group(1)) < checkpoint_version:
            doomed.append(fi.path)
    failures = control.storage.delete(doomed)
    if failures:
        path, why = failures[0]
        raise ControlTableError(f"control table {control.uri}: could not delete old log file {path} ({why}); "
                                f"{len(failures)} left, run `tlake control redact` again")
    return len(doomed)

