"""Snapshot export as a Spark job: plan on executors, persist the plan, copy in verified batches.

Phases (each timed into ``JobResult.seconds``):

1. **validate** (driver, nothing written): the name, the target URI (not inside the source,
   nor containing it), the version (``VersionNotFoundError`` when expired), a name clash
   (``AlreadyExistsError``) and the target (empty, or holding only exports of this lakehouse).
2. **plan**: ``<target>/_export/<name>/export.json`` records what is exported; the tree is
   walked level by level, each level's nodes read on executors in batches (a node read also
   plans the definition files it references). Every planned file gets its bytes as the
   target will hold them (rewritten when pointers change), size and MD5. Rows are
   deduplicated, cut into batches of ``batch_size`` and written as ``plan/part-NNNNN.parquet``
   by the executors; ``plan/_plan.json`` (the index) marks the plan complete. The plan is
   persisted before anything is copied.
3. **copy**: one Spark task per plan part. A file already at the target with the planned size
   and MD5 is skipped; otherwise the source is read (and rewritten), checked against the plan,
   created exclusively at the target and verified. Failures come back as data, and the driver
   raises a typed error naming the files. Every root file stays unwritten until all copies
   succeeded: a killed export is invisible, and re-running it reuses the persisted plan and
   copies only what is missing.
4. **verify**: time spent verifying, summed over the tasks (it happens inline, per file).
5. **commit**: the exported root ``root_name(V)`` is created last (exclusive), the target's
   ``_latest_hint.txt`` raised to V, and the export recorded in the source's definition by a
   normal commit: ``exported_snapshots[name]`` = full URI of the exported root, plus
   ``exported_snapshot_pins[name]`` = V when the export still references source files (partial
   and minimal exports that did not reach the bottom of the tree).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from typing import Any

from trinitylake.errors import (
    AlreadyExistsError,
    CorruptDefinitionError,
    CorruptNodeError,
    StorageError,
    TrinityLakeError,
    ValidationError,
    VersionNotFoundError,
)
from trinitylake.maintenance import export_plan as X
from trinitylake.maintenance.results import JobResult
from trinitylake.storage import Storage, parse_uri

log = logging.getLogger(__name__)

#: Concurrent requests per task when either side is an object store (I/O bound).
REMOTE_THREADS = 16


# ---- executor side ---------------------------------------------------------------------------
def _pool_map(fn, items: list, remote: bool) -> list:
    if not remote or len(items) < 2:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(REMOTE_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


def _guarded(fn, *args) -> tuple[str, Any]:
    """Run a plan step; failures become ("missing"|"error", message) records."""
    try:
        return "ok", fn(*args)
    except FileNotFoundError as e:
        return "missing", str(e)
    except TrinityLakeError as e:
        return "error", f"{type(e).__name__}: {e}"


def _expand(items: Iterable[tuple[str, str, int]], source: Storage, spec: X.ExportSpec, remote: bool,
            budget: int) -> Iterator[tuple]:
    """Plan one batch of the tree: nodes (with the definition files they reference) and files.

    The task keeps descending below its nodes while it has read fewer than `budget` files, so
    a small tree is planned by one wave of tasks; deeper nodes go back to the driver for the
    next wave. Yields ("row", plan tuple), ("child", (kind, path, depth)), ("missing", msg),
    ("error", msg) and, last, ("count", rows yielded).
    """
    items = list(items)
    queue = [i for i in items if i[0] == X.KIND_NODE]
    files = [i for i in items if i[0] != X.KIND_NODE]
    odfs: dict[str, int] = {}
    n_rows = 0
    used = 0
    first = True
    while queue and (first or used < budget):
        if first:
            take, queue = queue, []
            first = False
        else:
            step = max(1, min(len(queue), budget - used, REMOTE_THREADS if remote else budget))
            take, queue = queue[:step], queue[step:]
        for status, val in _pool_map(lambda i: _guarded(X.plan_node, source, i[1], i[2], spec), take, remote):
            if status != "ok":
                yield status, val
                continue
            row, refs = val
            n_rows += 1
            used += 1 + len(refs.odfs)
            yield "row", row.as_tuple()
            queue.extend((X.KIND_NODE, c, row.depth + 1) for c in refs.children)
            for p in refs.odfs:
                odfs.setdefault(p, row.depth)
    for child in queue:
        yield "child", child
    files.extend((X.KIND_ODF, p, d) for p, d in odfs.items())
    for status, val in _pool_map(lambda i: _guarded(X.plan_file, source, i[1], i[0], i[2]), files, remote):
        if status != "ok":
            yield status, val
        else:
            n_rows += 1
            yield "row", val.as_tuple()
    yield "count", n_rows


def _write_part(index: int, rows: Iterable[tuple[str, tuple]], target: Storage, plan_dir: str, check_target: bool,
                checksum: bool, remote: bool) -> Iterator[dict[str, Any]]:
    """Write one plan part (after looking at the target when it was not empty)."""
    plan_rows = sorted((X.PlanRow.from_tuple(r) for _, r in rows), key=lambda r: r.target)
    if not plan_rows:
        return
    conflicts: list[str] = []
    if check_target:
        checked = _pool_map(lambda r: X.check_present(r, target, checksum), plan_rows, remote)
        plan_rows = [r for r, _ in checked]
        conflicts = [f"{target.uri(r.target)} exists with other content than {r.source}"
                     for r, s in checked if s == X.MISMATCH]
    name = X.plan_part_name(index)
    target.write(f"{plan_dir}/{name}", X.plan_part_bytes(plan_rows))
    present = [r for r in plan_rows if r.present]
    yield {
        "name": name,
        "rows": len(plan_rows),
        "bytes": sum(r.size for r in plan_rows),
        "present": len(present),
        "present_bytes": sum(r.size for r in present),
        "rewritten": sum(r.action == X.ACTION_REWRITE for r in plan_rows),
        "external": sum(r.external for r in plan_rows),
        "conflicts": conflicts[:20],
        "n_conflicts": len(conflicts),
    }


class InjectedFailure(RuntimeError):
    """Raised by the fault-injection hook of the tests (a simulated crash mid-copy)."""


def _copy_parts(items: Iterable[tuple[int, str]], source: Storage, target: Storage, spec: X.ExportSpec, plan_dir: str,
                checksum: bool, check_first: bool, remote: bool, fail_midway: bool = False) -> Iterator[dict[str, Any]]:
    """Copy the files of some plan parts; yields one CopyStats dict per part."""
    for _, name in items:
        rows = [r for r in X.read_plan_part(target.read(f"{plan_dir}/{name}")) if r.kind != X.KIND_ROOT]
        if fail_midway:
            rows = rows[: len(rows) // 2]
        stats = X.CopyStats()
        for s in _pool_map(lambda r: X.copy_one(r, source, target, spec, checksum=checksum, check_first=check_first),
                           rows, remote):
            stats.add(s)
        if fail_midway:
            raise InjectedFailure(f"injected failure in plan part {name} after {stats.rows} files")
        yield stats.to_dict()


# ---- driver side -------------------------------------------------------------------------------
def _target_storage(lakehouse, target_uri: str, options: dict | None) -> Storage:
    if options is not None:
        return Storage(target_uri, options)
    if parse_uri(target_uri).scheme == lakehouse.storage.scheme:
        return lakehouse.storage.for_uri(target_uri)
    return Storage(target_uri)


def _slices(n: int, batch: int, parallelism: int) -> int:
    """Tasks for n items: batches of `batch`, but at least one task per core while items last."""
    return max(1, min(n, max(math.ceil(n / batch), parallelism)))


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


def run_export(spark, lakehouse, cfg, result: JobResult, *, target_storage_options: dict | None = None,
               fail_after_batches: int | None = None) -> JobResult:
    """Export one version of `lakehouse` to ``cfg.target`` under ``cfg.name`` (see the module doc).

    Args:
        spark: the SparkSession.
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
    t_start = time.perf_counter()
    sc = spark.sparkContext
    source: Storage = lakehouse.storage
    batch = int(getattr(cfg, "batch_size", 64) or 64)
    checksum = bool(getattr(cfg, "verify_checksum", True))
    run_id = getattr(cfg, "run_id", None) or result.run_id

    # ---- validate (nothing written) ----------------------------------------------------------
    with _Phase(result, "validate"):
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
        root_bytes, root_refs, root_changed = X.exported_node_bytes(root_data, 0, spec, source, source.uri(ref.path))
        root_md5 = X.md5_hex(root_bytes)
        root_state = X.verify_file(target, spec.root_path, len(root_bytes), root_md5, True) if not state.empty else X.MISSING
        if root_state == X.MISMATCH:
            raise AlreadyExistsError(
                f"the target already holds a different root file for version {spec.version} "
                f"({target.uri(spec.root_path)}, from another export of that version); export to another location"
            )
    result.details.update({"name": name, "version": spec.version, "mode": mode,
                           "depth": spec.depth if mode == "partial" else None,
                           "target": target.root, "root": spec.root_uri, "source_id": spec.source_id})
    result.output_location = spec.root_uri
    export_dir = spec.export_dir
    plan_dir = f"{export_dir}/plan"
    result.plan_location = target.uri(export_dir)
    remote = source.scheme != "file" or target.scheme != "file"

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
                index = _build_plan(sc, source, target, spec, ref, root_refs, plan_dir, batch=batch,
                                    check_target=not state.empty, checksum=checksum, remote=remote)
            except BaseException:
                if created_here:
                    _cleanup(target, export_dir)
                raise
            index.update({"format": X.FORMAT_TAG, "root": {"path": spec.root_path, "size": len(root_bytes),
                                                           "md5": root_md5, "external": root_refs.external,
                                                           "action": X.ACTION_REWRITE if root_changed else X.ACTION_COPY}})
            target.write(f"{plan_dir}/_plan.json", X.json_bytes(index))
        elif index["root"]["md5"] != root_md5:
            raise StorageError(f"root file {source.uri(ref.path)} no longer matches the persisted plan of export "
                               f"{name!r}; the source was modified")
    parts = index["parts"]
    planned_files = sum(p["rows"] for p in parts) + 1
    planned_bytes = sum(p["bytes"] for p in parts) + len(root_bytes)
    external = sum(p["external"] for p in parts) + root_refs.external
    result.counts.update({"planned": planned_files, "batches": len(parts),
                          "rewritten_planned": sum(p["rewritten"] for p in parts) + int(root_changed),
                          "external_refs": external})
    result.bytes["planned"] = planned_bytes
    result.details["resumed"] = resumed
    log.info("export %r: plan %s with %d files, %d bytes in %d batches (%s)", name, target.uri(plan_dir),
             planned_files, planned_bytes, len(parts), "resumed" if resumed else "new")

    # ---- copy ------------------------------------------------------------------------------
    with _Phase(result, "copy"):
        copy = partial(_copy_parts, source=source, target=target, spec=spec, plan_dir=plan_dir, checksum=checksum,
                       check_first=resumed, remote=remote)
        items = list(enumerate(p["name"] for p in parts))
        total = X.CopyStats()
        if fail_after_batches is not None:
            n = max(0, min(fail_after_batches, len(items)))
            for s in _run_copy(sc, items[:n], copy):
                total.add(X.CopyStats.from_dict(s))
            try:
                _run_copy(sc, items[n : n + 1], partial(copy, fail_midway=True))
            except Exception as e:  # the executor's InjectedFailure arrives wrapped by Spark
                raise InjectedFailure(f"injected failure after {n} plan parts") from e
            raise InjectedFailure(f"injected failure after {n} plan parts")
        for s in _run_copy(sc, items, copy):
            total.add(X.CopyStats.from_dict(s))
        _raise_failures(total.missing_sources, total.errors, total.conflicts, f"export {name!r}", spec.version)
        expected = planned_files - 1
        if total.rows != expected:
            raise StorageError(f"export {name!r}: copied {total.rows} planned files, the plan holds {expected}")

    # ---- commit: the root last, then the record in the source -----------------------------------
    with _Phase(result, "commit"):
        t = time.perf_counter()
        root_row = X.PlanRow(spec.root_path, source.uri(ref.path), X.KIND_ROOT, 0,
                             X.ACTION_REWRITE if root_changed else X.ACTION_COPY, len(root_bytes), root_md5,
                             root_refs.external)
        root_stats = X.copy_one(root_row, source, target, spec, checksum=True, check_first=True)
        _raise_failures(root_stats.missing_sources, root_stats.errors, root_stats.conflicts, f"export {name!r}",
                        spec.version)
        total.add(root_stats)
        verify_root = time.perf_counter() - t
        X.update_hint(target, spec.version)
        pin = spec.version if (mode != "full" and external > 0) else None
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
    result.details.update({"pinned_version": pin, "self_contained": external == 0,
                           "recorded": needs_record, "recorded_in_version": version_after})
    result.status = "succeeded"
    log.info("export %r complete: %s", name, {**result.counts, **{f"bytes_{k}": v for k, v in result.bytes.items()}})
    return result


