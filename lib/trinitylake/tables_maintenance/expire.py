"""`tlake tables expire-snapshots`: expire the snapshots of every Iceberg table of a
lakehouse, consistent with the lakehouse's own time travel.

Steps:

1. **Tables**: the Iceberg tables of the latest version (``--tables``: some of them).
2. **Commit, batch by batch** (`ExpireOptions.batch_size` tables a lakehouse transaction, one
   version a batch): each table's snapshots to keep by Iceberg's rules
   (`trinitylake.tables_maintenance.retention`), its new metadata staged through the catalog
   (PyIceberg's ``RemoveSnapshots`` update, refs and statistics of removed snapshots with them),
   the files the removed snapshots reach and the kept ones do not added to the pending file
   (`trinitylake.tables_maintenance.state`) *before* the commit. A batch whose commit conflicts
   (a concurrent writer changed one of its tables) is planned again on the new metadata, so the
   writer's commit is never lost. The tables' files go through one FileIO
   (`trinitylake.iceberg.fileio.TrinityLakeFileIO`) for the reads and the commits: a batch's
   tables are loaded from the metadata the run has read already, and its new metadata files
   are written together at its commit (their requests in flight together on an object store),
   not one table after another.
3. **Live set**, after the commits: every snapshot the tables' current metadata keeps, and what
   every retained lakehouse version and pinned export reaches (`trinitylake.tables_maintenance.live`).
4. **Plan**: ``_maintenance/tables_expire/<run_id>/plan.json`` (per table: snapshots
   expired, files to delete by kind, files deferred) is written before anything is deleted. A
   dry run commits nothing and stops here.
5. **Delete**: pending files outside the live set, in bulk batches through `Storage`; what
   stays pending is what a retained lakehouse version still reaches (deferred): the first run
   after that version expires deletes it, whether or not it expires a snapshot itself.

A run killed anywhere leaves every file it meant to delete in the pending file; the next run
finishes the work (missing files count as deleted).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io import PY_IO_IMPL
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.table.update import AssertTableUUID, RemoveSnapshotRefUpdate, RemoveSnapshotsUpdate

from trinitylake.errors import StorageError, TransactionConflictError
from trinitylake.iceberg.catalog import STORAGE_PREFIX, TrinityLakeCatalog
from trinitylake.runs.folder import now_ms, run_dir, write_json
from trinitylake.tables_maintenance import common, damage
from trinitylake.tables_maintenance.files import CONTENT_KINDS, METADATA, TableFiles, metadata_log
from trinitylake.tables_maintenance.live import TablePointers, TableRef, VersionLive, table_live, version_live
from trinitylake.tables_maintenance.retention import Retention, plan_retention
from trinitylake.tables_maintenance.state import Pending

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.update import TableUpdate

    from trinitylake.iceberg.fileio import TrinityLakeFileIO
    from trinitylake.iceberg.multi_table import MultiTableTransaction
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution

log = logging.getLogger(__name__)


@dataclass
class ExpireOptions:
    """Options of one run (the CLI's flags)."""

    older_than_ms: int | None = None  # None: each table's history.expire.max-snapshot-age-ms
    retain_last: int | None = None  # None: each table's history.expire.min-snapshots-to-keep
    tables: list[str] = field(default_factory=list)
    dry_run: bool = False
    batch_size: int = 100
    max_attempts: int = 20
    reference_ms: int | None = None  # "now" of the age rules (default: when the run starts)
    catalog_properties: dict[str, str] = field(default_factory=dict)
    delete_batch: int = common.DELETE_BATCH


@dataclass
class TablePlan:
    """What the run decided for one table."""

    name: str
    metadata: str  # the metadata location the plan was made on
    retention: Retention
    new_metadata: str | None = None
    candidates: dict[str, str] = field(default_factory=dict)
    version: int | None = None
    attempts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "metadata": self.metadata,
            "new_metadata": self.new_metadata,
            "snapshots_expired": len(self.retention.expired),
            "snapshots_kept": len(self.retention.kept),
            "expired_snapshot_ids": sorted(self.retention.expired),
            "refs_removed": self.retention.removed_refs,
            "version": self.version,
            "attempts": self.attempts,
        }


