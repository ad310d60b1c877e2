"""Snapshot export as a job: each phase on the driver (threads) or the executors (``mapInArrow``).

Phases (each timed into ``JobResult.seconds``; placement recorded in ``details["execution"]``):

1. **validate** (driver, nothing written): the name, the target URI (not inside the source,
   nor containing it), the version (``VersionNotFoundError`` when expired), a name clash
   (``AlreadyExistsError``) and the target (empty, or holding only exports of this lakehouse).
2. **plan**: ``<target>/_export/<name>/export.json`` records what is exported; the tree is
   walked level by level. Node files are read (they must be, to find their children): their
   rows carry their exported bytes (rewritten when pointers change), size and MD5, so the copy
   never reads them again. Definition files are *not* read: their rows only say what to copy
   (source, target, kind, depth, action). Rows are deduplicated by target path, cut into parts
   and written as ``plan/part-NNNNN.parquet``; ``plan/_plan.json`` (the index) marks the plan
   complete. The plan is persisted before anything is copied. Each level runs on the driver
   while it is small (`Execution.distributed`) and the driver holds few enough rows
   (`Execution.fits_driver`); past that, the remaining levels and the part writing run on the
   executors and the driver holds only the index of parts.
3. **copy**: per plan part, every file's source is read **once** (nodes: not at all), rewritten
   if planned, hashed (MD5) and created exclusively at the target, then verified. A part whose
   files are all verified gets a result manifest ``copied/part-NNNNN.json`` (target path, size,
   MD5). A re-run verifies the files of manifested parts at the target without reading the
   source; files of unmanifested parts are copied again, and one already at the target is kept
   when it holds exactly the computed bytes (an interrupted run or an earlier export of this
   lakehouse wrote it) and reported as a conflict otherwise: nothing is ever overwritten.
   Failures come back as data, and the driver raises a typed error naming the files. The copy
   runs on the driver's threads or in executor tasks (parts shipped as a DataFrame of names).
   With tables (``with_tables``), the tables' data, delete and statistics files go through the
   same copy (`trinitylake.jobs.export.copy_phase.Copier.copy_parts`, phase ``export.table_copy``:
   the same placement, copy, verification
   and resume) after this one, between their metadata rewrites (`trinitylake.jobs.export.tables`).
4. **verify**: time spent verifying, summed over the files (it happens inline, per file).
   *What is verified*: on S3 a HEAD request after each PUT compares the size and the ETag (the
   MD5 of what the store received) with the MD5 computed while copying. On local storage each
   written file is read back and its size and MD5 compared: mostly from the page cache, so it
   catches what the write path stored other than it was handed (a same-size corruption passes
   a stat), not a later disk fault; about 45 us a small file more than a stat, and a second
   read and hash of a large one (``verify_checksum: false``: a stat only). Files found already
   present (re-runs, incremental exports) are read back and compared in full (or by ETag).
5. **commit**: the exported root ``root_name(V)`` is created last (exclusive), the target's
   ``_latest_hint.txt`` raised to V, and the export recorded in the source's definition by a
   normal commit: ``exported_snapshots[name]`` = full URI of the exported root, plus
   ``exported_snapshot_pins[name]`` = V when the export still references source files (partial
   and minimal exports that did not reach the bottom of the tree).

Every root file stays unwritten until all copies succeeded: a killed export is invisible, and
re-running it (same options, no version) reuses the persisted plan and copies only what is
missing. No SparkContext or RDD is used: the same code runs in classic mode and under Spark
Connect, and a small export never starts Spark at all.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from trinitylake.errors import (
    AlreadyExistsError,
    StorageError,
    ValidationError,
    VersionNotFoundError,
)
from trinitylake.format.node import deserialize, serialize
from trinitylake.format.paths import root_version
from trinitylake.jobs.export import copying as export_copying
from trinitylake.jobs.export import plan as export_plan
from trinitylake.jobs.export import rules as export_rules
from trinitylake.jobs.export import target as export_target
from trinitylake.jobs.export.copy_phase import Copier
from trinitylake.jobs.export.planner import Planner, raise_failures
from trinitylake.lakehouse.roots import check_retained
from trinitylake.runs.results import JobResult
from trinitylake.spark.execution import LOCAL, Execution, as_execution, timed
from trinitylake.storage import Storage, parse_uri
from trinitylake.storage.target_options import resolve_target_options

if TYPE_CHECKING:
    from trinitylake.config import ExportConfig
    from trinitylake.lakehouse import Lakehouse, RootRef
    from trinitylake.util import Session

log = logging.getLogger(__name__)

# ---- driver side -------------------------------------------------------------------------------
def _target_storage(lakehouse: Lakehouse, target_uri: str, options: dict | None) -> Storage:
    if options is not None:
        return Storage(target_uri, options)
    if lakehouse.storage.reaches(target_uri):
        return lakehouse.storage.for_uri(target_uri)
    return Storage(target_uri)


def _cleanup(target: Storage, export_dir: str) -> None:
    try:
        target.delete([f.path for f in target.list(export_dir)])
    except Exception as e:  # noqa: BLE001 - best effort
        log.warning("could not remove %s: %s", target.uri(export_dir), e)


class _Root:
    """The exported root (`root_name(V)`, the one file every mode copies), computed on the driver:
    its pointers now (planning starts from them), its plan row (bytes, serialized when rewritten)
    only when first needed: pyarrow's first array conversion imports pandas (warmed meanwhile)."""

    def __init__(self, ref: RootRef, source: Storage, spec: export_rules.ExportSpec):
        self.ref, self.source, self.spec = ref, source, spec
        try:
            self.data = source.read(ref.path)
        except FileNotFoundError:
            raise VersionNotFoundError(f"version {ref.version} is expired or missing: its root file "
                                       f"{source.uri(ref.path)} is gone") from None
        self.out, self.refs, self.changed = export_rules.export_node(deserialize(self.data, None, source.uri(ref.path)), 0,
                                                          spec, source)
        self._row: export_rules.PlanRow | None = None

    @property
    def row(self) -> export_rules.PlanRow:
        if self._row is None:
            data = serialize(self.out, self.spec.order) if self.changed else self.data
            self._row = export_rules.PlanRow(self.ref.path, self.source.uri(self.ref.path), export_rules.KIND_ROOT, 0,
                                  export_rules.ACTION_REWRITE if self.changed else export_rules.ACTION_COPY, len(data), export_rules.md5_hex(data),
                                  self.refs.external, bytes(data))
        return self._row


