"""The numbers behind `tlake report`, collected into plain dataclasses (no HTML here).

Three sources, joined only through explicit keys (txn_seq and version numbers):

* the version chain: every available root (created time, txn_seq, rollback marker);
* the control table: transactions and job runs (`build_history` over the audit rows),
  including rows naming versions that were expired since (shown as expired points);
* a walk of the newest `max_versions` trees: node files and definition files reachable from
  each root, with their sizes. One `NodeStore` is shared by the whole walk and every node's
  pointers are memoised, so a node shared by many versions is read once; sizes come from
  `Storage.info`, cached by URI.

The tree reads (that walk, and the Iceberg tables of the latest version) live in
`trinitylake.report.tree`; this module joins them with the version chain and the control table.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from trinitylake.control import build_history
from trinitylake.errors import ValidationError
from trinitylake.format.paths import root_version
from trinitylake.json_data import JsonObject
from trinitylake.options import JOB_OPTIONS
from trinitylake.redact import redact_text, redact_value
from trinitylake.report.tree import (
    MAX_REPORT_TABLES,
    IcebergTable,
    Reach,
    ReachWalker,
    as_int,
    iceberg_tables,
    one_line,
)

if TYPE_CHECKING:
    from trinitylake.control import HistoryEntry
    from trinitylake.format.definitions import LakehouseDef
    from trinitylake.lakehouse.lakehouse import Lakehouse

log = logging.getLogger(__name__)

# First words of the commands of the maintenance jobs (a run of one writes `status_*` metrics).
JOB_WORDS = {"walk", "expire", "orphans", "export", "tables_expire", "tables_orphans"}
# Metrics shown first in the job table, in this order (the rest follow alphabetically).
KEY_METRICS = (
    "files_deleted",
    "bytes_deleted",
    "files_copied",
    "bytes_copied",
    "files_candidates",
    "files_reachable",
    "files_listed",
    "files_failed",
    "requests_total",
)


@dataclass
class VersionPoint:
    """One version on the timeline: available (a root file exists) or expired (known only
    from the control table)."""

    version: int
    created_at_millis: int | None
    available: bool
    txn_seq: int | None = None
    command: str = ""
    kind: str = "commit"  # init | commit | rollback | expire | export | expired
    rollback_from: int | None = None
    rollback_to: int | None = None
    changes: list[str] = field(default_factory=list)
    state: str = ""  # final state of the transaction that made it (committed, recovered, ...)
    snapshots: list[str] = field(default_factory=list)  # exported snapshots pinned to it
    corrupt: str | None = None  # its root exists but cannot be read: the typed error, one line

    @property
    def created_at(self) -> datetime | None:
        return None if self.created_at_millis is None else datetime.fromtimestamp(self.created_at_millis / 1000, UTC)


@dataclass
class JobRun:
    """One job run from the control table (expire, export, orphan cleanup, ...)."""

    txn_seq: int | None
    job: str
    state: str  # committed | deleted | dry_run | read | failed | recovered | running (run_state)
    started_at: datetime | None
    ended_at: datetime | None
    version_before: int | None = None
    version_after: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    user: str | None = None
    host: str | None = None
    commits: list[int] = field(default_factory=list)  # versions committed by the run's transactions

    @property
    def name(self) -> str:
        """The job (or command) this run is of: its command's first word, except ``export
        drop`` (forgetting an export is not an export)."""
        words = self.job.lower().split()
        if words[:2] == ["export", "drop"]:
            return "export drop"
        return words[0] if words else "job"

    @property
    def kind(self) -> str:
        """The job's family for marks and colours: expire, export, export drop or other."""
        name = self.name
        if name == "export drop":
            return name
        if name.startswith("expire"):
            return "expire"
        if name.startswith("export"):
            return "export"
        return "other"

    @property
    def label(self) -> str:
        """The run as the job table names it: ``export weekly-1``, ``export drop weekly-1``, ``expire``."""
        export = self.arguments.get("name") if self.kind in ("export", "export drop") else None
        return f"{self.name} {export}" if isinstance(export, str) and export else self.name

    def shown_arguments(self) -> JsonObject:
        """The arguments worth reading: those of a job that differ from its option defaults
        (`trinitylake.options`), without the ones every run has (lakehouse, run id, control
        location derived from the lakehouse, a reference time that is the run's own start)."""
        return non_default_arguments(self.name, self.arguments, self.started_at)

    @property
    def duration_s(self) -> float | None:
        if self.started_at is not None and self.ended_at is not None:
            return max(0.0, (self.ended_at - self.started_at).total_seconds())
        for k in ("seconds_total", "seconds"):
            if k in self.metrics:
                return float(self.metrics[k])
        phases = [v for k, v in self.metrics.items() if k.startswith("seconds_")]
        return float(sum(phases)) if phases else None

    @property
    def time(self) -> datetime | None:
        """When the run's effect landed (its end), or its start while it runs."""
        return self.ended_at or self.started_at

    def key_metrics(self) -> list[tuple[str, float]]:
        ms = {k: v for k, v in self.metrics.items() if not k.startswith("status_")}
        first = [(k, ms[k]) for k in KEY_METRICS if k in ms]
        rest = sorted((k, v) for k, v in ms.items() if k not in KEY_METRICS)
        return first + rest


