"""Glue between lakehouse commits and the control table (the Delta audit log).

The rule: an audit row is written after the tree commit, and a failure to write it never
fails or hides the committed version (the root carries txn_id and txn_seq, so `tlake show`
and the next writer can reconcile it as ``recovered``). A control location that is not a
usable Delta table is detected *before* anything is written.
"""

from __future__ import annotations

import logging
import socket
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from trinitylake.control import AuditRecord, default_user
from trinitylake.redact import redact_text

if TYPE_CHECKING:
    from trinitylake.control import AuditRecord, ControlTable
    from trinitylake.lakehouse.ports import AuditedLakehouse

log = logging.getLogger(__name__)


class Auditor:
    def __init__(self, lakehouse: AuditedLakehouse, control_uri: str, enabled: bool = True):
        self.lakehouse = lakehouse
        self.control_uri = control_uri
        self.enabled = enabled
        self._control: ControlTable | None = None
        self._ensured = False
        self.spark_app_id: str | None = None
        self.parent_seq: int | None = None

    @property
    def control(self) -> ControlTable:
        if self._control is None:
            from trinitylake.control import ControlTable

            self._control = ControlTable(self.control_uri, self.lakehouse.storage.options or None)
        return self._control

    def use_control(self, control: ControlTable) -> None:
        """Write the rows to `control` (e.g. one through a given engine, table name or Spark
        session) instead of the control table at `control_uri` built on first use."""
        self._control = control

    def ensure(self) -> None:
        if self.enabled and not self._ensured:
            self.control.ensure()
            self._ensured = True

    def allocate_seq(self, txn_id: str, create: bool = False) -> int | None:
        """Next txn_seq, or None when auditing is off. Raises ControlTableError up front."""
        if not self.enabled:
            return None
        self.ensure()
        return self.control.seq.allocate(txn_id)

    def record(self, **fields: Any) -> AuditRecord:
        """An audit row of `fields`, with this process's user, host, Spark app and parent seq unless given."""

        fields.setdefault("user", default_user())
        fields.setdefault("host", socket.gethostname())
        fields.setdefault("spark_app_id", self.spark_app_id)
        fields.setdefault("parent_seq", self.parent_seq)
        return AuditRecord(**fields)

    def append(self, records: list, *, checkpoint: bool = True) -> bool:
        """Append `records` (see ControlTable.append for `checkpoint`); False when they could not
        be written (logged: never fail a committed version over its audit rows)."""
        if not self.enabled or not records:
            return False
        try:
            self.control.append(records, checkpoint=checkpoint)
            return True
        except Exception as e:  # noqa: BLE001 - never fail a committed version over its audit row
            log.warning("audit rows not written to %s (%s: %s); they will be reconciled", self.control_uri, type(e).__name__, e)
            return False

    AUDITED_PREFIX = "_audited"
    RECONCILE_AFTER_SECONDS = 60.0
    RECONCILE_MAX_BACK = 100

    def _mark_audited(self, version: int) -> None:
        try:
            self.control.storage.write(f"{self.AUDITED_PREFIX}/{version:020d}", b"1")
        except Exception as e:  # noqa: BLE001 - only an optimisation for the next writer
            log.debug("audited marker for version %s not written: %s", version, e)

    def audited(self, version: int, version_before: int | None) -> None:
        """What follows the append of `version`'s rows: its audited marker, then (when a version
        came before it) the reconciling of the versions just below it."""
        self._mark_audited(version)
        if version_before is not None:
            self.reconcile_before(version)

    def reconcile_before(self, version: int) -> int:
        """The next writer's duty: versions just below `version` whose writer died between
        the tree commit and its audit row get a ``recovered`` row (read from the tree).

        Cheap on the happy path: one exists() on the previous version's audited marker.
        Versions younger than a minute are left alone (their writer may still be writing).
        """
        if not self.enabled:
            return 0
        try:
            missing: list[int] = []
            v = version - 1
            while v >= 0 and len(missing) < self.RECONCILE_MAX_BACK:
                if self.control.storage.exists(f"{self.AUDITED_PREFIX}/{v:020d}"):
                    break
                try:
                    ref = self.lakehouse.load_root(v)
                except Exception:  # noqa: BLE001 - expired: nothing older to reconcile
                    break
                if (time.time() * 1000 - ref.created_at_millis) / 1000 >= self.RECONCILE_AFTER_SECONDS:
                    missing.append(v)
                v -= 1
            if not missing:
                return 0
            from trinitylake.control import reconcile

            n = reconcile(self.control, [self.lakehouse.version_info(m) for m in missing])
            for m in missing:
                self._mark_audited(m)
            return n
        except Exception as e:  # noqa: BLE001 - reconciliation must never fail a commit
            log.warning("could not reconcile versions below %s: %s", version, e)
            return 0

    def committed(
        self,
        seq: int | None,
        txn_id: str,
        command: str,
        arguments: dict,
        started: datetime,
        version_before: int | None,
        version_after: int,
        changes: list[str],
        *,
        isolation: str | None = None,
        attempts: int | None = None,
        metrics: dict[str, float] | None = None,
    ) -> None:
        if seq is None:
            return
        ok = self.append(
            [
                self.record(
                    txn_seq=seq,
                    record_type="committed",
                    txn_id=txn_id,
                    command=self.lakehouse.context.command if command == "api" else command,
                    arguments=arguments or dict(self.lakehouse.context.arguments),
                    started_at=started,
                    ended_at=datetime.now(UTC),
                    version_before=version_before,
                    version_after=version_after,
                    changes=changes,
                    isolation=isolation,
                    attempts=attempts,
                    metrics=metrics or {},
                )
            ]
        )
        if ok:
            self.audited(version_after, version_before)

    def failed(
        self,
        seq: int | None,
        txn_id: str,
        command: str,
        arguments: dict,
        started: datetime,
        version_before: int | None,
        error_class: str,
        error_message: str,
        *,
        isolation: str | None = None,
        attempts: int | None = None,
    ) -> None:
        if not self.enabled:
            return
        if seq is None:
            try:
                seq = self.control.seq.allocate(txn_id)
            except Exception as e:  # noqa: BLE001
                log.warning("could not allocate a txn_seq for a failed record: %s", e)
                return
        self.append(
            [
                self.record(
                    txn_seq=seq,
                    record_type="failed",
                    txn_id=txn_id,
                    command=self.lakehouse.context.command if command == "api" else command,
                    arguments=arguments or dict(self.lakehouse.context.arguments),
                    started_at=started,
                    ended_at=datetime.now(UTC),
                    version_before=version_before,
                    error_class=error_class,
                    # redacted before the cut: a cut could leave half a secret no rule recognises
                    error_message=redact_text(error_message)[:2000],
                    isolation=isolation,
                    attempts=attempts,
                )
            ]
        )


