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
   same copy (`copy_parts`, phase ``export.table_copy``: the same placement, copy, verification
   and resume) after this one, between their metadata rewrites (`trinitylake.jobs.export.tables`).
4. **verify**: time spent verifying, summed over the files (it happens inline, per file).
   *What is verified*: on S3 a HEAD request after each PUT compares the size and the ETag (the
   MD5 of what the store received) with the MD5 computed while copying. On local storage a stat
   compares the size, and the checksum is that of the bytes handed to the exclusive create:
   re-reading a file just written would only read our own page cache back, at the price of a
   second read of every file. Files found already present (re-runs, incremental exports) are
   read back and compared in full (or by ETag).
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

import functools
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trinitylake import progress
from trinitylake.errors import (
    AlreadyExistsError,
    StorageError,
    ValidationError,
    VersionNotFoundError,
)
from trinitylake.format.node import deserialize, serialize
from trinitylake.jobs.export import copying as XC
from trinitylake.jobs.export import plan as XP
from trinitylake.jobs.export import rules as X
from trinitylake.jobs.export import target as XT
from trinitylake.jobs.export.copying import copy_part as _copy_part
from trinitylake.jobs.export.planner import Planner, pool_map, raise_failures
from trinitylake.lakehouse.roots import check_retained
from trinitylake.maintenance.results import JobResult
from trinitylake.spark.execution import AUTO, DISTRIBUTED, LOCAL, Execution, as_execution, batch_of, ddl, rows_of
from trinitylake.storage import Storage, parse_uri, requests
from trinitylake.storage.dir_spread import spread_subdirectories
from trinitylake.storage.local_files import LocalFiles

if TYPE_CHECKING:
    from trinitylake.config import ExportConfig
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.util import Session

log = logging.getLogger(__name__)

#: Parts copied at once by a driver-local copy (their files share the driver's thread pool).
LOCAL_PARTS_IN_FLIGHT = 4
#: A driver-local copy of local files with at least this many files runs its plan parts in
#: worker processes (one per core): copying small files is per-file Python plus system calls,
#: so one process is bound by the interpreter (threads only add GIL contention; see
#: `run_export`). 21k files here: 1 process ~2.5 s of copy, worker start ~0.4 s.
LOCAL_PROCESS_MIN_FILES = 4096
#: At most this many copy processes (a local disk saturates long before).
LOCAL_PROCESSES_MAX = 8
STATS_SCHEMA = pa.schema([("name", pa.string()), ("stats", pa.string())])


