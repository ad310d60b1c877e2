"""`tlake show`: one history entry per transaction, built from audit rows and tree versions.

Pure functions, no IO. The two inputs are joined only through explicit keys, never through
timestamps:

* audit rows are grouped by ``txn_seq``;
* a version is tied to a transaction by the ``txn_seq`` its root carries
  (``VersionInfo.txn_seq``), or by a ``committed``/``completed``/``recovered`` row whose
  ``version_after`` is that version.

Ordering is newest first by ``txn_seq``, strictly. Versions whose root carries no txn_seq
(written by another implementation, or before the control table existed) are *unsequenced*:
their entry has ``txn_seq=None`` and is placed by version order, immediately newer than the
transaction that produced the nearest lower sequenced version (at the very bottom when there
is none), and among themselves by version number. Concretely, entries sort descending by
``(anchor_seq, is_unsequenced, version)`` where a sequenced entry's key is ``(seq, 0, 0)``.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from trinitylake.control.records import RECORD_TYPE_RANK, AuditRecord, run_state
from trinitylake.json_data import JsonObject
from trinitylake.redact import redact_text, redact_value

_FINAL_TYPES = ("committed", "failed", "completed", "read", "recovered")
_VERSION_TYPES = ("committed", "completed", "recovered")


@dataclass
class VersionInfo:
    """What the tree says about one existing version (given by the lakehouse layer)."""

    version: int
    txn_seq: int | None
    txn_id: str | None
    created_at_millis: int | None  # None only for a corrupt root
    rollback_from: int | None = None
    changes: list[str] = field(default_factory=list)
    rollback_to: int | None = None
    corrupt: str | None = None  # "<ErrorClass>: <message>" when the root could not be read

    @property
    def created_at(self) -> datetime | None:
        if self.created_at_millis is None:
            return None
        return datetime.fromtimestamp(self.created_at_millis / 1000.0, tz=UTC)


@dataclass
class HistoryEntry:
    """One line of `tlake show`."""

    txn_seq: int | None  # None only for unsequenced versions (see module docstring)
    record_type: str  # final state: committed/failed/completed/read/recovered/running
    command: str
    txn_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    version: int | None = None  # version produced, if any
    version_before: int | None = None
    changes: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    user: str | None = None
    host: str | None = None
    parent_seq: int | None = None
    rollback_from: int | None = None
    isolation: str | None = None
    attempts: int | None = None
    rollback_to: int | None = None
    corrupt: str | None = None  # its version's root could not be read (see VersionInfo.corrupt)
    commit_seqs: list[int] = field(default_factory=list)  # a job run's own commits, folded into its entry

    @property
    def label(self) -> str:
        """What the operator reads in the command column: the command, naming the export an
        ``export``/``export drop`` run is about."""
        name = self.arguments.get("name") if isinstance(self.arguments, dict) else None
        if isinstance(name, str) and name and self.command in ("export", "export drop"):
            return f"{self.command} {name}"
        return self.command

    @property
    def state(self) -> str:
        """committed / deleted / dry_run / read / failed / recovered / running (see
        :func:`trinitylake.control.records.run_state`)."""
        rtype = self.record_type
        if rtype == "completed" and self.version is None and not self.changes:
            rtype = "read"
        return run_state(rtype, self.metrics, self.arguments)

    @property
    def read_only(self) -> bool:
        """A run that changed nothing: a walk, a dry run (a run that deleted files is not)."""
        return self.state in ("read", "dry_run")

    def to_dict(self) -> JsonObject:
        """JSON-safe dict (datetimes as ISO 8601 UTC strings)."""

        def ts(v: datetime | None) -> str | None:
            return None if v is None else v.astimezone(UTC).isoformat()

        return {
            "txn_seq": self.txn_seq,
            "record_type": self.record_type,
            "state": self.state,
            "command": self.command,
            "label": self.label,
            "txn_id": self.txn_id,
            "started_at": ts(self.started_at),
            "ended_at": ts(self.ended_at),
            "version": self.version,
            "version_before": self.version_before,
            "changes": list(self.changes),
            "metrics": {k: _metric_value(k, v) for k, v in self.metrics.items()},
            "error": self.error,
            "arguments": _json_safe(self.arguments),
            "user": self.user,
            "host": self.host,
            "parent_seq": self.parent_seq,
            "rollback_from": self.rollback_from,
            "rollback_to": self.rollback_to,
            "isolation": self.isolation,
            "attempts": self.attempts,
            "corrupt": self.corrupt,
            "commit_seqs": list(self.commit_seqs),
        }


def _metric_value(key: str, value: float) -> int | float:
    """Counts and byte sizes as integers (the control table stores every metric as a double);
    durations stay floats."""
    v = float(value)
    return int(v) if v.is_integer() and not key.startswith("seconds_") else v


def _json_safe(v: object) -> Any:
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, datetime):
        return v.isoformat()
    return str(v)


def _utc(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _merge_group(seq: int | None, rows: list[AuditRecord]) -> HistoryEntry:
    """One entry from the rows of one transaction, in record order (final state wins)."""
    e = HistoryEntry(txn_seq=seq, record_type="running", command="")
    rows = sorted(rows, key=lambda r: RECORD_TYPE_RANK.get(r.record_type, 9))  # stable
    final = [r for r in rows if r.record_type in _FINAL_TYPES]
    if final:
        e.record_type = final[-1].record_type
    for r in rows:
        if r.command and (not e.command or e.command == "recovered"):
            e.command = r.command
        e.txn_id = e.txn_id or r.txn_id or None
        if e.started_at is None:
            e.started_at = _utc(r.started_at)
        if r.ended_at is not None:
            e.ended_at = _utc(r.ended_at)
        if r.version_after is not None and r.record_type in _VERSION_TYPES:
            e.version = r.version_after
        if e.version_before is None and r.version_before is not None:
            e.version_before = r.version_before
        for c in r.changes:
            if c not in e.changes:
                e.changes.append(c)
        e.metrics.update(r.metrics)
        if r.arguments and not e.arguments:
            # Rows written before redaction existed may hold credentials: never show them.
            e.arguments = redact_value(dict(r.arguments))
        e.user = e.user or r.user
        e.host = e.host or r.host
        if e.parent_seq is None:
            e.parent_seq = r.parent_seq
        e.isolation = r.isolation or e.isolation
        if r.attempts is not None:
            e.attempts = r.attempts
        if r.record_type == "failed" and (r.error_class or r.error_message):
            e.error = redact_text(": ".join(x for x in (r.error_class, r.error_message) if x))
    if e.record_type != "failed":
        e.error = None  # a later success supersedes an earlier failed attempt
    if not e.command:
        e.command = "recovered" if e.record_type == "recovered" else ""
    return e


def _fill_from_version(e: HistoryEntry, v: VersionInfo, below: int | None = None) -> None:
    """Complete entry `e` with what the tree says about its version `v` (the tree diff wins).

    `below` is the next lower existing version, the version_before of a recovered entry.
    """
    e.version = v.version
    if e.version_before is None and below is not None and e.record_type == "recovered":
        e.version_before = below
    if v.changes:
        e.changes = list(v.changes)
    e.rollback_from = v.rollback_from
    if v.rollback_to is not None:
        e.rollback_to = v.rollback_to
    elif v.rollback_from is not None and e.rollback_to is None:
        to = e.arguments.get("to") if isinstance(e.arguments, dict) else None
        e.rollback_to = to if isinstance(to, int) and not isinstance(to, bool) else None
    e.corrupt = v.corrupt
    e.txn_id = e.txn_id or v.txn_id
    if e.started_at is None:
        e.started_at = v.created_at
    if e.ended_at is None:
        e.ended_at = v.created_at
    if not e.command or e.command == "recovered":
        e.command = "rollback" if v.rollback_from is not None else "recovered"


def _change_target(change: str) -> tuple[str, str, str | None] | None:
    """(kind, namespace, table or None) of a change string "<action> <kind> <ns>[.<table>]"."""
    parts = change.split()
    if len(parts) < 3:
        return None
    kind, name = parts[1], parts[2]
    ns, _, tbl = name.partition(".")
    return kind, ns, (tbl or None)


def _matches_object(changes: list[str], namespace: str | None, table: str | None) -> bool:
    want_ns = namespace
    want_tbl = table
    if table and "." in table:
        tns, _, want_tbl = table.partition(".")
        if want_ns is not None and want_ns != tns:
            return False
        want_ns = tns
    for c in changes:
        t = _change_target(c)
        if t is None:
            continue
        _kind, ns, tbl = t
        if want_ns is not None and ns != want_ns:
            continue
        if want_tbl is not None and tbl != want_tbl:
            continue
        return True
    return False


def _matches_job(command: str, job: str) -> bool:
    return command == job or command.startswith(job + " ")


def _fold_job_commits(ordered: list[HistoryEntry]) -> list[HistoryEntry]:
    """A job run and the commit it made for the same version (an export recording itself,
    an expiration raising the floor) as ONE entry: the run's, listing the commit's txn_seq in
    ``commit_seqs`` and taking its changes. Commits of a run that made several versions, or
    whose run has no version, stay entries of their own."""
    by_seq = {e.txn_seq: e for e in ordered if e.txn_seq is not None}
    out = []
    for e in ordered:
        run = by_seq.get(e.parent_seq) if e.parent_seq is not None else None
        if (run is not None and run is not e and e.txn_seq is not None and e.version is not None
                and run.version == e.version and e.record_type in ("committed", "recovered")):
            run.commit_seqs.append(e.txn_seq)
            if not run.changes:
                run.changes = list(e.changes)
            run.corrupt = run.corrupt or e.corrupt
            continue
        out.append(e)
    return out


def build_history(
    records: list[AuditRecord],
    versions: list[VersionInfo],
    *,
    include_reads: bool = False,
    since: datetime | None = None,
    namespace: str | None = None,
    table: str | None = None,
    job: str | None = None,
    limit: int | None = None,
) -> list[HistoryEntry]:
    """History entries, newest first.

    * Rows are grouped by txn_seq; the last row in record order (lifecycle rank
      begin < read, recovered < committed, failed < completed, then the given order) that
      is not ``begin`` gives the final state (only ``begin`` rows: ``running``).
    * Every version without a ``committed``/``completed``/``recovered`` row naming it gets an
      entry in state ``recovered`` at the txn_seq its root carries (merged with that seq's
      rows, e.g. the ``begin`` of a writer that died after committing); unsequenced versions
      are placed as described in the module docstring.
    * A version's changes come from ``VersionInfo.changes`` (the tree diff) when non-empty.
    * A job run's commit of the run's own version is folded into the run's entry (its
      txn_seq listed in ``commit_seqs``): one entry per export, not two with one version.
    * Read-only runs (state ``read`` or ``dry_run``, see `HistoryEntry.state`) are hidden
      unless `include_reads` or a `job` filter is given (a job's history lists every run of
      it); a job run that is the parent of other entries is not read-only.
    * Filters: `namespace`/`table` (``"ns.table"`` or a bare table name) match the changes
      strings ``"<action> <kind> <ns>[.<table>]"``; `job` matches the command exactly or as
      its first words, and also selects transactions whose ``parent_seq`` is a matching run;
      `since` keeps entries started (or, for versions, created) at or after it, dropping
      entries with no time at all; `limit` truncates after filtering.
    """
    by_version = {v.version: v for v in versions}
    unsequenced = {v.version for v in versions if v.txn_seq is None}

    groups: dict[int, list[AuditRecord]] = {}
    diverted: dict[int, list[AuditRecord]] = {}  # recovered rows (txn_seq 0) of unsequenced versions
    for r in records:
        if r.record_type == "recovered" and r.version_after in unsequenced:
            diverted.setdefault(r.version_after, []).append(r)
        else:
            groups.setdefault(r.txn_seq, []).append(r)

    entries: dict[int, HistoryEntry] = {seq: _merge_group(seq, rows) for seq, rows in groups.items()}
    # Versions named by a committed/completed/recovered row are covered by that row's entry.
    entry_of_version: dict[int, HistoryEntry] = {}
    for seq, rows in groups.items():
        for r in rows:
            if r.record_type in _VERSION_TYPES and r.version_after is not None:
                entry_of_version[r.version_after] = entries[seq]

    unseq_entries: list[tuple[int, HistoryEntry]] = []
    prev_version: int | None = None
    for v in sorted(versions, key=lambda x: x.version):
        below, prev_version = prev_version, v.version
        covered_by = entry_of_version.get(v.version)
        if covered_by is not None:
            _fill_from_version(covered_by, v)
            continue
        if v.txn_seq is None:
            unseq = _merge_group(None, diverted.get(v.version, []))
            unseq.record_type = "recovered"
            _fill_from_version(unseq, v, below)
            unseq_entries.append((v.version, unseq))
            continue
        e = entries.get(v.txn_seq)
        if e is None:
            e = entries[v.txn_seq] = HistoryEntry(txn_seq=v.txn_seq, record_type="recovered", command="")
        if e.record_type not in ("committed", "completed"):
            e.record_type = "recovered"  # the writer died (or timed out) after its commit landed
        _fill_from_version(e, v, below)
        entry_of_version[v.version] = e

    # Order keys: sequenced (seq, 0, 0); unsequenced (anchor seq, 1, version), where the
    # anchor is the largest seq of an entry that produced a lower version (-1 if none).
    keyed: list[tuple[tuple[int, int, int], HistoryEntry]] = [((s, 0, 0), e) for s, e in entries.items()]
    if unseq_entries:
        seq_versions = sorted((e.version, s) for s, e in entries.items() if e.version is not None)
        prefix_max: list[int] = []
        for _ver, s in seq_versions:
            prefix_max.append(max(s, prefix_max[-1]) if prefix_max else s)
        vers_only = [ver for ver, _ in seq_versions]
        for ver, e in unseq_entries:
            i = bisect_left(vers_only, ver)
            anchor = prefix_max[i - 1] if i > 0 else -1
            keyed.append(((anchor, 1, ver), e))
    keyed.sort(key=lambda kv: kv[0], reverse=True)
    ordered = [e for _, e in keyed]

    parents = {e.parent_seq for e in ordered if e.parent_seq is not None}
    ordered = _fold_job_commits(ordered)
    since_utc = _utc(since)
    job_seqs: set[int] = set()
    if job is not None:
        job_seqs = {e.txn_seq for e in ordered if e.txn_seq is not None and _matches_job(e.command, job)}

    out: list[HistoryEntry] = []
    for e in ordered:
        if not include_reads and job is None and e.read_only and e.txn_seq not in parents:
            continue
        if job is not None and not (_matches_job(e.command, job) or e.parent_seq in job_seqs):
            continue
        if (namespace is not None or table is not None) and not _matches_object(e.changes, namespace, table):
            continue
        if since_utc is not None:
            t = e.started_at or e.ended_at
            if t is None and e.version is not None and e.version in by_version:
                t = by_version[e.version].created_at
            if t is None or t < since_utc:
                continue
        out.append(e)
        if limit is not None and len(out) >= limit:
            break
    return out
