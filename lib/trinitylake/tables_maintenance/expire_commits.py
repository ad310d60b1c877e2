"""An expiry's commits: each batch of tables planned on its current metadata (the snapshots
`trinitylake.tables_maintenance.retention` keeps, the files the removed ones alone reach) and
committed as one lakehouse version through the catalog; a conflict re-plans the batch, so a
concurrent writer's commit is never lost. The candidates are added to the pending file before
the commit (`trinitylake.tables_maintenance.state`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io import PY_IO_IMPL
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.table.update import AssertTableUUID, RemoveSnapshotRefUpdate, RemoveSnapshotsUpdate

from trinitylake.errors import TransactionConflictError
from trinitylake.iceberg.catalog import STORAGE_PREFIX, TrinityLakeCatalog
from trinitylake.tables_maintenance.expire_rules import ExpireOptions, TablePlan
from trinitylake.tables_maintenance.files import METADATA, metadata_log
from trinitylake.tables_maintenance.live import table_live
from trinitylake.tables_maintenance.retention import plan_retention

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.update import TableUpdate

    from trinitylake.iceberg.multi_table import MultiTableTransaction
    from trinitylake.tables_maintenance.files import TableFiles
    from trinitylake.tables_maintenance.live import TableRef
    from trinitylake.tables_maintenance.run import TablesRun
    from trinitylake.tables_maintenance.state import Pending

log = logging.getLogger(__name__)


def job_catalog(run: TablesRun, properties: dict[str, str] | None = None) -> TrinityLakeCatalog:
    """The catalog the commits go through: `TrinityLakeCatalog` on the run's own lakehouse
    (its commits carry the job's audit context and parent seq), the tables' files through the
    FileIO of the run's reads, unless `properties` (PyIceberg catalog properties) name a FileIO
    or S3 properties of their own."""
    lakehouse = run.lakehouse
    props = properties or {}
    catalog = TrinityLakeCatalog("tables-maintenance", **{
        "lakehouse": lakehouse.uri,
        "audit": "false",
        **{f"{STORAGE_PREFIX}{k}": v for k, v in (lakehouse.storage.options or {}).items() if isinstance(v, str)},
        **props,
    })
    catalog.lakehouse = lakehouse
    if not any(k == PY_IO_IMPL or k.startswith(("s3.", "client.")) for k in props):
        catalog.io = run.files.io
    return catalog


def commit_batch(
    run: TablesRun,
    catalog: TrinityLakeCatalog,
    refs: list[TableRef],
    opts: ExpireOptions,
    pending: Pending,
    parsed: dict[str, TableMetadata],
) -> tuple[dict[str, TablePlan], int]:
    """Plan and commit one batch of tables as one lakehouse version; a conflict re-plans the
    whole batch on the tables' new metadata. Returns the plans and the number of re-plans.

    The batch's tables are loaded at once from the metadata the run has read (`parsed`: by
    location, parsed once for every attempt), and its new metadata files written together at
    the commit (``write_later``)."""
    files = run.files
    for attempt in range(1, opts.max_attempts + 1):
        mtx: MultiTableTransaction = catalog.multi_table_transaction(write_later=True)
        try:
            for r in refs:
                if r.metadata not in parsed and r.metadata in files.metadata:
                    parsed[r.metadata] = TableMetadataUtil.parse_obj(files.metadata[r.metadata])
            mtx.load_tables([r.key for r in refs], parsed)
            plans = {r.name: p for r in refs if (p := _plan_table(mtx, files, r, opts, run.now)) is not None}
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
            pending.save(run.storage)  # before the commit: a killed run's next run finds them
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