def expire_snapshots(
    lakehouse: Lakehouse, opts: ExpireOptions, result: JobResult, ex: Execution | None = None
) -> JobResult:
    """One run (see the module doc); fills and returns `result`. `ex` places the manifest
    reads and the deletes (driver-only without one)."""
    started = time.monotonic()
    now = opts.reference_ms if opts.reference_ms is not None else now_ms()
    files = TableFiles(lakehouse.storage, ex=ex)
    files.tolerant = True  # a table file that cannot be read damages its table, not the run
    pointers = TablePointers(lakehouse, files)
    catalog = job_catalog(lakehouse, files.io, opts.catalog_properties)
    latest = lakehouse.latest_version()
    chosen, unreadable = common.readable(files, common.select_tables(common.latest_tables(lakehouse, pointers, latest), opts.tables))
    chosen, no_gc = common.gc_disabled(files, chosen)
    pending = Pending() if opts.dry_run else Pending.load(lakehouse.storage)
    before = _scan(files, chosen, pending, opts, now)
    chosen = [t for t in chosen if t.name not in before.tables]
    result.details.update(
        {
            "older_than_ms": opts.older_than_ms,
            "retain_last": opts.retain_last,
            "reference_ms": now,
            "tables_selected": len(chosen) + len(unreadable),
            "tables_without_metadata": unreadable[:20],
            "tables_gc_disabled": no_gc[:20],
        }
    )

    plans: dict[str, TablePlan] = {}
    conflicts = 0
    batch = max(opts.batch_size, 1)
    parsed: dict[str, TableMetadata] = {}
    for i in range(0, len(chosen), batch):
        done, retried = _commit_batch(catalog, files, chosen[i : i + batch], opts, now, pending, lakehouse, parsed)
        plans.update(done)
        conflicts += retried
    result.seconds["commit"] = round(time.monotonic() - started, 3)

    t0 = time.monotonic()
    live = _live_after(lakehouse, files, pointers, plans, pending, opts)
    dmg = damage.assess(lakehouse, files, pointers, live.current, live.vl, live.latest)
    if dmg:
        live.tables.update(damage.salvage(files, dmg))  # what a damaged table's readable files share
    result.seconds["live_set"] = round(time.monotonic() - t0, 3)
    candidates = {**pending.all(), **{u: k for p in plans.values() for u, k in p.candidates.items()}}
    # A damaged table's files, and any file under a location a damaged table has or had, stay
    # pending: its live set is unknown. A later run deletes them once the table reads again.
    owner = {u: t for t, fs in pending.tables.items() for u in fs}
    prefixes = dmg.prefixes()
    held = {
        u: k
        for u, k in candidates.items()
        if u not in live.tables and (owner.get(u) in dmg.tables or (prefixes and dmg.holds(u, prefixes)))
    }
    to_delete = {
        u: k for u, k in candidates.items() if u not in live.tables and u not in live.versions and u not in held
    }
    deferred = {u: k for u, k in candidates.items() if u in live.versions and u not in live.tables and u not in held}

    per_table, owned = _per_table(plans, pending, to_delete, deferred)
    for name, row in per_table.items():
        row["files_held"] = sum(1 for u in held if (owner.get(u) or "") == name or u in plans.get(name, _NO_PLAN).candidates)
    for name in dmg.tables:
        row = per_table.setdefault(name, {"snapshots_expired": 0, "version": None})
        if name in plans and plans[name].new_metadata:
            # Damaged only in what a retained version points at (found after the commits, by the
            # live set's read): its expiry committed, but none of its files is deleted.
            row["damaged"] = "found after its expiry committed: its files are held"
        else:
            row["skipped"] = "damaged"
    result.details["tables"] = per_table
    damage.report(dmg, result)
    result.details["lakehouse_roots"] = len(live.roots)
    result.counts.update(
        {
            "tables": len(chosen),
            "tables_changed": sum(1 for p in plans.values() if p.new_metadata),
            "snapshots_expired": sum(len(p.retention.expired) for p in plans.values()),
            "refs_removed": sum(len(p.retention.removed_refs) for p in plans.values()),
            "candidates": len(to_delete),
            "deferred": len(deferred),
            "held": len(held),
            "conflicts_replanned": conflicts,
            "files_read": files.reads,
        }
    )
    result.counts.update({f"candidates_{k}": n for k, n in common.kind_counts(to_delete).items()})
    result.plan_location = write_json(
        lakehouse.storage,
        f"{run_dir(common.EXPIRE_JOB, result.run_id)}/plan.json",
        {
            "run_id": result.run_id,
            "dry_run": opts.dry_run,
            "reference_ms": now,
            "tables": per_table,
            "delete": sorted(to_delete),
            "deferred": sorted(deferred),
            "held": sorted(held),
            "damaged_tables": dmg.to_dict(),
        },
    )
    if opts.dry_run:
        return result

    t0 = time.monotonic()
    out = common.delete_files(files, to_delete, opts.delete_batch)
    result.seconds["delete"] = round(time.monotonic() - t0, 3)
    gone = set(out.deleted)
    # What stays pending: files a retained lakehouse version still reaches, and those not deleted.
    pending.keep_only(set(deferred) | set(held) | (set(to_delete) - gone))
    pending.save(lakehouse.storage)
    result.counts["deleted"] = len(gone)
    result.counts.update({f"deleted_{k}": n for k, n in common.kind_counts(out.deleted).items()})
    result.counts["failed"] = out.failed
    for name, row in per_table.items():
        row["files_deleted"] = sum(1 for u in owned.get(name, ()) if u in gone)
    if out.failed:
        result.details["failures"] = [f"{u}: {e}" for u, e in out.failures[:20]]
        first = f" (first: {out.failures[0][0]}: {out.failures[0][1]})" if out.failures else ""
        raise StorageError(
            f"{out.failed} table files could not be deleted{first}; they stay pending for the next run"
        )
    return result