class _AlreadyExported(Exception):  # noqa: N818 - a signal within this module, never raised out of it
    """`if_exists: keep` met a finished export of the name, holding another version (its root URI)."""

    def __init__(self, root_uri: str):
        super().__init__(root_uri)
        self.root_uri = root_uri


@dataclass
class _Export:
    """One export run as validated: what every later phase reads."""

    ex: Execution
    lakehouse: Lakehouse
    cfg: ExportConfig
    result: JobResult
    source: Storage
    target: Storage
    state: export_target.TargetState
    recorded: dict[str, Any] | None
    ref: RootRef
    spec: export_rules.ExportSpec
    needs_record: bool
    latest: int
    root: _Root

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def export_dir(self) -> str:
        return self.spec.export_dir

    @property
    def plan_dir(self) -> str:
        return f"{self.spec.export_dir}/plan"


def run_export(spark_or_ex: Execution | Session, lakehouse: Lakehouse, cfg: ExportConfig, result: JobResult, *, target_storage_options: dict | None = None
               ) -> JobResult:
    """Export one version of `lakehouse` to ``cfg.target`` under ``cfg.name`` (see the module doc).

    Args:
        spark_or_ex: the job's `Execution` (placement per phase; Spark starts only when a phase
            goes to the executors), or a SparkSession (every phase on its executors).
        lakehouse: the source `Lakehouse`.
        cfg: the `ExportConfig` (name, target, version, as_of, mode, depth, batch_size,
            verify_checksum, run_id).
        result: the job's result, filled in and returned.
        target_storage_options: fsspec options of the target storage; default: the
            lakehouse's options when the scheme is the same, else the environment.

    Raises:
        ValidationError: bad name, mode or depth; a target that holds something other than
            exports of this lakehouse; an unfinished export of the same name with other options.
        InvalidURIError: the target URI cannot be normalized.
        UnsafeOperationError: the target lies inside the lakehouse or contains it.
        AlreadyExistsError: the name is taken, or the target holds other files under the
            planned names.
        VersionNotFoundError: the version is expired or does not exist (or expired during the export).
    """
    ex = as_execution(spark_or_ex)
    result.details.setdefault("execution", ex.record)
    t_start = time.perf_counter()
    try:
        with timed(result.seconds, "validate"), ex.phase("export.validate", LOCAL, 1, "validating the export"):
            x = _validate(ex, lakehouse, cfg, result, target_storage_options)
    except _AlreadyExported as done:
        return _kept(cfg, result, done.root_uri, t_start)
    _open_target(x)
    # Copy workers (local files, big plans) start during planning; closed whatever happens.
    copier = Copier(ex, x.source, x.target, x.spec, x.result, checksum=cfg.verify_checksum)
    try:
        with timed(result.seconds, "plan"):
            index, resumed = _plan(x, copier)
        planned_files, external = _record_plan(x, index, resumed)
        with timed(result.seconds, "copy"):
            n_files, parts = planned_files - 1, index["parts"]
            total, _ = copier.copy_parts("export.copy", [p["name"] for p in parts], n_files, resumed,
                                         f"export {x.name}: copy {n_files} files ({len(parts)} parts)")
        if x.spec.with_tables:  # copied and rewritten before the root (jobs.export.tables)
            # Imported here: the table phase imports pyiceberg (a second and more to load).
            from trinitylake.jobs.export.tables import export_tables_phase  # only with tables: 1.2 s of Avro imports

            with timed(result.seconds, "tables"):
                export_tables_phase(lakehouse, x.ref, x.source, x.target, cfg, result, ex, x.export_dir,
                                    copier.io_threads, copier.copy_parts)
    finally:
        copier.close()
    with timed(result.seconds, "commit"):
        verify_root, pin, version_after = _commit(x, total, planned_files, external)
    result.counts.update(_counts(total))
    result.bytes.update({"copied": total.copied_bytes, "skipped": total.skipped_bytes,
                         "verified": total.verified_bytes})
    result.seconds["verify"] = round(total.seconds_verify + verify_root, 3)
    result.seconds["total"] = round(time.perf_counter() - t_start, 3)
    result.details.update({"pinned_version": pin, "self_contained": external == 0, "remote": copier.remote,
                           "recorded": x.needs_record, "recorded_in_version": version_after})
    result.status = "succeeded"
    log.info("export %r complete: %s", x.name, {**result.counts, **{f"bytes_{k}": v for k, v in result.bytes.items()}})
    return result