def job_begin(auditor: Auditor, job: str, run_id: str, arguments: dict, version: int | None) -> int | None:
    """Allocate the job run's txn_seq and write its `begin` row (long runs are visible while
    they run). Lakehouse commits the job makes get their own txn_seq, with `parent_seq` set to
    this one. Returns the seq (None when auditing is off)."""
    if not auditor.enabled:
        return None
    seq = auditor.allocate_seq(run_id)
    auditor.parent_seq = None
    auditor.append(
        [
            auditor.record(
                txn_seq=seq,
                record_type="begin",
                txn_id=run_id,
                command=job,
                arguments=arguments,
                started_at=datetime.now(UTC),
                version_before=version,
                based_on_version=version,
            )
        ]
    )
    auditor.parent_seq = seq
    return seq


def job_end(
    auditor: Auditor,
    seq: int | None,
    job: str,
    run_id: str,
    arguments: dict,
    started: datetime,
    *,
    status: str,
    metrics: dict[str, float],
    version_before: int | None,
    version_after: int | None,
    error: BaseException | None = None,
    notes: list[str] | None = None,
) -> None:
    """The run's final row: `completed` (it changed the lakehouse), `read` (it changed nothing:
    walks, dry runs, orphan cleanups: no version produced, `based_on_version` set) or `failed`.
    `notes` (one line each: what a ``partial`` run skipped) go to the row's ``changes``."""
    if seq is None:
        return
    auditor.parent_seq = None
    if error is not None:
        record_type = "failed"
    elif version_after is not None and version_after != version_before:
        record_type = "completed"
    else:
        record_type = "read"
    auditor.append(
        [
            auditor.record(
                txn_seq=seq,
                record_type=record_type,
                txn_id=run_id,
                command=job,
                arguments=arguments,
                started_at=started,
                ended_at=datetime.now(UTC),
                version_before=version_before,
                version_after=version_after if record_type == "completed" else None,
                based_on_version=version_before,
                metrics={**metrics, "status_" + status: 1.0},
                changes=list(notes or []),
                error_class=type(error).__name__ if error else None,
                error_message=redact_text(str(error))[:2000] if error else None,
            )
        ]
    )