@dataclass
class Snapshot:
    name: str
    uri: str
    version: int | None


@dataclass
class ReportData:
    uri: str
    control_uri: str
    generated_at: datetime
    latest_version: int
    oldest_version: int
    oldest_retained_version: int
    namespaces: int
    tables: int
    views: int
    order: int
    node_max_bytes: int
    snapshots: list[Snapshot]
    versions: list[VersionPoint]  # oldest first, expired ones included
    jobs: list[JobRun]  # oldest first
    reach: list[Reach]  # oldest first
    reach_capped: bool
    reach_available: int  # available versions (the walk covers the newest max_versions)
    max_versions: int
    walk_seconds: float
    node_reads: int  # node files read from storage for the whole report (roots not included)
    audit_state: str  # "ok" | "off" | "missing" | "error: ..."
    notes: list[str] = field(default_factory=list)
    iceberg_tables: list[IcebergTable] = field(default_factory=list)  # of the latest version, key order
    tables_left_out: int = 0  # tables past MAX_REPORT_TABLES, not read
    other_format_tables: int = 0  # tables of another format (listed by count only)

    @property
    def available_versions(self) -> list[VersionPoint]:
        return [v for v in self.versions if v.available]

    @property
    def expired_versions(self) -> list[VersionPoint]:
        return [v for v in self.versions if not v.available]

    def summary(self) -> JsonObject:
        last = self.reach[-1] if self.reach else None
        return {
            "lakehouse": self.uri,
            "generated_at": self.generated_at.isoformat(timespec="seconds"),
            "latest_version": self.latest_version,
            "oldest_version": self.oldest_version,
            "oldest_retained_version": self.oldest_retained_version,
            "available_versions": len(self.available_versions),
            "expired_versions_known": len(self.expired_versions),
            "rollbacks": sum(1 for v in self.versions if v.kind == "rollback"),
            "namespaces": self.namespaces,
            "tables": self.tables,
            "views": self.views,
            "job_runs": len(self.jobs),
            "failed_job_runs": sum(1 for j in self.jobs if j.state == "failed"),
            "exported_snapshots": len(self.snapshots),
            "reach_versions": len(self.reach),
            "reach_capped": self.reach_capped,
            "files_latest": last.files if last else None,
            "bytes_latest": last.bytes if last else None,
            "node_reads": self.node_reads,
            "walk_seconds": round(self.walk_seconds, 3),
            "audit": self.audit_state,
            "iceberg_tables": len(self.iceberg_tables),
            "iceberg_tables_unreadable": sum(1 for t in self.iceberg_tables if t.error),
            "iceberg_snapshots": sum(t.snapshots or 0 for t in self.iceberg_tables),
        }


# ---- arguments ------------------------------------------------------------------------------
_ALWAYS_HIDDEN = frozenset({"lakehouse", "run_id", "argv"})
_REFERENCE_SLACK_S = 60.0  # a reference_time this close to the start is the wall clock's


def non_default_arguments(job: str, arguments: JsonObject, started_at: datetime | None = None) -> JsonObject:
    """`arguments` of a run of `job` without the values its options default to.

    A job of `trinitylake.options` compares each value with its option's parsed default;
    ``control_uri`` equal to ``<lakehouse>/_control``, ``output`` equal to
    ``<lakehouse>/_maintenance/<job>/<run_id>`` and a ``reference_time`` within a minute of
    `started_at` count as defaults (they are derived when not given). Other commands keep
    every argument but the command line (``argv``).
    """

    options = JOB_OPTIONS.get(job)
    out: dict[str, Any] = {}
    for k, v in sorted(arguments.items()):
        if k in _ALWAYS_HIDDEN:
            continue
        opt = options.get(k) if options is not None else None
        if opt is not None:
            try:
                default = opt.parse(opt.default)
            except ValueError:
                default = opt.default
            if v == default or (isinstance(v, dict) and not v and not default):
                continue
            if k == "control_uri" and isinstance(v, str) and v.rstrip("/") == f"{arguments.get('lakehouse', '')}".rstrip("/") + "/_control":
                continue
            if k == "output" and isinstance(v, str) and v == (
                    f"{arguments.get('lakehouse', '')}".rstrip("/") + f"/_maintenance/{job}/{arguments.get('run_id')}"):
                continue
            if k == "reference_time" and isinstance(v, int | float) and started_at is not None \
                    and abs(v / 1000 - started_at.timestamp()) <= _REFERENCE_SLACK_S:
                continue
        out[k] = v
    return out


