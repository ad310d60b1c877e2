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
import math
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from trinitylake.errors import (
    AlreadyExistsError,
    CorruptDefinitionError,
    CorruptNodeError,
    StorageError,
    TrinityLakeError,
    ValidationError,
    VersionNotFoundError,
)
from trinitylake.format.node import deserialize, serialize
from trinitylake.maintenance import export_plan as X
from trinitylake.maintenance.results import JobResult
from trinitylake.spark.execution import DISTRIBUTED, LOCAL, Execution, as_execution, batch_of, chunks, rows_of
from trinitylake.storage import Storage, parse_uri
from trinitylake.storage.local_files import LocalFiles

log = logging.getLogger(__name__)

#: Plan part size on the driver: parts are the unit of resume there, not of parallelism (the
#: driver's threads copy files of several parts at once), and every part costs two small files.
LOCAL_PART_ROWS = 1024
#: Parts copied at once by a driver-local copy (their files share the driver's thread pool).
LOCAL_PARTS_IN_FLIGHT = 4
#: Node files read per chunk inside one executor task (bounds a task's memory).
_CHUNK = 256
#: A tree deeper than this is corrupt (a cycle of node pointers); the walk stops.
MAX_DEPTH = 256

LEVEL_SCHEMA = pa.schema([("role", pa.string()), ("target", pa.string()), ("kind", pa.string()),
                          ("depth", pa.int32()), ("action", pa.string()), ("size", pa.int64()), ("md5", pa.string()),
                          ("external", pa.int32()), ("data", pa.binary()), ("error", pa.string())])
FRONTIER_SCHEMA = pa.schema([("target", pa.string()), ("depth", pa.int32())])
PARTS_SCHEMA = pa.schema([("idx", pa.int64()), ("name", pa.string())])
SUMMARY_SCHEMA = pa.schema([("name", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()),
                            ("unsized", pa.int64()), ("rewritten", pa.int64()), ("external", pa.int64())])
STATS_SCHEMA = pa.schema([("name", pa.string()), ("stats", pa.string())])
ROLE_NODE, ROLE_CHILD, ROLE_ODF, ROLE_MISSING, ROLE_ERROR = "node", "child", "odf", "missing", "error"

_DDL = {pa.string(): "string", pa.int64(): "bigint", pa.int32(): "int", pa.binary(): "binary", pa.bool_(): "boolean"}


