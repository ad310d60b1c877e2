"""Record versions whose writer died between the tree commit and its `committed` audit row."""

from __future__ import annotations

import time

from trinitylake.control.history import VersionInfo
from trinitylake.control.records import AuditRecord, default_host, default_user, new_txn_id, utcnow
from trinitylake.control.table import ControlTable

RECOVERED_PREFIX = "_recovered"
# A claim older than this whose row never appeared belongs to a reconciler that died.
CLAIM_STALE_SECONDS = 600.0

# txn_seq of recovered rows for versions whose root carries no txn_seq. Allocated numbers
# start at 1, so 0 never names a real transaction; build_history places these by version.
UNSEQUENCED_TXN_SEQ = 0


def _claim_path(version: int) -> str:
    return f"{RECOVERED_PREFIX}/{version:020d}"


def reconcile(control: ControlTable, versions: list[VersionInfo], *, grace_seconds: float = 0.0) -> int:
    """Append a ``recovered`` row for every version in `versions` lacking one, and return the count.

    A version lacks a row when no ``committed``, ``completed`` or ``recovered`` row names it
    in ``version_after``. The row carries the txn_seq its root holds (0 when it holds none),
    the command of that seq's ``begin`` row when there is one, and the tree's changes.

    Idempotent: a version gets at most one ``recovered`` row. Sequential calls see the
    earlier rows; concurrent reconcilers are serialized per version by exclusively creating
    ``_recovered/<version>`` in the control location before appending. A claim whose row has
    not appeared after CLAIM_STALE_SECONDS is taken to be from a crashed reconciler and the
    row is written anyway.

    A writer may still be between its tree commit and its own ``committed`` row when this
    runs; the extra ``recovered`` row is then harmless (build_history lets ``committed`` win
    within the seq). `grace_seconds` skips versions created less than that long ago, to
    avoid such rows altogether.
    """
    if not versions:
        return 0
    records = control.records()
    covered = {
        r.version_after
        for r in records
        if r.record_type in ("committed", "completed", "recovered") and r.version_after is not None
    }
    cutoff_millis = (time.time() - grace_seconds) * 1000.0
    missing = [
        v
        for v in sorted(versions, key=lambda x: x.version)
        # A root that cannot be read (created_at unknown) gets no recovered row: nothing about it is known.
        if v.version not in covered and v.created_at_millis is not None
        and (grace_seconds <= 0 or v.created_at_millis <= cutoff_millis)
    ]
    if not missing:
        return 0
    begins = {r.txn_seq: r for r in records if r.record_type == "begin"}
    known = sorted(v.version for v in versions)
    prev_of = {ver: (known[i - 1] if i > 0 else None) for i, ver in enumerate(known)}

    claim_id = new_txn_id()
    now = utcnow()
    rows: list[AuditRecord] = []
    for v in missing:
        if not _claim(control, v.version, claim_id):
            continue
        seq = v.txn_seq if v.txn_seq is not None else UNSEQUENCED_TXN_SEQ
        begin = begins.get(v.txn_seq) if v.txn_seq is not None else None
        rows.append(
            AuditRecord(
                txn_seq=seq,
                record_type="recovered",
                txn_id=v.txn_id or (begin.txn_id if begin else "") or "",
                command=begin.command if begin else ("rollback" if v.rollback_from is not None else "recovered"),
                arguments=dict(begin.arguments) if begin else {"recovered_by": claim_id},
                user=begin.user if begin else None,
                host=begin.host if begin else None,
                started_at=begin.started_at if begin else v.created_at,
                ended_at=v.created_at,
                version_before=prev_of.get(v.version),
                version_after=v.version,
                parent_seq=begin.parent_seq if begin else None,
                changes=list(v.changes),
                recorded_at=now,
            )
        )
    if rows:
        try:
            control.append(rows)
        except BaseException:
            control.storage.delete(_claim_path(r.version_after) for r in rows if r.version_after is not None)
            raise
    return len(rows)


def _claim(control: ControlTable, version: int, claim_id: str) -> bool:
    """Take the right to write the recovered row of `version`."""
    path = _claim_path(version)
    body = f"{claim_id} {default_user() or ''}@{default_host() or ''}".encode()
    try:
        control.storage.create_exclusive(path, body)
        return True
    except FileExistsError:
        pass
    try:
        age = time.time() - control.storage.info(path).mtime
    except FileNotFoundError:
        return False
    return age > CLAIM_STALE_SECONDS