def _kept(cfg: ExportConfig, result: JobResult, root_uri: str, t_start: float) -> JobResult:
    """The result of a run that found its export already done (``if_exists: keep``)."""
    version = root_version(root_uri)
    result.counts.update({"copied": 0, "skipped": 0, "verified": 0, "rewritten": 0, "source_reads": 0})
    result.seconds["total"] = round(time.perf_counter() - t_start, 3)
    result.details.update({"name": cfg.name, "version": version, "root": root_uri, "already_exported": True,
                           "recorded": False})
    result.output_location = root_uri
    result.status = "succeeded"
    log.info("export %r already holds version %s (%s): kept, nothing copied (if_exists: keep)", cfg.name, version,
             root_uri)
    return result


def _validate(ex: Execution, lakehouse: Lakehouse, cfg: ExportConfig, result: JobResult,
              target_storage_options: dict | None) -> _Export:
    """**validate** (nothing written): the name, mode, locations, version, name clash, target
    state, and the exported root (see the module doc)."""
    source: Storage = lakehouse.storage
    name = export_rules.validate_name(cfg.name)
    mode = cfg.mode
    if mode not in export_rules.MODES:
        raise ValidationError(f"export mode must be one of {', '.join(export_rules.MODES)}, got {mode!r}")
    target_uri = parse_uri(cfg.target).uri
    export_target.check_locations(source.root, target_uri)
    latest = lakehouse.latest_version()
    result.version_before = latest
    current_def = lakehouse.load_root(latest).lakehouse_def
    # The target's own options (target_storage_options, TLAKE_TARGET_*); None: it shares the lakehouse's.
    options = resolve_target_options(target_uri, getattr(cfg, "target_storage_options", None), target_storage_options)
    target = _target_storage(lakehouse, target_uri, options)
    state = export_target.inspect_target(target, current_def.id, source.root)
    recorded = state.exports.get(name)
    version, as_of = cfg.version, cfg.as_of
    depth = cfg.depth if mode == "partial" else None
    if (version is None and as_of is None and recorded is not None and recorded.get("mode") == mode
            and recorded.get("depth") == depth):
        # Re-running an export without naming a version continues the one this target
        # holds under that name: an unfinished one (resume after a crash), or the one the
        # source records (an idempotent retry). A dropped, finished one is exported anew.
        rec_root = target.uri(str(recorded.get("root")))
        if recorded.get("status") != "complete" or current_def.exported_snapshots.get(name) == rec_root:
            version = int(recorded["version"])
            log.info("continuing export %r of version %s at %s", name, version, target.root)
    ref = lakehouse.root_at(version=version, as_of=as_of)
    # Expire commits the new floor before it deletes: a version below it may still have its
    # root file while its other files are being deleted. Refuse before copying anything.
    check_retained(current_def, ref.version, f"export {name!r}")
    spec = export_rules.ExportSpec.make(name=name, version=ref.version, mode=mode, depth=depth, source_uri=source.root,
                             target_uri=target.root, source_id=current_def.id, order=ref.lakehouse_def.order,
                             with_tables=cfg.with_tables)
    try:
        needs_record = export_target.check_name_free(current_def, name, spec.root_uri)
    except AlreadyExistsError:
        existing = current_def.exported_snapshots[name]
        if getattr(cfg, "if_exists", "fail") != "keep" or not existing.startswith(target.root.rstrip("/") + "/"):
            raise
        # A finished export of this name at this target, of another version (a second run on a
        # scheduled export's day): it counts as done. Nothing is copied, nothing overwritten.
        raise _AlreadyExported(existing) from None
    if recorded is not None and not spec.same_export(recorded):
        raise ValidationError(
            f"the target already holds an export named {name!r} of version {recorded.get('version')} "
            f"({recorded.get('mode')}, depth {recorded.get('depth')}), not version {spec.version} ({mode}); "
            f"re-run with the same options to finish it, or pick another name"
        )
    root = _Root(ref, source, spec)
    if not state.empty and export_copying.verify_file(target, spec.root_path, root.row.size, root.row.md5, True) == export_copying.MISMATCH:
        raise AlreadyExistsError(
            f"the target already holds a different root file for version {spec.version} "
            f"({target.uri(spec.root_path)}, from another export of that version); export to another "
            f"location"
        )
    return _Export(ex, lakehouse, cfg, result, source, target, state, recorded, ref, spec, needs_record, latest, root)