# ---- collection ------------------------------------------------------------------------------
def is_job(command: str, parent_seq: int | None, metrics: dict[str, float] | None = None) -> bool:
    """A maintenance job run, as opposed to a transaction (a job's own commits carry its
    parent_seq). A job is known by its command's first word or by the ``status_*`` metric every
    job run's final row carries; any other command (``demo: create tables``, ``table create``)
    is an ordinary commit."""
    if parent_seq is not None:
        return False
    words = command.split()
    if words and words[0].lower() in JOB_WORDS:
        return True
    return any(k.startswith("status_") for k in (metrics or {}))


def collect(lh: Lakehouse, max_versions: int = 200) -> ReportData:
    """Everything the report shows, read from `lh` (read-only: writes nothing)."""
    if max_versions < 1:
        raise ValidationError(f"max_versions must be at least 1, got {max_versions}")
    generated_at = datetime.now(UTC)
    notes: list[str] = []
    store = lh.node_store(lh.storage)  # shared by every read below: a node file is read once
    reads_before = store.reads
    latest = lh.latest_version()
    latest_ref = lh.load_root(latest)
    d = latest_ref.lakehouse_def
    infos = lh.version_infos()
    available = {i.version for i in infos}

    # Control table.
    records: list = []
    audit_state = "off"
    if lh.auditor.enabled:
        try:
            control = lh.auditor.control
            if control.exists():
                records = control.records()
                audit_state = "ok"
            else:
                audit_state = "missing"
        except Exception as exc:  # noqa: BLE001 - the page still shows the tree
            audit_state = redact_text(f"error: {type(exc).__name__}: {exc}")
            log.warning("control table not read: %s", exc)
    if audit_state != "ok":
        notes.append(
            {
                "off": "Auditing is off for this run: job runs and expired versions are not shown.",
                "missing": f"No control table at {lh.auditor.control_uri}: job runs and expired versions are not shown.",
            }.get(audit_state, f"The control table could not be read ({audit_state}); job runs are not shown.")
        )


    entries = build_history(records, infos, include_reads=True)
    jobs_by_seq: dict[int, JobRun] = {}
    for e in reversed(entries):  # oldest first
        if is_job(e.command, e.parent_seq, e.metrics):
            j = JobRun(
                txn_seq=e.txn_seq, job=e.command, state=e.state, started_at=e.started_at, ended_at=e.ended_at,
                version_before=e.version_before, version_after=e.version, metrics=dict(e.metrics),
                arguments=redact_value(dict(e.arguments)), error=redact_text(e.error), user=e.user, host=e.host,
            )
            if e.version is not None:
                j.commits.append(e.version)
            if e.txn_seq is not None:
                jobs_by_seq[e.txn_seq] = j
            else:
                jobs_by_seq[-len(jobs_by_seq) - 1] = j
    for e in entries:
        if e.parent_seq is not None and e.parent_seq in jobs_by_seq and e.version is not None:
            jobs_by_seq[e.parent_seq].commits.append(e.version)
    jobs = sorted(jobs_by_seq.values(), key=lambda j: (j.time or generated_at, j.txn_seq or 0))

    # Versions: available ones from the tree, expired ones from committed rows.
    entry_by_version = {e.version: e for e in entries if e.version is not None}
    snapshots = _snapshots(d)
    pins: dict[int, list[str]] = {}
    for s in snapshots:
        if s.version is not None:
            pins.setdefault(s.version, []).append(s.name)
    points: list[VersionPoint] = []
    for i in infos:
        entry = entry_by_version.get(i.version)
        p = VersionPoint(
            version=i.version, created_at_millis=i.created_at_millis, available=True, txn_seq=i.txn_seq,
            command=entry.label if entry else "", rollback_from=i.rollback_from, changes=list(i.changes),
            state=entry.record_type if entry else "", snapshots=sorted(pins.get(i.version, [])),
            corrupt=i.corrupt,
        )
        if p.txn_seq is None and entry is not None and i.corrupt is not None:
            p.txn_seq = entry.txn_seq  # the root cannot say; the audit row that made it can
        p.kind = _kind(p, entry, jobs_by_seq)
        if p.kind == "rollback":
            p.rollback_to = i.rollback_to
            if p.rollback_to is None and entry is not None:
                p.rollback_to = as_int((entry.arguments or {}).get("to"))
        points.append(p)
    corrupt = [i for i in infos if i.corrupt is not None]
    if corrupt:
        notes.append(f"{len(corrupt)} version root(s) cannot be read and are marked corrupt: "
                     + ", ".join(f"v{i.version}" for i in corrupt[:10]) + (" …" if len(corrupt) > 10 else "") + ".")
    oldest = min(available) if available else latest
    for e in entries:
        if e.version is None or e.version in available or e.version >= oldest:
            continue
        t = e.ended_at or e.started_at
        points.append(
            VersionPoint(
                version=e.version, created_at_millis=int(t.timestamp() * 1000) if t else None, available=False,
                txn_seq=e.txn_seq, command=e.command, kind="expired", changes=list(e.changes), state=e.record_type,
                snapshots=sorted(pins.get(e.version, [])),
            )
        )
    points.sort(key=lambda p: p.version)

    # Contents of the latest version.
    counts = {"namespace": 0, "table": 0, "view": 0}
    view = lh.view(latest)
    table_entries: list[tuple[str, str]] = []
    for key, path in view.all_items():
        try:
            kind, names = view.codec.decode(key)
        except Exception:  # noqa: BLE001 - a key of another kind is not counted
            continue
        if kind in counts:
            counts[kind] += 1
        if kind == "table":
            table_entries.append((".".join(names), path))
    try:
        iceberg, other_format = iceberg_tables(lh, view, table_entries[:MAX_REPORT_TABLES])
    except Exception as exc:  # noqa: BLE001 - the page still shows everything else
        iceberg, other_format = [], 0
        notes.append(one_line(f"Iceberg tables could not be listed: {type(exc).__name__}: {exc}"))
    left_out = max(0, len(table_entries) - MAX_REPORT_TABLES)
    if left_out:
        notes.append(f"Iceberg tables: the first {MAX_REPORT_TABLES} of {len(table_entries)} tables are shown "
                     f"(by namespace and name); {left_out} were not read.")
    bad = sum(1 for t in iceberg if t.error)
    if bad:
        notes.append(f"{bad} of {len(iceberg)} Iceberg table(s) have metadata that cannot be read (see Iceberg tables).")

    # Reachable files of the newest versions.
    readable = sorted(i.version for i in infos if i.corrupt is None)
    walk_versions = readable[-max_versions:]
    capped = len(readable) > len(walk_versions)
    t0 = time.monotonic()
    walker = ReachWalker(lh)
    reach = [walker.version(v) for v in walk_versions]
    walk_seconds = time.monotonic() - t0
    if capped:
        notes.append(
            f"Reachable files are shown for the newest {len(walk_versions)} of {len(readable)} readable versions "
            f"(--max-versions {max_versions})."
        )
    missing = sum(r.missing for r in reach)
    if missing:
        notes.append(f"{missing} referenced file(s) were missing or unreadable during the walk (counted, size 0).")

    return ReportData(
        uri=lh.uri,
        control_uri=lh.auditor.control_uri,
        generated_at=generated_at,
        latest_version=latest,
        oldest_version=oldest,
        oldest_retained_version=int(getattr(d, "oldest_retained_version", 0) or 0),
        namespaces=counts["namespace"],
        tables=counts["table"],
        views=counts["view"],
        order=d.order,
        node_max_bytes=d.node_file_max_size_bytes,
        snapshots=snapshots,
        versions=points,
        jobs=jobs,
        reach=reach,
        reach_capped=capped,
        reach_available=len(available),
        max_versions=max_versions,
        walk_seconds=walk_seconds,
        node_reads=store.reads - reads_before,
        audit_state=audit_state,
        notes=notes,
        iceberg_tables=iceberg,
        tables_left_out=left_out,
        other_format_tables=other_format,
    )


def _kind(p: VersionPoint, e: HistoryEntry | None, jobs_by_seq: dict[int, JobRun]) -> str:
    if p.rollback_from is not None:
        return "rollback"
    if p.version == 0 and (e is None or e.command in ("init", "")):
        return "init"
    job = None
    if e is not None:
        if e.parent_seq is not None:
            job = jobs_by_seq.get(e.parent_seq)
        elif e.txn_seq is not None:
            job = jobs_by_seq.get(e.txn_seq)
    if job is not None and job.kind in ("expire", "export"):
        return job.kind
    return "commit"


def _snapshots(d: LakehouseDef) -> list[Snapshot]:
    out = []
    exported = dict(getattr(d, "exported_snapshots", {}) or {})
    pins = dict(getattr(d, "exported_snapshot_pins", {}) or {})
    for name in sorted(exported):
        uri = exported[name]
        v = pins.get(name)
        if v is None:
            try:
                v = root_version(uri)
            except Exception:  # noqa: BLE001 - not a root file name: version unknown
                v = None
        out.append(Snapshot(name, uri, None if v is None else int(v)))
    return out