# ---- copy --------------------------------------------------------------------------------------
def _copy_batches(source: Storage, target: Storage, spec: X.ExportSpec, export_dir: str, checksum: bool,
                  resumed: bool, io_threads: int, batches: Iterator[pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of the copy: plan part names in, one stats row per part out."""
    src, tgt = LocalFiles.of(source), LocalFiles.of(target)
    pmap, close = pool_map(io_threads)
    try:
        for (name,) in rows_of(batches, "name"):
            before = requests.snapshot()
            st = _copy_part(name, src, tgt, spec, export_dir, checksum, resumed, pmap)
            st.requests = requests.since(before)
            yield batch_of(STATS_SCHEMA, [[name], [json.dumps(st.to_dict())]])
    finally:
        close()


def copy_processes(n_files: int, n_parts: int, source: Storage, target: Storage) -> int:
    """How many worker processes a driver-local copy uses: 0 (the driver's own threads) unless
    both sides are local files, the copy is big and the machine has several cores."""
    cores = os.cpu_count() or 1
    if (n_files < LOCAL_PROCESS_MIN_FILES or cores < 2 or n_parts < 2 or source.scheme != "file"
            or target.scheme != "file"):
        return 0
    return min(cores, n_parts, LOCAL_PROCESSES_MAX)


def _copy_processes(pool: Any, names: list[str], source: Storage, target: Storage, spec: X.ExportSpec,
                    export_dir: str, checksum: bool, resumed: bool) -> XC.CopyStats:
    """Copy on the driver machine with the worker processes of `pool` (`CopyWorkers`), one plan
    part at a time each (the same `_copy_part` as the executors and the threads run)."""
    total = XC.CopyStats()
    for d in pool.map(names, (source, target, spec, export_dir, checksum, resumed)):
        st = XC.CopyStats.from_dict(d)
        total.add(st)
        progress.advance(st.rows)
    return total


class _Workers:
    """The copy's worker processes, started as soon as the plan is expected to be big (during
    planning, so that their start overlaps it), or at the copy; closed by `close`."""

    def __init__(self, source: Storage, target: Storage, allowed: bool):
        self.source, self.target, self.allowed = source, target, allowed
        self.pool: Any = None

    def expect(self, files: int) -> None:
        """The plan will hold about `files` files (`Planner` calls this after each level)."""
        if self.pool is None and self.allowed:
            n = copy_processes(files, LOCAL_PROCESSES_MAX, self.source, self.target)
            if n:
                self.pool = self._start(n)

    def take(self, n: int) -> Any:
        """A pool of `n` workers, or None when no worker process can be started here (an
        embedded interpreter without ``sys.executable``): the copy then runs on threads."""
        if self.pool is not None and self.pool.size != n:
            self.close()
        if self.pool is None and self.allowed:
            self.pool = self._start(n)
        return self.pool

    def _start(self, n: int) -> Any:
        from trinitylake.jobs.export.copy_workers import CopyWorkers

        try:
            return CopyWorkers(n)
        except StorageError as e:
            self.allowed = False
            log.warning("export copy stays on the driver's threads: %s", e)
            return None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


# ---- driver side -------------------------------------------------------------------------------
def _target_storage(lakehouse: Lakehouse, target_uri: str, options: dict | None) -> Storage:
    if options is not None:
        return Storage(target_uri, options)
    if lakehouse.storage.reaches(target_uri):
        return lakehouse.storage.for_uri(target_uri)
    return Storage(target_uri)


class _Phase:
    def __init__(self, result: JobResult, name: str):
        self.result, self.name = result, name

    def __enter__(self) -> _Phase:
        self.t = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.result.seconds[self.name] = round(self.result.seconds.get(self.name, 0.0) + time.perf_counter() - self.t, 3)


def _cleanup(target: Storage, export_dir: str) -> None:
    try:
        target.delete([f.path for f in target.list(export_dir)])
    except Exception as e:  # noqa: BLE001 - best effort
        log.warning("could not remove %s: %s", target.uri(export_dir), e)


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
    source: Storage = lakehouse.storage
    batch = cfg.batch_size
    checksum = cfg.verify_checksum
    run_id = cfg.run_id

    # ---- validate (nothing written) ----------------------------------------------------------
    with _Phase(result, "validate"), ex.phase("export.validate", LOCAL, 1, "validating the export"):
        name = X.validate_name(cfg.name)
        mode = cfg.mode
        if mode not in X.MODES:
            raise ValidationError(f"export mode must be one of {', '.join(X.MODES)}, got {mode!r}")
        target_uri = parse_uri(cfg.target).uri
        XT.check_locations(source.root, target_uri)
        latest = lakehouse.latest_version()
        result.version_before = latest
        current_def = lakehouse.load_root(latest).lakehouse_def
        target = _target_storage(lakehouse, target_uri, target_storage_options)
        state = XT.inspect_target(target, current_def.id, source.root)
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
        spec = X.ExportSpec.make(name=name, version=ref.version, mode=mode, depth=depth, source_uri=source.root,
                                 target_uri=target.root, source_id=current_def.id, order=ref.lakehouse_def.order,
                                 with_tables=cfg.with_tables)
        needs_record = XT.check_name_free(current_def, name, spec.root_uri)
        if recorded is not None and not spec.same_export(recorded):
            raise ValidationError(
                f"the target already holds an export named {name!r} of version {recorded.get('version')} "
                f"({recorded.get('mode')}, depth {recorded.get('depth')}), not version {spec.version} ({mode}); "
                f"re-run with the same options to finish it, or pick another name"
            )
        # The exported root, computed on the driver (the one file every mode copies).
        try:
            root_data = source.read(ref.path)
        except FileNotFoundError:
            raise VersionNotFoundError(f"version {ref.version} is expired or missing: its root file "
                                       f"{source.uri(ref.path)} is gone") from None
        # Its pointers now (planning starts from them); its bytes (serialized, when rewritten)
        # only when needed: pyarrow's first array conversion imports pandas (warmed meanwhile).
        root_out, root_refs, root_changed = X.export_node(deserialize(root_data, None, source.uri(ref.path)), 0,
                                                          spec, source)

        def make_root_row() -> X.PlanRow:
            data = serialize(root_out, spec.order) if root_changed else root_data
            return X.PlanRow(ref.path, source.uri(ref.path), X.KIND_ROOT, 0,
                             X.ACTION_REWRITE if root_changed else X.ACTION_COPY, len(data), X.md5_hex(data),
                             root_refs.external, bytes(data))

        root_row = None
        if not state.empty:
            root_row = make_root_row()
            if XC.verify_file(target, spec.root_path, root_row.size, root_row.md5, True) == XC.MISMATCH:
                raise AlreadyExistsError(
                    f"the target already holds a different root file for version {spec.version} "
                    f"({target.uri(spec.root_path)}, from another export of that version); export to another "
                    f"location"
                )
    result.details.update({"name": name, "version": spec.version, "mode": mode,
                           "depth": spec.depth if mode == "partial" else None,
                           "target": target.root, "root": spec.root_uri, "source_id": spec.source_id})
    result.output_location = spec.root_uri
    export_dir = spec.export_dir
    plan_dir = f"{export_dir}/plan"
    result.plan_location = target.uri(export_dir)
    target_dir = target.local_path("")
    if state.empty and target_dir is not None:
        # Before the first folder is made in it: see dir_spread (20 s vs 2 s for 21k files on
        # ext4 without a journal, after a mass delete nearby).
        spread_subdirectories(target_dir)
    remote = not source.is_local or not target.is_local
    # Local to local: `local_threads` (one by default: 16 threads copied 21k files in 12.0 s
    # here, one in 9.1 s; threads only hide latency).
    io_threads = ex.limits.io_threads(source, target)

    # Copy workers (local files, big plans) start during planning; closed whatever happens.
    workers = _Workers(source, target, allowed=ex.mode != DISTRIBUTED)
    remote_side = target if target.scheme != "file" else source
    per_file = (source.scheme != "file") + (target.scheme != "file")

    def on_level(files: int) -> None:
        """After each planned level, with the files the plan is expected to hold: start what
        the copy will need, so that it starts while planning goes on (worker processes for a
        big local copy; the Spark session when the copy will go to the executors)."""
        workers.expect(files)
        if ex.mode == AUTO and per_file and ex.distributed(files, storage=remote_side, requests_per_item=per_file):
            ex.prestart()

    try:
        # ---- plan ----------------------------------------------------------------------------
        with _Phase(result, "plan"):
            index = XP.read_json(target, f"{plan_dir}/_plan.json") if recorded is not None else None
            if index is not None and index.get("format") != X.FORMAT_TAG:
                index = None
            resumed = index is not None
            if not resumed:
                created_here = recorded is None
                target.write(f"{export_dir}/export.json",
                             XP.json_bytes({**spec.describe(), "status": "planning", "run_id": run_id,
                                           "started_at": datetime.now(UTC).isoformat()}))
                try:
                    index = Planner(ex, source, target, spec, plan_dir, batch, io_threads,
                                    on_level=on_level).run(ref, root_refs)
                except BaseException:
                    if created_here:
                        _cleanup(target, export_dir)
                    raise
                root_row = root_row or make_root_row()
                index.update({"format": X.FORMAT_TAG, "root": {"path": spec.root_path, "size": root_row.size,
                                                               "md5": root_row.md5, "external": root_refs.external,
                                                               "action": root_row.action}})
                target.write(f"{plan_dir}/_plan.json", XP.json_bytes(index))
            elif index is not None and index["root"]["md5"] != (root_row := root_row or make_root_row()).md5:
                raise StorageError(f"root file {source.uri(ref.path)} no longer matches the persisted plan of export "
                                   f"{name!r}; the source was modified")
        # Planned above, or read back from the persisted plan (and its root checked against ours).
        assert index is not None and root_row is not None
        parts = index["parts"]
        planned_files = sum(p["rows"] for p in parts) + 1
        external = sum(p["external"] for p in parts) + root_refs.external
        result.counts.update({"planned": planned_files, "batches": len(parts),
                              "rewritten_planned": sum(p["rewritten"] for p in parts) + int(root_row.action
                                                                                           == X.ACTION_REWRITE),
                              "unsized_planned": sum(p.get("unsized", 0) for p in parts),
                              "external_refs": external})
        result.details["resumed"] = resumed
        log.info("export %r: plan %s with %d files in %d parts (%s)", name, target.uri(plan_dir), planned_files,
                 len(parts), "resumed" if resumed else "new")

        # ---- copy ------------------------------------------------------------------------------
        def copy_parts(phase: str, names: list[str], n_files: int, resumed: bool, what: str
                       ) -> tuple[XC.CopyStats, str]:
            """Copy plan parts where the placement puts `n_files` files; raises a typed error for
            any failed file. The export's own files and, with tables, the tables' data files
            (`trinitylake.jobs.export.tables`) both go through here."""
            # Per copied file one GET of the source (node files come with their bytes in the
            # plan) and one conditional PUT, verified by the PUT's ETag: on an object store
            # `auto` compares estimated times (the remote side's latency).
            where = DISTRIBUTED if ex.distributed(n_files, storage=remote_side, requests_per_item=per_file,
                                                  phase=phase) else LOCAL
            copy = functools.partial(_copy_part, source=source, target=target, spec=spec, export_dir=export_dir,
                                     checksum=checksum, resumed=resumed)
            n_procs = copy_processes(n_files, len(names), source, target)
            if where == DISTRIBUTED and ex.mode == AUTO and n_procs and ex.executors_share_the_driver():
                # Local files, executors on these same cores: the driver's worker processes
                # copied 1.05M files in 163-165 s, Spark local[2] tasks in 217 s (per-task and
                # Arrow costs, no extra hardware). A cluster's executors keep the copy.
                where = LOCAL
            with ex.phase(phase, where, n_files, what):
                pool = workers.take(n_procs) if where == LOCAL and n_procs else None
                if pool is not None:
                    result.details["copy_processes"] = n_procs
                    total = _copy_processes(pool, names, source, target, spec, export_dir, checksum, resumed)
                    workers.close()
                elif where == LOCAL:
                    total = _copy_local(names, copy, source, target, io_threads)
                else:
                    total = _copy_distributed(ex, names, source, target, spec, export_dir, checksum, resumed,
                                              io_threads)
            raise_failures(total.missing_sources, total.errors, total.conflicts, f"export {name!r}", spec.version)
            if total.rows != n_files:
                raise StorageError(f"export {name!r}: copied {total.rows} planned files, the plan holds {n_files}")
            return total, where

        with _Phase(result, "copy"):
            n_files = planned_files - 1
            total, _ = copy_parts("export.copy", [p["name"] for p in parts], n_files, resumed,
                                  f"export {name}: copy {n_files} files ({len(parts)} parts)")

        # ---- tables (with_tables): copied and rewritten before the root (jobs.export.tables) ---------
        if spec.with_tables:
            from trinitylake.jobs.export.tables import export_tables_phase

            with _Phase(result, "tables"):
                export_tables_phase(lakehouse, ref, source, target, cfg, result, ex, export_dir, io_threads,
                                    copy_parts)
    finally:
        workers.close()


    # ---- commit: the root last, then the record in the source -----------------------------------
    with _Phase(result, "commit"):
        t = time.perf_counter()
        root_stats, _ = XC.copy_one(root_row, source, target, spec, checksum=True)
        raise_failures(root_stats.missing_sources, root_stats.errors, root_stats.conflicts, f"export {name!r}",
                        spec.version)
        total.add(root_stats)
        verify_root = time.perf_counter() - t
        XT.update_hint(target, spec.version)
        pin = spec.version if (mode != "full" and external > 0) else None
        planned_bytes = total.copied_bytes + total.skipped_bytes
        result.bytes["planned"] = planned_bytes
        version_after = None
        if needs_record:
            txn = lakehouse.begin()
            txn.mutate_definition(XT.record_export(name, spec.root_uri, pin),
                                  f"export {name} (version {spec.version}, {mode})")
            result.counts.update(_counts(total))
            version_after = txn.commit(command="export", arguments={"name": name, "target": target.root,
                                                                    "version": spec.version, "mode": mode,
                                                                    "depth": spec.depth if mode == "partial" else None},
                                       metrics=result.metrics())
        else:
            log.info("export %r was already recorded in the source; nothing to commit", name)
            version_after = _recorded_in(target, export_dir)  # a re-run keeps what the first run recorded
        result.version_after = version_after if version_after is not None else latest
        try:
            target.write(f"{export_dir}/export.json",
                         XP.json_bytes({**spec.describe(), "status": "complete", "run_id": run_id,
                                       "completed_at": datetime.now(UTC).isoformat(), "pinned_version": pin,
                                       "files": planned_files, "bytes": planned_bytes,
                                       "recorded_in_version": version_after}))
        except Exception as e:  # noqa: BLE001 - bookkeeping only; the export is complete
            log.warning("could not update %s: %s", target.uri(f"{export_dir}/export.json"), e)
        if spec.with_tables:  # nothing at the target names the source (jobs.export.tables)
            from trinitylake.jobs.export.tables import seal_export_records

            seal_export_records(target, export_dir, source)

    result.counts.update(_counts(total))
    result.bytes.update({"copied": total.copied_bytes, "skipped": total.skipped_bytes,
                         "verified": total.verified_bytes})
    result.seconds["verify"] = round(total.seconds_verify + verify_root, 3)
    result.seconds["total"] = round(time.perf_counter() - t_start, 3)
    result.details.update({"pinned_version": pin, "self_contained": external == 0, "remote": remote,
                           "recorded": needs_record, "recorded_in_version": version_after})
    result.status = "succeeded"
    log.info("export %r complete: %s", name, {**result.counts, **{f"bytes_{k}": v for k, v in result.bytes.items()}})
    return result


def _counts(total: XC.CopyStats) -> dict[str, int]:
    return {"copied": total.copied, "skipped": total.skipped, "verified": total.verified,
            "rewritten": total.rewritten, "source_reads": total.source_reads}


def _copy_local(names: list[str], copy: Callable[..., XC.CopyStats], source: Storage, target: Storage, threads: int
                ) -> XC.CopyStats:
    """Copy on the driver: up to `LOCAL_PARTS_IN_FLIGHT` parts at once, their files on one thread pool."""
    src, tgt = LocalFiles.of(source), LocalFiles.of(target)
    total = XC.CopyStats()
    pmap, close = pool_map(threads)
    try:
        k = max(1, min(LOCAL_PARTS_IN_FLIGHT, len(names)))
        if k == 1:
            for nm in names:
                st = copy(nm, source=src, target=tgt, pmap=pmap)
                total.add(st)
                progress.advance(st.rows)
        else:
            with ThreadPoolExecutor(max_workers=k) as outer:
                for st in outer.map(lambda nm: copy(nm, source=src, target=tgt, pmap=pmap), names):
                    total.add(st)
                    progress.advance(st.rows)
    finally:
        close()
    return total


def _recorded_in(target: Storage, export_dir: str) -> int | None:
    """The source version that recorded the export, from the manifest an earlier run wrote."""
    try:
        v = json.loads(target.read(f"{export_dir}/export.json")).get("recorded_in_version")
    except (OSError, ValueError):
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _copy_distributed(ex: Execution, names: list[str], source: Storage, target: Storage, spec: X.ExportSpec,
                      export_dir: str, checksum: bool, resumed: bool, io_threads: int) -> XC.CopyStats:
    """Copy on the executors: a DataFrame of part names, ``mapInArrow`` copies each part."""
    total = XC.CopyStats()

    def run(chunk: list[str]) -> None:
        if not chunk:
            return
        table = pa.table({"idx": pa.array(range(len(chunk)), pa.int64()), "name": pa.array(chunk, pa.string())})
        fn = functools.partial(_copy_batches, source, target, spec, export_dir, checksum, resumed, io_threads)
        parts = ex.partitions(len(chunk), 1)
        df = ex.to_df(table).repartition(parts, "idx") if parts > 1 else ex.to_df(table).coalesce(1)
        try:
            rows = df.mapInArrow(fn, ddl(STATS_SCHEMA)).collect()
        except Exception as e:  # noqa: BLE001 - a lost executor or worker arrives wrapped; name the outcome plainly
            first = str(e).strip().splitlines()[0][:500] if str(e).strip() else type(e).__name__
            raise StorageError(f"the export copy job failed ({first}); the files copied so far stay, re-run the "
                               "export to finish it") from e
        for r in rows:
            st = XC.CopyStats.from_dict(json.loads(r["stats"]))
            ex.add_executor_requests(st.requests)
            total.add(st)
            progress.advance(st.rows)

    run(names)
    return total