def _open_target(x: _Export) -> None:
    """What the export is, into the result; a new local target's folders spread first."""
    spec, result, target, mode = x.spec, x.result, x.target, x.spec.mode
    result.details.update({"name": x.name, "version": spec.version, "mode": mode,
                           "depth": spec.depth if mode == "partial" else None,
                           "target": target.root, "root": spec.root_uri, "source_id": spec.source_id})
    result.output_location = spec.root_uri
    result.plan_location = target.uri(x.export_dir)
    if x.state.empty:
        # Before the first folder is made in it: see dir_spread (20 s vs 2 s for 21k files on
        # ext4 without a journal, after a mass delete nearby).
        target.spread_new_tree()


def _plan(x: _Export, copier: Copier) -> tuple[dict[str, Any], bool]:
    """**plan**: the persisted plan (resumed when this target holds a complete one of this
    export, whose root must still be ours), or a new one; returns (its index, resumed)."""
    target, plan_dir, export_dir, root = x.target, x.plan_dir, x.export_dir, x.root
    index = export_plan.read_json(target, f"{plan_dir}/_plan.json") if x.recorded is not None else None
    if index is not None and index.get("format") != export_rules.FORMAT_TAG:
        index = None
    if index is not None:
        if index["root"]["md5"] != root.row.md5:
            raise StorageError(f"root file {x.source.uri(x.ref.path)} no longer matches the persisted plan of export "
                               f"{x.name!r}; the source was modified")
        return index, True
    created_here = x.recorded is None
    target.write(f"{export_dir}/export.json",
                 export_plan.json_bytes({**x.spec.describe(), "status": "planning", "run_id": x.cfg.run_id,
                                "started_at": datetime.now(UTC).isoformat()}))
    try:
        index = Planner(x.ex, x.source, target, x.spec, plan_dir, x.cfg.batch_size, copier.io_threads,
                        on_level=copier.expect).run(x.ref, root.refs)
    except BaseException:
        if created_here:
            _cleanup(target, export_dir)
        raise
    index.update({"format": export_rules.FORMAT_TAG, "root": {"path": x.spec.root_path, "size": root.row.size,
                                                   "md5": root.row.md5, "external": root.refs.external,
                                                   "action": root.row.action}})
    target.write(f"{plan_dir}/_plan.json", export_plan.json_bytes(index))
    return index, False


