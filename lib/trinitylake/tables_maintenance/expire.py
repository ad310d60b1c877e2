"""`tlake tables expire-snapshots`: expire the snapshots of every Iceberg table of a
lakehouse, consistent with the lakehouse's own time travel.

Phases, each a function of one `trinitylake.tables_maintenance.run.TablesRun` (what the run
has read: the lakehouse is read once, at the top), the decisions in
`trinitylake.tables_maintenance.expire_rules` beside them:

1. **Tables** (``_select``): the Iceberg tables of the latest version (``--tables``: some of
   them) whose metadata reads; ``_scan`` reads up front what the plans will read.
2. **Commit, batch by batch** (`trinitylake.tables_maintenance.expire_commits`) (`ExpireOptions.batch_size` tables a lakehouse transaction, one
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
3. **Live set** (``_live_after``), after the commits: every snapshot the tables' current metadata keeps, and what
   every retained lakehouse version and pinned export reaches (`trinitylake.tables_maintenance.live`).
4. **Plan** (``_record_plan``; which candidate is deleted, deferred or held is
   `expire_rules.split_candidates`): ``_maintenance/tables_expire/<run_id>/plan.json`` (per table: snapshots
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trinitylake.errors import StorageError
from trinitylake.runs.folder import now_ms
from trinitylake.tables_maintenance import common, damage
from trinitylake.tables_maintenance import expire_rules as rules
from trinitylake.tables_maintenance.expire_commits import commit_batch, job_catalog
from trinitylake.tables_maintenance.expire_rules import ExpireOptions, TablePlan
from trinitylake.tables_maintenance.files import CONTENT_KINDS, TableFiles
from trinitylake.tables_maintenance.live import TableRef, table_live
from trinitylake.tables_maintenance.retention import plan_retention
from trinitylake.tables_maintenance.run import TablesRun
from trinitylake.tables_maintenance.state import Pending

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata

    from trinitylake.lakehouse import Lakehouse
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution

log = logging.getLogger(__name__)

__all__ = ["ExpireOptions", "expire_snapshots"]


def expire_snapshots(
    lakehouse: Lakehouse, opts: ExpireOptions, result: JobResult, ex: Execution | None = None
) -> JobResult:
    """One run (see the module doc); fills and returns `result`. `ex` places the manifest
    reads and the deletes (driver-only without one)."""
    run = TablesRun(lakehouse, result, opts.reference_ms if opts.reference_ms is not None else now_ms(), ex)
    with run.timed("commit", since=run.started):
        chosen, unreadable = _select(run, opts)
        pending = Pending() if opts.dry_run else Pending.load(run.storage)
        before = _scan(run.files, chosen, pending, opts, run.now)
        chosen = [t for t in chosen if t.name not in before.tables]
        result.details["tables_selected"] = len(chosen) + unreadable
        plans, conflicts = _commit_phase(run, chosen, pending, opts)
    with run.timed("live_set"):
        live = _live_after(run, plans, pending, opts)
    split = rules.split_candidates(plans, pending.tables, live.tables, live.versions, live.dmg)
    per_table, owned = rules.per_table(plans, pending.tables, split, live.dmg.tables)
    _record_plan(run, opts, chosen, plans, conflicts, live, split, per_table)
    if opts.dry_run:
        return result
    with run.timed("delete"):
        out = run.delete(split.to_delete, opts.delete_batch)
    gone = set(out.deleted)
    pending.keep_only(split.still_pending(gone))
    pending.save(run.storage)
    result.counts["deleted"] = len(gone)
    result.counts.update({f"deleted_{k}": n for k, n in rules.kind_counts(out.deleted).items()})
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


# ---- the tables ------------------------------------------------------------------------------
def _select(run: TablesRun, opts: ExpireOptions) -> tuple[list[TableRef], int]:
    """**select**: the tables `opts` names whose metadata reads and whose files may be deleted
    (``gc.enabled``), and how many named have no metadata file; the others are named in the
    result."""
    chosen, unreadable = common.readable(run.files, common.select_tables(run.tables, opts.tables))
    chosen, no_gc = common.gc_disabled(run.files, chosen)
    run.result.details.update(
        {
            "older_than_ms": opts.older_than_ms,
            "retain_last": opts.retain_last,
            "reference_ms": run.now,
            "tables_without_metadata": unreadable[:20],
            "tables_gc_disabled": no_gc[:20],
        }
    )
    return chosen, len(unreadable)


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
def _commit_phase(
    run: TablesRun, chosen: list[TableRef], pending: Pending, opts: ExpireOptions
) -> tuple[dict[str, TablePlan], int]:
    """**commit**: each batch of `opts.batch_size` tables planned and committed as one
    lakehouse version (`trinitylake.tables_maintenance.expire_commits`); the plans, and how many
    batches were planned again after a conflict."""
    catalog = job_catalog(run, opts.catalog_properties)
    plans: dict[str, TablePlan] = {}
    conflicts = 0
    batch = max(opts.batch_size, 1)
    parsed: dict[str, TableMetadata] = {}
    for i in range(0, len(chosen), batch):
        done, retried = commit_batch(run, catalog, chosen[i : i + batch], opts, pending, parsed)
        plans.update(done)
        conflicts += retried
    return plans, conflicts


# ---- after the commits ------------------------------------------------------------------------
@dataclass
class _Live:
    """**live_set**: what the tables of the latest version keep (`tables`, with what a damaged
    table's readable files share), what the retained roots keep (`versions`), and the damage."""

    tables: set[str]
    versions: set[str]
    roots: list[str]
    dmg: damage.Damage


def _live_after(run: TablesRun, plans: dict[str, TablePlan], pending: Pending, opts: ExpireOptions) -> _Live:
    """The live set the deletes are checked against, read after the commits: the current
    metadata of every table of the latest version (a dry run: the metadata its plans would write) and
    every retained lakehouse root."""
    files = run.files
    latest, tables = run.reread_latest()
    # Manifests are read only when a candidate is a data or delete file: the other kinds are
    # named by metadata and manifest lists alone.
    contents = any(k in CONTENT_KINDS for k in rules.candidates(plans, pending.tables)[0].values())
    vl = run.version_live(latest, contents)
    current = {t.name: t for t in tables}
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
    dmg = run.assess(list(current.values()), vl, latest)
    if dmg:
        live_tables.update(damage.salvage(files, dmg))  # what a damaged table's readable files share
    return _Live(live_tables, set(vl.files), vl.roots, dmg)


# ---- the plan ---------------------------------------------------------------------------------
def _record_plan(
    run: TablesRun,
    opts: ExpireOptions,
    chosen: list[TableRef],
    plans: dict[str, TablePlan],
    conflicts: int,
    live: _Live,
    split: rules.Split,
    per_table: dict[str, dict[str, Any]],
) -> None:
    """**plan**: the result's counts and details, and ``plan.json``, written before any delete."""
    result = run.result
    result.details["tables"] = per_table
    damage.report(live.dmg, result)
    result.details["lakehouse_roots"] = len(live.roots)
    result.counts.update(
        {
            "tables": len(chosen),
            "tables_changed": sum(1 for p in plans.values() if p.new_metadata),
            "snapshots_expired": sum(len(p.retention.expired) for p in plans.values()),
            "refs_removed": sum(len(p.retention.removed_refs) for p in plans.values()),
            "candidates": len(split.to_delete),
            "deferred": len(split.deferred),
            "held": len(split.held),
            "conflicts_replanned": conflicts,
            "files_read": run.files.reads,
        }
    )
    result.counts.update({f"candidates_{k}": n for k, n in rules.kind_counts(split.to_delete).items()})
    run.write_plan(
        common.EXPIRE_JOB,
        {
            "run_id": result.run_id,
            "dry_run": opts.dry_run,
            "reference_ms": run.now,
            "tables": per_table,
            "delete": sorted(split.to_delete),
            "deferred": sorted(split.deferred),
            "held": sorted(split.held),
            "damaged_tables": live.dmg.to_dict(),
        },
    )