def _scan(files: TableFiles, chosen: list[TableRef], pending: Pending, opts: ExpireOptions, now: int) -> damage.Damage:
    """Read up front, in a few batches, what the plans will read, and name the damaged tables:
    a table with a file that cannot be read is left alone (no commit, none of its files deleted,
    `trinitylake.tables_maintenance.damage`); the plans then read only what a concurrent writer
    added.

    What is read: every kept snapshot's manifest list, and each expired snapshot's that no kept
    one covers (`TableFiles.uncovered`). The manifests are read only when the run needs them,
    that is when an expired snapshot names a manifest no kept one does (its data files may go,
    checked against every table's) or a pending file is a data or delete file: then every
    manifest of the tables that may lose files (a snapshot to expire, or files pending) is read
    here, as is every table's later (`_live_after`)."""
    retention = {t.name: plan_retention(files.metadata[t.metadata], now, opts.older_than_ms, opts.retain_last)
                 for t in chosen if t.metadata in files.metadata}
    out = damage.scan_tables(files, chosen, contents=False,
                             snapshots=lambda t: retention[t.name].kept if t.name in retention else None)
    read: dict[str, set[int]] = {}
    for t in chosen:
        ret = retention.get(t.name)
        if ret is not None and t.name not in out.tables:
            meta = files.metadata[t.metadata]
            read[t.name] = ret.kept | files.uncovered(meta, ret.expired, ret.kept)
    out.tables.update(damage.scan_tables(files, [t for t in chosen if t.name in read], contents=False,
                                         snapshots=lambda t: read[t.name]).tables)
    busy = [t for t in chosen if t.name in read and t.name not in out.tables
            and (t.name in pending.tables or retention[t.name].changes)]
    contents = any(k in CONTENT_KINDS for k in pending.all().values()) or any(
        files.manifests_of(files.metadata[t.metadata], read[t.name] - retention[t.name].kept, missing_ok=True)
        - files.manifests_of(files.metadata[t.metadata], retention[t.name].kept)
        for t in busy
    )
    if contents:
        out.tables.update(damage.scan_tables(files, busy, snapshots=lambda t: read[t.name]).tables)
    return out


# ---- the commits ------------------------------------------------------------------------------
def job_catalog(lakehouse: Lakehouse, io: TrinityLakeFileIO, properties: dict[str, str] | None = None
                ) -> TrinityLakeCatalog:
    """The catalog the commits go through: `TrinityLakeCatalog` on the job's own `lakehouse`
    (its commits carry the job's audit context and parent seq), the tables' files through `io`,
    the FileIO of the run's reads, unless `properties` (PyIceberg catalog properties) name a
    FileIO or S3 properties of their own."""
    props = properties or {}
    catalog = TrinityLakeCatalog("tables-maintenance", **{
        "lakehouse": lakehouse.uri,
        "audit": "false",
        **{f"{STORAGE_PREFIX}{k}": v for k, v in (lakehouse.storage.options or {}).items() if isinstance(v, str)},
        **props,
    })
    catalog.lakehouse = lakehouse
    if not any(k == PY_IO_IMPL or k.startswith(("s3.", "client.")) for k in props):
        catalog.io = io
    return catalog