def _record_plan(x: _Export, index: dict[str, Any], resumed: bool) -> tuple[int, int]:
    """The plan's counts, into the result; returns (planned files, external references)."""
    parts, result = index["parts"], x.result
    planned_files = sum(p["rows"] for p in parts) + 1
    external = sum(p["external"] for p in parts) + x.root.refs.external
    result.counts.update({"planned": planned_files, "batches": len(parts),
                          "rewritten_planned": sum(p["rewritten"] for p in parts) + int(x.root.row.action
                                                                                       == export_rules.ACTION_REWRITE),
                          "unsized_planned": sum(p.get("unsized", 0) for p in parts),
                          "external_refs": external})
    result.details["resumed"] = resumed
    log.info("export %r: plan %s with %d files in %d parts (%s)", x.name, x.target.uri(x.plan_dir), planned_files,
             len(parts), "resumed" if resumed else "new")
    return planned_files, external


def _commit(x: _Export, total: export_copying.CopyStats, planned_files: int, external: int) -> tuple[float, int | None, int | None]:
    """**commit**: the root last, the target's hint, then the record in the source (a normal
    commit) and the export's own record; returns (seconds verifying the root, the pinned
    version, the source version that records the export)."""
    spec, target, result, name, mode = x.spec, x.target, x.result, x.name, x.spec.mode
    t = time.perf_counter()
    root_stats, _ = export_copying.copy_one(x.root.row, x.source, target, spec, checksum=True)
    raise_failures(root_stats.missing_sources, root_stats.errors, root_stats.conflicts, f"export {name!r}",
                   spec.version)
    total.add(root_stats)
    verify_root = time.perf_counter() - t
    export_target.update_hint(target, spec.version)
    pin = spec.version if (mode != "full" and external > 0) else None
    planned_bytes = total.copied_bytes + total.skipped_bytes
    result.bytes["planned"] = planned_bytes
    version_after = None
    if x.needs_record:
        txn = x.lakehouse.begin()
        txn.mutate_definition(export_target.record_export(name, spec.root_uri, pin),
                              f"export {name} (version {spec.version}, {mode})")
        result.counts.update(_counts(total))
        version_after = txn.commit(command="export", arguments={"name": name, "target": target.root,
                                                                "version": spec.version, "mode": mode,
                                                                "depth": spec.depth if mode == "partial" else None},
                                   metrics=result.metrics())
    else:
        log.info("export %r was already recorded in the source; nothing to commit", name)
        version_after = _recorded_in(target, x.export_dir)  # a re-run keeps what the first run recorded
    result.version_after = version_after if version_after is not None else x.latest
    try:
        target.write(f"{x.export_dir}/export.json",
                     export_plan.json_bytes({**spec.describe(), "status": "complete", "run_id": x.cfg.run_id,
                                    "completed_at": datetime.now(UTC).isoformat(), "pinned_version": pin,
                                    "files": planned_files, "bytes": planned_bytes,
                                    "recorded_in_version": version_after}))
    except Exception as e:  # noqa: BLE001 - bookkeeping only; the export is complete
        log.warning("could not update %s: %s", target.uri(f"{x.export_dir}/export.json"), e)
    if spec.with_tables:  # nothing at the target names the source (jobs.export.tables)
        from trinitylake.jobs.export.tables import seal_export_records  # only with tables: 1.2 s of Avro imports

        seal_export_records(target, x.export_dir, x.source)
    return verify_root, pin, version_after


def _counts(total: export_copying.CopyStats) -> dict[str, int]:
    return {"copied": total.copied, "skipped": total.skipped, "verified": total.verified,
            "rewritten": total.rewritten, "source_reads": total.source_reads}


def _recorded_in(target: Storage, export_dir: str) -> int | None:
    """The source version that recorded the export, from the manifest an earlier run wrote."""
    try:
        v = json.loads(target.read(f"{export_dir}/export.json")).get("recorded_in_version")
    except (OSError, ValueError):
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