def _counts(total: X.CopyStats) -> dict[str, int]:
    return {"copied": total.copied, "skipped": total.skipped, "verified": total.verified,
            "rewritten": total.rewritten}


def _run_copy(sc, items: list[tuple[int, str]], fn) -> list[dict[str, Any]]:
    if not items:
        return []
    return sc.parallelize(items, len(items)).mapPartitions(fn).collect()


def _build_plan(sc, source: Storage, target: Storage, spec: X.ExportSpec, ref, root_refs: X.NodeRefs, plan_dir: str, *,
                batch: int, check_target: bool, checksum: bool, remote: bool) -> dict[str, Any]:
    """Walk the exported part of the tree on executors (waves of budgeted descents), then
    deduplicate the rows by target path and persist them as plan parts of about `batch` rows."""
    from pyspark import StorageLevel

    parallelism = sc.defaultParallelism
    def_rel = X.local_path(source, ref.def_path) or ref.def_path
    frontier: list[tuple[str, str, int]] = [(X.KIND_DEF, def_rel, 0)]
    frontier += [(X.KIND_ODF, p, 0) for p in root_refs.odfs]
    frontier += [(X.KIND_NODE, c, 1) for c in root_refs.children]
    expand = partial(_expand, source=source, spec=spec, remote=remote, budget=batch)
    waves = []
    missing: list[str] = []
    errors: list[str] = []
    n_rows = 0
    try:
        while frontier:
            rdd = sc.parallelize(frontier, _slices(len(frontier), batch, parallelism)).mapPartitions(expand)
            rdd.persist(StorageLevel.MEMORY_AND_DISK)
            waves.append(rdd)
            others = rdd.filter(lambda x: x[0] != "row").collect()
            frontier = [x[1] for x in others if x[0] == "child"]
            missing += [x[1] for x in others if x[0] == "missing"]
            errors += [x[1] for x in others if x[0] == "error"]
            n_rows += sum(x[1] for x in others if x[0] == "count")
            log.info("export %r: plan wave %d done (%d rows so far); %d nodes left for the next wave", spec.name,
                     len(waves), n_rows, len(frontier))
            if missing or errors:
                break
        _raise_failures(missing, errors, [], f"planning export {spec.name!r}", spec.version)
        rows = sc.union([r.filter(lambda x: x[0] == "row").map(lambda x: x[1]) for r in waves])
        n_parts = max(1, math.ceil(n_rows / batch))
        write = partial(_write_part, target=target, plan_dir=plan_dir, check_target=check_target,
                        checksum=checksum, remote=remote)
        # Deduplicate by target path (a definition file can be referenced twice, e.g. after a
        # rollback) straight into the plan parts: one shuffle, hash-partitioned batches.
        parts = (
            rows.map(lambda t: (t[0], t))
            .reduceByKey(lambda a, b: a if a[3] <= b[3] else b, numPartitions=n_parts)
            .mapPartitionsWithIndex(write)
            .collect()
        )
    finally:
        for r in waves:
            r.unpersist()
    parts.sort(key=lambda p: p["name"])
    conflicts = [c for p in parts for c in p["conflicts"]]
    if any(p["n_conflicts"] for p in parts):
        _raise_failures([], [], conflicts or ["(unnamed)"], f"planning export {spec.name!r}", spec.version)
    return {"parts": [{k: v for k, v in p.items() if k not in ("conflicts", "n_conflicts")} for p in parts],
            "waves": len(waves), "files": sum(p["rows"] for p in parts) + 1,
            "created_at": datetime.now(UTC).isoformat()}