def _commit_batch(
    catalog: TrinityLakeCatalog,
    files: TableFiles,
    refs: list[TableRef],
    opts: ExpireOptions,
    now: int,
    pending: Pending,
    lakehouse: Lakehouse,
    parsed: dict[str, TableMetadata],
) -> tuple[dict[str, TablePlan], int]:
    """Plan and commit one batch of tables as one lakehouse version; a conflict re-plans the
    whole batch on the tables' new metadata. Returns the plans and the number of re-plans.

    The batch's tables are loaded at once from the metadata the run has read (`parsed`: by
    location, parsed once for every attempt), and its new metadata files written together at
    the commit (``write_later``)."""
    for attempt in range(1, opts.max_attempts + 1):
        mtx: MultiTableTransaction = catalog.multi_table_transaction(write_later=True)
        try:
            for r in refs:
                if r.metadata not in parsed and r.metadata in files.metadata:
                    parsed[r.metadata] = TableMetadataUtil.parse_obj(files.metadata[r.metadata])
            mtx.load_tables([r.key for r in refs], parsed)
            plans = {r.name: p for r in refs if (p := _plan_table(mtx, files, r, opts, now)) is not None}
        except CommitFailedException as e:  # a table changed between its load and its staging
            log.info("tables expire-snapshots: batch of %d tables conflicted (attempt %d): %s", len(refs), attempt, e)
            mtx.rollback()
            continue
        except BaseException:
            mtx.rollback()
            raise
        for p in plans.values():
            p.attempts = attempt
        changed = [p for p in plans.values() if p.new_metadata]
        if opts.dry_run or not changed:
            mtx.rollback()
            return plans, attempt - 1
        try:
            for p in changed:
                pending.add(p.name, p.candidates)
            pending.save(lakehouse.storage)  # before the commit: a killed run's next run finds them
        except BaseException:
            mtx.rollback()
            raise
        try:
            version = mtx.commit()  # on a failure it rolls back and deletes what it staged itself
        except CommitFailedException as e:
            log.info("tables expire-snapshots: batch of %d tables conflicted (attempt %d): %s", len(refs), attempt, e)
            continue
        for p in changed:
            p.version = version
        for location, data in mtx.written.items():
            files.add_metadata(location, data)  # the live set reads the tables' new metadata: no GET
        return plans, attempt - 1
    raise TransactionConflictError(
        f"tables expire-snapshots: the batch of {refs[0].name} .. {refs[-1].name} conflicted with concurrent commits "
        f"{opts.max_attempts} times; nothing of it was committed, run again"
    )


def _plan_table(
    mtx: MultiTableTransaction, files: TableFiles, ref: TableRef, opts: ExpireOptions, now: int
) -> TablePlan | None:
    name = ref.name
    try:
        table: Table = mtx.load_table(ref.key)
    except NoSuchTableError:
        return None  # dropped meanwhile
    loc = files.canon(table.metadata_location)
    meta = files.meta(loc)
    ret = plan_retention(meta, now, opts.older_than_ms, opts.retain_last)
    plan = TablePlan(name, loc, ret)
    if not ret.changes:
        return plan
    updates: list[TableUpdate] = [RemoveSnapshotRefUpdate(ref_name=r) for r in ret.removed_refs]  # type: ignore[call-arg]
    if ret.expired:
        updates.append(RemoveSnapshotsUpdate(snapshot_ids=sorted(ret.expired)))  # type: ignore[call-arg]
    resp = mtx.stage(table, (AssertTableUUID(uuid=table.metadata.table_uuid),), tuple(updates))
    plan.new_metadata = files.canon(resp.metadata_location)
    new_log = [e.metadata_file for e in resp.metadata.metadata_log]
    # A data or delete file can go only with a manifest that no kept snapshot names (the rest
    # list the same entries for a kept snapshot): when there is none, no manifest is read. An
    # expired snapshot a kept one covers names no such manifest: its list is not read either.
    read = files.uncovered(meta, ret.expired, ret.kept)
    contents = bool(files.manifests_of(meta, read, missing_ok=True) - files.manifests_of(meta, ret.kept))
    keep = table_live(files, loc, meta, ret.kept, [plan.new_metadata, *new_log], contents=contents)
    gone = files.reach(meta, read, missing_ok=True, contents=contents)
    for u, kind in files.named(meta, ret.expired - read).items():
        gone.setdefault(u, kind)
    for m in [loc, *metadata_log(meta)]:
        gone.setdefault(files.canon(m), METADATA)  # a metadata file the new log no longer names
    plan.candidates = {u: k for u, k in gone.items() if u not in keep}
    return plan