def _ddl(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {_DDL[f.type]}" for f in schema)


class InjectedFailure(RuntimeError):
    """Raised by the fault-injection hook of the tests (a simulated crash mid-copy)."""


def _pool_map(threads: int) -> tuple[Callable[[Callable, list], list], Callable[[], None]]:
    """A map over a thread pool (sequential for one thread) and its shutdown."""
    if threads <= 1:
        return (lambda fn, items: [fn(i) for i in items]), (lambda: None)
    pool = ThreadPoolExecutor(max_workers=threads)
    return (lambda fn, items: list(pool.map(fn, items)) if len(items) > 1 else [fn(i) for i in items]), pool.shutdown


# ---- plan: one level of nodes ------------------------------------------------------------------
def _expand(source: Storage, spec: X.ExportSpec, pmap, items: list[tuple[str, int]]) -> list[tuple]:
    """Read and plan node files ``(path, depth)``: `LEVEL_SCHEMA` tuples (the node's row, its
    children to copy, the definition files it references, or what went wrong)."""

    def one(item: tuple[str, int]) -> list[tuple]:
        path, depth = item
        try:
            row, refs = X.plan_node(source, path, depth, spec)
        except FileNotFoundError as e:
            return [(ROLE_MISSING, path, X.KIND_NODE, depth, "", -1, "", 0, None, str(e))]
        except TrinityLakeError as e:
            return [(ROLE_ERROR, path, X.KIND_NODE, depth, "", -1, "", 0, None, f"{type(e).__name__}: {e}")]
        out = [(ROLE_NODE, row.target, row.kind, row.depth, row.action, row.size, row.md5, row.external, row.data,
                None)]
        out += [(ROLE_CHILD, c, X.KIND_NODE, depth + 1, "", -1, "", 0, None, None) for c in refs.children]
        out += [(ROLE_ODF, p, X.KIND_ODF, depth, X.ACTION_COPY, -1, "", 0, None, None) for p in refs.odfs]
        return out

    return [t for part in pmap(one, items) for t in part]


def _level_batches(source: Storage, spec: X.ExportSpec, io_threads: int, batches: Iterator[pa.RecordBatch]
                   ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of one plan level: frontier (target, depth) in, `LEVEL_SCHEMA` out."""
    src = LocalFiles.of(source)
    pmap, close = _pool_map(io_threads)
    try:
        for chunk in chunks(rows_of(batches, "target", "depth"), _CHUNK):
            out = _expand(src, spec, pmap, chunk)
            yield batch_of(LEVEL_SCHEMA, list(zip(*out, strict=True)) if out else [[] for _ in LEVEL_SCHEMA])
    finally:
        close()


def _failure(missing: list[str], errors: list[str], what: str, version: int) -> None:
    _raise_failures(missing, errors, [], what, version)


# ---- plan: parts ------------------------------------------------------------------------------
def _write_part(target: Storage, plan_dir: str, name: str, rows: list[X.PlanRow]) -> dict[str, Any]:
    target.write(f"{plan_dir}/{name}", X.plan_part_bytes(rows))
    return X.part_summary(name, rows)


def _part_batches(target: Storage, plan_dir: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function writing one plan part per partition (rows sorted by target)."""
    from pyspark import TaskContext

    tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    if not tables:
        return
    table = pa.concat_tables(tables)
    rows = X.read_plan_part(X.table_bytes(table.select(list(X.PLAN_COLUMNS))))
    rows.sort(key=lambda r: r.target)
    ctx = TaskContext.get()
    name = X.plan_part_name(ctx.partitionId()) if ctx is not None else f"part-{uuid.uuid4().hex}.parquet"
    s = _write_part(target, plan_dir, name, rows)
    yield batch_of(SUMMARY_SCHEMA, [[s[f.name]] for f in SUMMARY_SCHEMA])


# ---- copy --------------------------------------------------------------------------------------
def _copy_part(name: str, source: Storage, target: Storage, spec: X.ExportSpec, export_dir: str, checksum: bool,
               resumed: bool, pmap, fail_midway: bool = False) -> X.CopyStats:
    """Copy the files of one plan part; write its result manifest when all are verified."""
    rows = X.read_plan_part(target.read(f"{export_dir}/plan/{name}"))
    mpath = X.manifest_path(export_dir, name)
    recorded = (X.read_manifest(target, mpath) if resumed else None) or {}
    if fail_midway:
        rows = rows[: len(rows) // 2]
    ensure_dirs = getattr(target, "ensure_dirs", None)
    if ensure_dirs is not None:
        ensure_dirs(r.target for r in rows if r.target not in recorded)
    results = pmap(lambda r: X.copy_one(r, source, target, spec, checksum=checksum, recorded=recorded.get(r.target)),
                   rows)
    stats = X.CopyStats()
    files: dict[str, tuple[int, str]] = {}
    for r, (st, done) in zip(rows, results, strict=True):
        stats.add(st)
        if done is not None:
            files[r.target] = done
    if fail_midway:
        raise InjectedFailure(f"injected failure in plan part {name} after {stats.rows} files")
    if not stats.failed and files != recorded:
        target.write(mpath, X.manifest_bytes(name, files))
    return stats


def _copy_batches(source: Storage, target: Storage, spec: X.ExportSpec, export_dir: str, checksum: bool,
                  resumed: bool, io_threads: int, fail_midway: bool, batches: Iterator[pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of the copy: plan part names in, one stats row per part out."""
    src, tgt = LocalFiles.of(source), LocalFiles.of(target)
    pmap, close = _pool_map(io_threads)
    try:
        for (name,) in rows_of(batches, "name"):
            st = _copy_part(name, src, tgt, spec, export_dir, checksum, resumed, pmap, fail_midway)
            yield batch_of(STATS_SCHEMA, [[name], [json.dumps(st.to_dict())]])
    finally:
        close()


# ---- driver side -------------------------------------------------------------------------------
def _target_storage(lakehouse, target_uri: str, options: dict | None) -> Storage:
    if options is not None:
        return Storage(target_uri, options)
    if parse_uri(target_uri).scheme == lakehouse.storage.scheme:
        return lakehouse.storage.for_uri(target_uri)
    return Storage(target_uri)


def _raise_failures(missing: list[str], errors: list[str], conflicts: list[str], what: str, version: int) -> None:
    if conflicts:
        raise AlreadyExistsError(
            f"{what}: {len(conflicts)} file(s) already exist at the target with other content, e.g. {conflicts[0]}; "
            f"another export wrote them. Export to an empty location"
        )
    if missing:
        raise VersionNotFoundError(
            f"{what}: {len(missing)} file(s) of version {version} are missing in the source (expired or deleted "
            f"meanwhile?), e.g. {missing[0]}"
        )
    if errors:
        first = errors[0]
        cls = CorruptNodeError if first.startswith("CorruptNodeError") else (
            CorruptDefinitionError if first.startswith("CorruptDefinitionError") else StorageError)
        raise cls(f"{what}: {len(errors)} file(s) failed, e.g. {first}")


class _Phase:
    def __init__(self, result: JobResult, name: str):
        self.result, self.name = result, name

    def __enter__(self):
        self.t = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.result.seconds[self.name] = round(self.result.seconds.get(self.name, 0.0) + time.perf_counter() - self.t, 3)


def _cleanup(target: Storage, export_dir: str) -> None:
    try:
        target.delete([f.path for f in target.list(export_dir)])
    except Exception as e:  # noqa: BLE001 - best effort
        log.warning("could not remove %s: %s", target.uri(export_dir), e)


def run_export(spark_or_ex, lakehouse, cfg, result: JobResult, *, target_storage_options: dict | None = None,
               fail_after_batches: int | None = None) -> JobResult:
    """Export one version of `lakehouse` to ``cfg.target`` under ``cfg.name`` (see the module doc).

    Args:
        spark_or_ex: the job's `Execution` (placement per phase; Spark starts only when a phase
            goes to the executors), or a SparkSession (every phase on its executors).
        lakehouse: the source `Lakehouse`.
        cfg: an export `JobConfig` (name, target, version, as_of, mode, depth, batch_size,
            verify_checksum, run_id).
        result: the job's result, filled in and returned.
        target_storage_options: fsspec options of the target storage; default: the
            lakehouse's options when the scheme is the same, else the environment.
        fail_after_batches: tests only: copy this many plan parts, then fail half-way through
            the next one (a simulated crash).

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
    batch = int(getattr(cfg, "batch_size", 64) or 64)
    checksum = bool(getattr(cfg, "verify_checksum", True))
    run_id = getattr(cfg, "run_id", None) or result.run_id

    # ---- validate (nothing written) ----------------------------------------------------------
    with _Phase(result, "validate"), ex.phase("export.validate", LOCAL, 1, "validating the export"):
        name = X.validate_name(cfg.name)
        mode = str(getattr(cfg, "mode", "full") or "full")
        if mode not in X.MODES:
            raise ValidationError(f"export mode must be one of {', '.join(X.MODES)}, got {mode!r}")
        target_uri = parse_uri(cfg.target).uri
        X.check_locations(source.root, target_uri)
        latest = lakehouse.latest_version()
        result.version_before = latest
        current_def = lakehouse.load_root(latest).lakehouse_def
        target = _target_storage(lakehouse, target_uri, target_storage_options)
        state = X.inspect_target(target, current_def.id, source.root)
        recorded = state.exports.get(name)
        version, as_of = cfg.version, getattr(cfg, "as_of", None)
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
        spec = X.ExportSpec.make(name=name, version=ref.version, mode=mode, depth=depth, source_uri=source.root,
                                 target_uri=target.root, source_id=current_def.id, order=ref.lakehouse_def.order)
        needs_record = X.check_name_free(current_def, name, spec.root_uri)
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
            if X.verify_file(target, spec.root_path, root_row.size, root_row.md5, True) == X.MISMATCH:
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
    remote = source.scheme != "file" or target.scheme != "file"
    io_threads = max(1, int(ex.limits.threads))
    if source.scheme == "file" and target.scheme == "file" and ex.mode != "distributed":
        # Local to local, the driver copies with one thread: 16 threads took 12.0 s and one
        # 9.1 s for 21k files here (GIL and syscall contention; threads only hide latency).
        io_threads = 1

    # ---- plan ----------------------------------------------------------------------------
    with _Phase(result, "plan"):
        index = X.read_json(target, f"{plan_dir}/_plan.json") if recorded is not None else None
        if index is not None and index.get("format") != X.FORMAT_TAG:
            index = None
        resumed = index is not None
        if not resumed:
            created_here = recorded is None
            target.write(f"{export_dir}/export.json",
                         X.json_bytes({**spec.describe(), "status": "planning", "run_id": run_id,
                                       "started_at": datetime.now(UTC).isoformat()}))
            try:
                index = _Planner(ex, source, target, spec, plan_dir, batch, io_threads).run(ref, root_refs)
            except BaseException:
                if created_here:
                    _cleanup(target, export_dir)
                raise
            root_row = root_row or make_root_row()
            index.update({"format": X.FORMAT_TAG, "root": {"path": spec.root_path, "size": root_row.size,
                                                           "md5": root_row.md5, "external": root_refs.external,
                                                           "action": root_row.action}})
            target.write(f"{plan_dir}/_plan.json", X.json_bytes(index))
        elif index["root"]["md5"] != (root_row := root_row or make_root_row()).md5:
            raise StorageError(f"root file {source.uri(ref.path)} no longer matches the persisted plan of export "
                               f"{name!r}; the source was modified")
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
    with _Phase(result, "copy"):
        n_files = planned_files - 1
        where = DISTRIBUTED if ex.distributed(n_files) else LOCAL
        copy = functools.partial(_copy_part, source=source, target=target, spec=spec, export_dir=export_dir,
                                 checksum=checksum, resumed=resumed)
        with ex.phase("export.copy", where, n_files, f"export {name}: copy {n_files} files ({len(parts)} parts)"):
            names = [p["name"] for p in parts]
            if where == LOCAL:
                total = _copy_local(names, copy, source, target, io_threads, fail_after_batches)
            else:
                total = _copy_distributed(ex, names, source, target, spec, export_dir, checksum, resumed, io_threads,
                                          fail_after_batches)
        _raise_failures(total.missing_sources, total.errors, total.conflicts, f"export {name!r}", spec.version)
        if total.rows != n_files:
            raise StorageError(f"export {name!r}: copied {total.rows} planned files, the plan holds {n_files}")

    # ---- commit: the root last, then the record in the source -----------------------------------
    with _Phase(result, "commit"):
        t = time.perf_counter()
        root_stats, _ = X.copy_one(root_row, source, target, spec, checksum=True)
        _raise_failures(root_stats.missing_sources, root_stats.errors, root_stats.conflicts, f"export {name!r}",
                        spec.version)
        total.add(root_stats)
        verify_root = time.perf_counter() - t
        X.update_hint(target, spec.version)
        pin = spec.version if (mode != "full" and external > 0) else None
        planned_bytes = total.copied_bytes + total.skipped_bytes
        result.bytes["planned"] = planned_bytes
        version_after = None
        if needs_record:
            txn = lakehouse.begin()
            txn.mutate_definition(X.record_export(name, spec.root_uri, pin),
                                  f"export {name} (version {spec.version}, {mode})")
            result.counts.update(_counts(total))
            version_after = txn.commit(command="export", arguments={"name": name, "target": target.root,
                                                                    "version": spec.version, "mode": mode,
                                                                    "depth": spec.depth if mode == "partial" else None},
                                       metrics=result.metrics())
        else:
            log.info("export %r was already recorded in the source; nothing to commit", name)
        result.version_after = version_after if version_after is not None else latest
        try:
            target.write(f"{export_dir}/export.json",
                         X.json_bytes({**spec.describe(), "status": "complete", "run_id": run_id,
                                       "completed_at": datetime.now(UTC).isoformat(), "pinned_version": pin,
                                       "files": planned_files, "bytes": planned_bytes,
                                       "recorded_in_version": version_after}))
        except Exception as e:  # noqa: BLE001 - bookkeeping only; the export is complete
            log.warning("could not update %s: %s", target.uri(f"{export_dir}/export.json"), e)

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


def _counts(total: X.CopyStats) -> dict[str, int]:
    return {"copied": total.copied, "skipped": total.skipped, "verified": total.verified,
            "rewritten": total.rewritten, "source_reads": total.source_reads}


def _copy_local(names: list[str], copy, source: Storage, target: Storage, threads: int,
                fail_after: int | None) -> X.CopyStats:
    """Copy on the driver: up to `LOCAL_PARTS_IN_FLIGHT` parts at once, their files on one thread pool."""
    src, tgt = LocalFiles.of(source), LocalFiles.of(target)
    total = X.CopyStats()
    pmap, close = _pool_map(threads)
    try:
        if fail_after is not None:
            n = max(0, min(fail_after, len(names)))
            for nm in names[:n]:
                total.add(copy(nm, source=src, target=tgt, pmap=pmap))
            if n < len(names):
                copy(names[n], source=src, target=tgt, pmap=pmap, fail_midway=True)
            raise InjectedFailure(f"injected failure after {n} plan parts")
        k = max(1, min(LOCAL_PARTS_IN_FLIGHT, len(names)))
        if k == 1:
            for nm in names:
                total.add(copy(nm, source=src, target=tgt, pmap=pmap))
        else:
            with ThreadPoolExecutor(max_workers=k) as outer:
                for st in outer.map(lambda nm: copy(nm, source=src, target=tgt, pmap=pmap), names):
                    total.add(st)
    finally:
        close()
    return total


def _copy_distributed(ex: Execution, names: list[str], source: Storage, target: Storage, spec: X.ExportSpec,
                      export_dir: str, checksum: bool, resumed: bool, io_threads: int,
                      fail_after: int | None) -> X.CopyStats:
    """Copy on the executors: a DataFrame of part names, ``mapInArrow`` copies each part."""
    total = X.CopyStats()

    def run(chunk: list[str], fail_midway: bool = False) -> None:
        if not chunk:
            return
        table = pa.table({"idx": pa.array(range(len(chunk)), pa.int64()), "name": pa.array(chunk, pa.string())})
        fn = functools.partial(_copy_batches, source, target, spec, export_dir, checksum, resumed, io_threads,
                               fail_midway)
        parts = ex.partitions(len(chunk), 1)
        df = ex.to_df(table).repartition(parts, "idx") if parts > 1 else ex.to_df(table).coalesce(1)
        for r in df.mapInArrow(fn, _ddl(STATS_SCHEMA)).collect():
            total.add(X.CopyStats.from_dict(json.loads(r["stats"])))

    if fail_after is not None:
        n = max(0, min(fail_after, len(names)))
        run(names[:n])
        try:
            run(names[n : n + 1], fail_midway=True)
        except Exception as e:  # the executor's InjectedFailure arrives wrapped by Spark
            raise InjectedFailure(f"injected failure after {n} plan parts") from e
        raise InjectedFailure(f"injected failure after {n} plan parts")
    run(names)
    return total


class _Planner:
    """Walks the exported part of the tree level by level (driver or executors per level) and
    writes the plan parts; returns the plan index (parts, counts)."""

    def __init__(self, ex: Execution, source: Storage, target: Storage, spec: X.ExportSpec, plan_dir: str,
                 batch: int, io_threads: int):
        self.ex, self.source, self.target, self.spec = ex, source, target, spec
        self.plan_dir, self.batch, self.io_threads = plan_dir, batch, io_threads
        self.levels: list[dict[str, Any]] = []
        # Driver-side state.
        self.nodes: dict[str, X.PlanRow] = {}
        self.odfs: dict[str, int] = {}

    def run(self, ref, root_refs: X.NodeRefs) -> dict[str, Any]:
        def_rel = X.local_path(self.source, ref.def_path) or ref.def_path
        self.def_row = X.plan_file(self.source, def_rel, X.KIND_DEF, 0)
        for p in root_refs.odfs:
            self.odfs.setdefault(p, 0)
        frontier = dict.fromkeys(root_refs.children, 1)
        depth = 1
        while frontier:
            held = len(self.nodes) + len(self.odfs) + len(frontier)
            if self.ex.distributed(len(frontier)) or not self.ex.fits_driver(held):
                return self._run_distributed(frontier, depth)
            frontier = self._local_level(frontier, depth)
            depth += 1
        return self._write_local()

    def _check_depth(self, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise CorruptNodeError(f"planning export {self.spec.name!r}: the tree of version {self.spec.version} is "
                                   f"deeper than {MAX_DEPTH} levels (a cycle of node pointers?)")

    def _local_level(self, frontier: dict[str, int], depth: int) -> dict[str, int]:
        self._check_depth(depth)
        t = time.perf_counter()
        items = list(frontier.items())
        with self.ex.phase("export.plan_nodes", LOCAL, len(items),
                           f"export {self.spec.name}: read {len(items)} nodes at depth {depth}"):
            pmap, close = _pool_map(min(self.io_threads, len(items)))
            try:
                out = _expand(LocalFiles.of(self.source), self.spec, pmap, items)
            finally:
                close()
        nxt: dict[str, int] = {}
        missing, errors = [], []
        for role, tgt, kind, d, action, size, md5, external, data, err in out:
            if role == ROLE_NODE:
                self.nodes[tgt] = X.PlanRow(tgt, self.source.uri(tgt), kind, d, action, size, md5, external, data)
            elif role == ROLE_CHILD:
                if tgt not in self.nodes and tgt not in frontier:
                    nxt.setdefault(tgt, d)
            elif role == ROLE_ODF:
                if d < self.odfs.get(tgt, d + 1):
                    self.odfs[tgt] = d
            elif role == ROLE_MISSING:
                missing.append(err)
            else:
                errors.append(err)
        if missing or errors:
            _failure(missing, errors, f"planning export {self.spec.name!r}", self.spec.version)
        self.levels.append({"depth": depth, "nodes": len(items), "where": LOCAL,
                            "seconds": round(time.perf_counter() - t, 3)})
        return nxt

    def _rows(self) -> list[X.PlanRow]:
        rows = {self.def_row.target: self.def_row}
        for p, d in self.odfs.items():
            rows.setdefault(p, X.plan_file(self.source, p, X.KIND_ODF, d))
        for p, r in self.nodes.items():
            rows[p] = r
        return sorted(rows.values(), key=lambda r: r.target)

    def _index(self, summaries: list[dict[str, Any]]) -> dict[str, Any]:
        summaries.sort(key=lambda p: p["name"])
        return {"parts": summaries, "levels": self.levels, "files": sum(p["rows"] for p in summaries) + 1,
                "created_at": datetime.now(UTC).isoformat()}

    def _write_local(self) -> dict[str, Any]:
        rows = self._rows()
        self.nodes, self.odfs = {}, {}
        if self.ex.distributed(len(rows)):  # the walk stayed on the driver, the plan is big enough
            df = self.ex.spark.createDataFrame(X.plan_table(rows), schema=_ddl(X.PLAN_SCHEMA))
            return self._write_distributed([df], [], [])
        per = max(self.batch, LOCAL_PART_ROWS)
        chunks = [rows[i : i + per] for i in range(0, len(rows), per)]
        with self.ex.phase("export.write_plan", LOCAL, len(rows), f"export {self.spec.name}: write the plan"):
            pmap, close = _pool_map(min(self.io_threads, len(chunks)))
            try:
                tgt = LocalFiles.of(self.target)
                summaries = pmap(lambda ic: _write_part(tgt, self.plan_dir, X.plan_part_name(ic[0]), ic[1]),
                                 list(enumerate(chunks)))
            finally:
                close()
        return self._index(summaries)

    # -- executors --
    def _run_distributed(self, frontier_d: dict[str, int], depth: int) -> dict[str, Any]:
        ex, spec = self.ex, self.spec
        spark = ex.spark
        F = ex.F  # noqa: N806 - the functions of this session's kind (classic or Connect)
        frontier = ex.to_df(pa.table({"target": pa.array(list(frontier_d), pa.string()),
                                      "depth": pa.array(list(frontier_d.values()), pa.int32())}))
        # Hand over the driver's rows (bounded by the thresholds that kept them there).
        plan_parts = [spark.createDataFrame(X.plan_table(self._rows()), schema=_ddl(X.PLAN_SCHEMA))]
        self.nodes, self.odfs = {}, {}
        odf_parts = []
        node_parts = []
        checkpoints = []

        def keep(df):
            df = df.localCheckpoint(eager=True)
            checkpoints.append(df)
            return df

        n = len(frontier_d)
        try:
            while n > 0:
                self._check_depth(depth)
                t = time.perf_counter()
                parts = ex.partitions(n, self.batch)
                with ex.phase("export.plan_nodes", DISTRIBUTED, n,
                              f"export {spec.name}: read {n} nodes at depth {depth} ({parts} tasks)"):
                    fn = functools.partial(_level_batches, self.source, spec, self.io_threads)
                    df = frontier.repartition(parts) if parts > 1 else frontier.coalesce(1)
                    out = keep(df.mapInArrow(fn, _ddl(LEVEL_SCHEMA)))
                    roles = {r["role"]: int(r["n"]) for r in out.groupBy("role").agg(F.count("*").alias("n")).collect()}
                    bad = roles.get(ROLE_MISSING, 0) + roles.get(ROLE_ERROR, 0)
                    if bad:
                        sample = (out.filter(F.col("role").isin(ROLE_MISSING, ROLE_ERROR)).select("role", "error")
                                  .limit(5).collect())
                        _failure([r["error"] for r in sample if r["role"] == ROLE_MISSING],
                                 [r["error"] for r in sample if r["role"] == ROLE_ERROR],
                                 f"planning export {spec.name!r}", spec.version)
                    node_parts.append(out.filter(F.col("role") == ROLE_NODE))
                    odf_parts.append(out.filter(F.col("role") == ROLE_ODF))
                    # A tree: children of this level were never visited before (a cycle ends
                    # at MAX_DEPTH); only duplicates within the level are merged.
                    nxt = out.filter(F.col("role") == ROLE_CHILD).groupBy("target").agg(F.min("depth").alias("depth"))
                    frontier = keep(nxt)
                    n_next = frontier.count()
                self.levels.append({"depth": depth, "nodes": n, "where": DISTRIBUTED, "tasks": parts,
                                    "seconds": round(time.perf_counter() - t, 3)})
                log.info("export %r: depth %d read %d nodes in %d tasks, %d children", spec.name, depth, n, parts,
                         n_next)
                n = n_next
                depth += 1
            return self._write_distributed(plan_parts, node_parts, odf_parts)
        finally:
            for c in checkpoints:
                try:
                    c.unpersist()
                except Exception:  # noqa: BLE001 - checkpoints go with the session
                    pass

    def _write_distributed(self, plan_parts: list, node_parts: list, odf_parts: list) -> dict[str, Any]:
        from functools import reduce

        ex, spec, source = self.ex, self.spec, self.source
        F = ex.F  # noqa: N806
        cols = list(X.PLAN_COLUMNS)
        root = source.root if source.root.endswith("/") else source.root + "/"
        uri = F.concat(F.lit(root), F.col("target"))
        nodes = [df.select("target", uri.alias("source"), "kind", "depth", "action", "size", "md5", "external", "data")
                 for df in node_parts]
        odfs = [df.select("target", "depth") for df in odf_parts]
        if odfs:
            o = reduce(lambda a, b: a.unionByName(b), odfs).groupBy("target").agg(F.min("depth").alias("depth"))
            nodes.append(o.select("target", uri.alias("source"), F.lit(X.KIND_ODF).alias("kind"),
                                  F.col("depth").cast("int").alias("depth"), F.lit(X.ACTION_COPY).alias("action"),
                                  F.lit(-1).cast("bigint").alias("size"), F.lit("").alias("md5"),
                                  F.lit(0).cast("int").alias("external"), F.lit(None).cast("binary").alias("data")))
        allrows = reduce(lambda a, b: a.unionByName(b), [p.select(*cols) for p in plan_parts + nodes])
        # One row per target: nodes win over the same path planned as a definition file (never
        # the case in a valid tree), then the smallest depth.
        pick = F.min(F.struct(F.when(F.col("kind") == X.KIND_ODF, 1).otherwise(0).alias("o"), "depth",
                              *[c for c in cols if c not in ("target", "depth")]))
        deduped = allrows.groupBy("target").agg(pick.alias("m")).select(
            "target", *[F.col(f"m.{c}").alias(c) for c in cols if c != "target"]).select(*cols)
        deduped = deduped.localCheckpoint(eager=True)
        try:
            n_rows = deduped.count()
            n_parts = max(1, math.ceil(n_rows / self.batch))
            with ex.phase("export.write_plan", DISTRIBUTED, n_rows,
                          f"export {spec.name}: write the plan ({n_parts} parts)"):
                fn = functools.partial(_part_batches, self.target, self.plan_dir)
                summaries = [r.asDict() for r in deduped.repartition(n_parts, "target").sortWithinPartitions("target")
                             .mapInArrow(fn, _ddl(SUMMARY_SCHEMA)).collect()]
        finally:
            try:
                deduped.unpersist()
            except Exception:  # noqa: BLE001
                pass
        return self._index([{k: int(v) if k != "name" else v for k, v in s.items()} for s in summaries])