# ---- after the commits ------------------------------------------------------------------------
@dataclass
class _Live:
    tables: set[str]
    versions: set[str]
    roots: list[str]
    vl: VersionLive
    current: list[TableRef]
    latest: int


def _live_after(
    lakehouse: Lakehouse,
    files: TableFiles,
    pointers: TablePointers,
    plans: dict[str, TablePlan],
    pending: Pending,
    opts: ExpireOptions,
) -> _Live:
    """The live set the deletes are checked against, read after the commits: the current
    metadata of every table of the latest version (a dry run: the metadata its plans would write) and
    every retained lakehouse root."""
    latest = lakehouse.latest_version()
    # Manifests are read only when a candidate is a data or delete file: the other kinds are
    # named by metadata and manifest lists alone.
    candidates = {**pending.all(), **{u: k for p in plans.values() for u, k in p.candidates.items()}}
    contents = any(k in CONTENT_KINDS for k in candidates.values())
    vl = version_live(lakehouse, files, pointers, latest, contents)
    current = {t.name: t for t in common.latest_tables(lakehouse, pointers, latest)}
    live_tables: set[str] = set()
    # Every table of the latest version counts, not only those with candidates: a table renamed
    # since its files became pending keeps them under its new name, and tables may share files
    # (a file added to two tables, a clone): a pending file of one table stays while any table
    # reaches it. (With every table chosen, their manifests are read once already.)
    names = set(current) | set(pending.tables) | {n for n, p in plans.items() if p.candidates}
    files.load_metadata([current[n].metadata for n in names if n in current], missing_ok=True)
    files.prefetch(
        [
            (files.metadata[current[n].metadata], None)
            for n in names
            if n in current and current[n].metadata in files.metadata
        ],
        contents=contents,
    )
    for name in sorted(names):
        plan = plans.get(name)
        if opts.dry_run and plan is not None and plan.new_metadata:
            meta = files.meta(plan.metadata)
            live_tables.update(table_live(files, plan.metadata, meta, plan.retention.kept, contents=contents))
            continue
        ref: TableRef | None = current.get(name)
        if ref is None or ref.metadata not in files.metadata:
            continue  # dropped (only the retained versions that still name it keep its files), or damaged
        live_tables.update(table_live(files, ref.metadata, files.meta(ref.metadata), contents=contents))
    return _Live(live_tables, set(vl.files), vl.roots, vl, list(current.values()), latest)


_NO_PLAN = TablePlan("", "", Retention())


def _per_table(
    plans: dict[str, TablePlan], pending: Pending, to_delete: dict[str, str], deferred: dict[str, str]
) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """Per table: its plan (``snapshots_expired``, ``version``, ...), ``files_to_delete`` (and
    by kind), ``files_deferred``; and the files to delete of each table."""
    owner: dict[str, str] = {}
    for t, fs in pending.tables.items():
        for u in fs:
            owner[u] = t
    for plan in plans.values():
        for u in plan.candidates:
            owner[u] = plan.name
    by_table: dict[str, list[str]] = {}
    for u, t in owner.items():
        by_table.setdefault(t, []).append(u)
    out: dict[str, dict[str, Any]] = {}
    owned: dict[str, list[str]] = {}
    for name in sorted(set(plans) | set(pending.tables)):
        p: TablePlan | None = plans.get(name)
        row: dict[str, Any] = p.to_dict() if p is not None else {"snapshots_expired": 0, "version": None}
        mine = by_table.get(name, [])
        dels = [u for u in mine if u in to_delete]
        row["files_to_delete"] = len(dels)
        row["files_to_delete_by_kind"] = common.kind_counts({u: to_delete[u] for u in dels})
        row["files_deferred"] = sum(1 for u in mine if u in deferred)
        owned[name] = dels
        out[name] = row
    return out, owned
