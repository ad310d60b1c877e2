"""The `expire` job: expire old versions, commit first, then delete what only they reached.

Phases (each timed into ``result.seconds``; where a phase ran is recorded in
``result.details["execution"]``):

1. **plan** (driver): the latest lakehouse definition gives the policy (overridden by the
   job's flags) and ``oldest_retained_version``; root files below it that still exist are
   *leftovers* of an earlier run that was interrupted after its commit. The planner
   (`jobs.expire.rules.plan_expiration`) picks the newly expired oldest prefix, reading
   only the root files it needs.
2. **walk_retained**: R = every file reachable from the versions that stay (oldest retained
   .. latest), pinned exports and pinned versions (self-contained exports reference no
   source file: `maintenance.walk_roots`). Any missing or unreadable node stops the run
   here, before anything is committed (the live set cannot be computed).
3. **walk_expired**: C = reach(expired) - R, walking the expired roots with R as `exclude`, so
   only nodes the expired versions do not share with retained ones are read. Missing nodes
   are tolerated here (an interrupted run may have deleted them).
4. The plan (``plan.json``) and C (``candidates/``) are written under
   ``_maintenance/expire/<run_id>/``. A dry run stops here.
5. **commit**: a new version whose lakehouse definition has ``oldest_retained_version`` = the
   first retained version (re-applied to the latest definition on conflicts; refused if an
   export pinned an expiring version meanwhile).
6. **walk_new**: versions committed since the plan (including this commit) and exports
   recorded since are walked with R as `exclude`; their files leave C.
7. **delete**: C's files in *descending depth* order, one level at a time, in bulk batches with
   retries (`trinitylake.spark.delete.delete_keys`: the driver's threads for a small level,
   the executors for a big one); the root files of the expired versions **last**, from the
   driver, oldest first.

**Placement.** Each walk decides per level where it runs (`trinitylake.treewalk.walker`). When both
the retained and the expired walk stayed on the driver, C is an Arrow table and its filtering
(format-owned paths, files still present), grouping and the anti-join with the new versions'
files are pyarrow compute on the driver: a lakehouse whose walks are small never starts Spark.
Otherwise C is a DataFrame and the same steps are Spark aggregates and joins.

**Crash safety.** After the commit, the expired versions are recorded in the definition, so
a re-run sees their remaining root files as leftovers and walks them again. Deleting deepest
files first keeps every not-yet-deleted candidate reachable from a leftover root through
not-yet-deleted nodes (a candidate's shortest path from its expired root runs through
candidates of smaller depth, none of which is deleted before it), and missing nodes are
skipped on the re-walk because everything below them was deleted before them. Roots go last,
so a run killed at any point leaves a state that the next run completes; no level is
started while a deeper one still has failures.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trinitylake import rowsets
from trinitylake.errors import CorruptNodeError, StorageError, UnsafeOperationError, VersionNotFoundError
from trinitylake.format.keys import SYS_CREATED_AT
from trinitylake.format.node import deserialize
from trinitylake.format.paths import root_name
from trinitylake.jobs.expire.rules import (
    RetentionPolicy,
    effective_retention,
    owned_arrow,
    owned_column,
    plan_expiration,
)
from trinitylake.rowsets import AllOf, Equals, RowSet
from trinitylake.runs.folder import run_dir, write_json
from trinitylake.runs.results import JobResult
from trinitylake.spark.common import crash_point
from trinitylake.spark.delete import DeleteOutcome, delete_keys, delete_on_driver
from trinitylake.spark.execution import Execution, as_execution, timed
from trinitylake.treewalk import reach, walk_roots
from trinitylake.treewalk.walk_rows import Reached, fill_walk_counts
from trinitylake.treewalk.walk_rules import present_arrow, present_column
from trinitylake.treewalk.walker import walk_reachable_with_stats

if TYPE_CHECKING:
    from types import ModuleType

    from pyspark.sql import Column

    from trinitylake.config import ExpireConfig
    from trinitylake.format.definitions import LakehouseDef
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.util import Session

log = logging.getLogger(__name__)


class RootTimes:
    """``created_at_millis`` of root files, read on demand with look-ahead (the planner asks
    for consecutive versions; reading 32 at a time hides object-store latency)."""

    def __init__(self, lakehouse: Lakehouse, lookahead: int = 32, threads: int = 16):
        self.reader = reach.Reader(lakehouse.storage.root, lakehouse.storage.options)
        self.lookahead = lookahead
        self.threads = threads
        self.cache: dict[int, int | None] = {}
        self.reads = 0

    def _read(self, v: int) -> int | None:
        key = root_name(v)
        try:
            data = self.reader.read(key)
        except FileNotFoundError:
            return None
        node = deserialize(data, None, self.reader.locator.uri(key))
        raw = node.system.get(SYS_CREATED_AT, "")
        if not raw.isdigit():
            raise CorruptNodeError(f"root node file {self.reader.locator.uri(key)} has no valid {SYS_CREATED_AT}")
        return int(raw)

    def __call__(self, v: int) -> int:
        if v not in self.cache:
            batch = list(range(v, v + self.lookahead))
            with ThreadPoolExecutor(max_workers=self.threads) as pool:
                for u, t in zip(batch, pool.map(self._read, batch), strict=True):
                    self.cache[u] = t
            self.reads += len(batch)
        t = self.cache[v]
        if t is None:
            raise VersionNotFoundError(f"root of version {v} disappeared while planning the expiration")
        return t


# ---- the candidates -----------------------------------------------------------------------------
class _Owned:
    """Format-owned keys (`owned_arrow`)."""

    def arrow(self, table: pa.Table) -> pa.ChunkedArray:
        return owned_arrow(table.column("path"))

    def column(self, functions: ModuleType) -> Column:
        return owned_column(functions.col("path"))


class _Present:
    """Files the walk found (`present_arrow`: a known size)."""

    def arrow(self, table: pa.Table) -> pa.ChunkedArray:
        return present_arrow(table.column("size"))

    def column(self, functions: ModuleType) -> Column:
        return present_column(functions.col("size"))


_NOT_ROOT = Equals("kind", reach.KIND_ROOT, negate=True)
_ROOT = Equals("kind", reach.KIND_ROOT)


class _Candidates:
    """C = reach(expired) - reach(retained), format-owned and present: its bookkeeping and its
    per-level deletes, on the driver when both walks stayed there, else on the executors."""

    def __init__(self, ex: Execution, reached: Reached, retained: Reached):
        step = rowsets.place(ex, 0, inputs=(retained.rows, reached.rows))
        rows = step.rows(reached.rows)
        #: files per kind (format-owned and present), paths not format-owned, already deleted.
        self.by_kind: dict[str, tuple[int, int]] = {}
        self.not_owned = self.already_gone = 0
        with step.phase("expire.candidates", reached.stats.total_files, "filter the candidates"):
            groups = rows.count_by(["kind", ("owned", _Owned()), ("present", _Present())], "size")
            for (kind, owned, present), (n, b) in groups.items():
                if not owned:
                    self.not_owned += n
                elif not present:
                    self.already_gone += n
                else:
                    self.by_kind[str(kind)] = (n, b)
            self.rows = rows.filter(AllOf(_Owned(), _Present()))

    @property
    def files(self) -> int:
        return sum(n for n, _ in self.by_kind.values())

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self.by_kind.values())

    def write(self, uri: str, options: dict[str, object] | None) -> str:
        return self.rows.write(uri, options, self.files)

    def drop_reached(self, extra: Reached) -> None:
        """Leave out what `extra` reaches (on the executors when that walk went there)."""
        self.rows = self.rows.anti_join(extra.rows, "path")

    def count(self) -> int:
        # Kept by the count (one job): the deletes see the very rows counted.
        self.rows = self.rows.keep()
        return self.rows.totals()[0]

    def levels(self) -> dict[int, int]:
        """Non-root candidates per depth."""
        return {int(str(d)): n for (d,), (n, _) in self.rows.filter(_NOT_ROOT).count_by(["depth"]).items()}

    def level(self, depth: int) -> RowSet:
        """The non-root candidates at `depth`."""
        return self.rows.filter(AllOf(_NOT_ROOT, Equals("depth", depth))).select("path")

    def root_paths(self) -> set[str]:
        return {str(p) for p in self.rows.filter(_ROOT).column_values("path")}

    def release(self) -> None:
        self.rows.release()


def compact_control_table(lakehouse: Lakehouse, result: JobResult) -> None:
    """Compact and checkpoint the control table; tolerate it being absent (auditing off)."""
    auditor = lakehouse.auditor
    if not auditor.enabled:
        result.details["control_compaction"] = "skipped: auditing is off"
        return
    try:
        control = auditor.control
        if not control.exists():
            result.details["control_compaction"] = "skipped: no control table"
            return
        result.details["control_compaction"] = control.compact()
    except Exception as e:  # noqa: BLE001 - maintenance of the audit log never fails the expiration
        log.warning("control table compaction failed: %s: %s", type(e).__name__, e)
        result.details["control_compaction"] = f"failed: {type(e).__name__}: {e}"


@dataclass
class _Job:
    """What every phase of one run reads: the run's execution, lakehouse, options and result,
    where its plan goes, and the label of its Spark jobs."""

    ex: Execution
    lh: Lakehouse
    cfg: ExpireConfig
    result: JobResult
    rdir: str
    label: str

    def timed(self, name: str, what: str) -> AbstractContextManager[None]:
        return timed(self.result.seconds, name, what, announce=True, job=f"expire {self.result.run_id}")


@dataclass
class _Plan:
    """The plan phase's outcome: the versions listed, the floor before and after, the expired
    versions (left over from an interrupted run, then newly expired) and the plan document."""

    latest: int
    listed: list[int]
    prev_oldest: int
    new_oldest: int
    leftover: list[int]
    expired: list[int]
    newly_expired: list[int]
    doc: dict[str, Any]
    #: What the retained walk started from (``plan.json``'s ``retained_walk``).
    retained_walk: dict[str, Any] = field(default_factory=dict)


def run_expire(ex: Execution | Session, lakehouse: Lakehouse, cfg: ExpireConfig, result: JobResult) -> JobResult:
    """The expire job (see the module doc). `ex`: the job's `Execution` (a SparkSession is
    taken as one that runs every phase on its executors)."""
    result.dry_run = bool(cfg.dry_run)
    job = _Job(as_execution(ex), lakehouse, cfg, result, run_dir("expire", result.run_id),
               f"tlake expire {result.run_id}")
    plan = _plan(job)
    if not plan.expired:
        result.counts.update({"candidates": 0, "deleted": 0, "failed": 0})
        result.plan_location = write_json(lakehouse.storage, f"{job.rdir}/plan.json", plan.doc)
        if not result.dry_run and cfg.compact_control_table:
            with job.timed("compact_control", "compact the control table"):
                compact_control_table(lakehouse, result)
        return result
    retained, inp = _walk_retained(job, plan)
    held: list[Reached | _Candidates] = [retained]
    try:
        expired_reach = _walk_expired(job, plan, retained)
        held.append(expired_reach)
        cands = _write_plan(job, plan, inp, retained, expired_reach)
        held.append(cands)
        if result.dry_run:
            log.info("expire %s (dry run): would expire %d versions and delete %d files (%d bytes); plan at %s",
                     result.run_id, len(plan.expired), cands.files, cands.bytes, result.plan_location)
            return result
        crash_point("expire_after_plan")
        _commit_phase(job, plan)
        cands = _walk_new(job, plan, inp, retained, cands, held)
        # From here on nothing new may reference the expired versions: rollbacks and export
        # pins below the committed floor are refused (`lakehouse.roots.check_retained`).
        crash_point("expire_before_delete")
        _delete_phase(job, plan, cands)
    finally:
        for h in held:
            h.release()
    if cfg.compact_control_table:
        with job.timed("compact_control", "compact the control table"):
            compact_control_table(lakehouse, result)
    log.info("expire %s: expired %d versions (oldest retained now %d), deleted %d files (%d failed)", result.run_id,
             len(plan.expired), plan.new_oldest, result.counts["deleted"], result.counts["failed"])
    return result


def _plan(job: _Job) -> _Plan:
    """**plan**: the policy, the floor, the leftovers and the newly expired versions."""
    lh, cfg, result = job.lh, job.cfg, job.result
    with job.timed("plan", "plan the expiration"):
        latest = lh.latest_version()
        d = lh.load_root(latest).lakehouse_def
        listed = sorted({v for v in lh.listed_versions() if v <= latest} | {latest})
        prev_oldest = int(d.oldest_retained_version)
        leftover = [v for v in listed if v < prev_oldest]
        live = [v for v in listed if v >= prev_oldest]
        max_age, keep = effective_retention(cfg, definition_max_age_ms=d.maximum_version_age_millis or None,
                                            definition_min_versions=d.minimum_versions_to_keep or None)
        policy = RetentionPolicy.from_definition(d, max_version_age_ms=max_age, min_versions_to_keep=keep,
                                                 clock_skew_margin_ms=int(cfg.clock_skew_margin))
        times = RootTimes(lh, threads=job.ex.limits.io_threads(lh.storage))
        plan = plan_expiration(live, times, policy, int(cfg.reference_time))
        new_oldest = plan.oldest_retained
        expired = leftover + list(plan.expired)
    log.info("expire %s: %d versions (%d..%d); %d newly expired, %d left over from an earlier run; keeping %d..%d (%s)",
             result.run_id, len(listed), listed[0], latest, len(plan.expired), len(leftover), new_oldest, latest,
             plan.stop_reason)
    doc: dict[str, Any] = {
        "run_id": result.run_id, "lakehouse": lh.uri, "dry_run": result.dry_run, "latest_version": latest,
        "previous_oldest_retained": prev_oldest, "new_oldest_retained": new_oldest,
        "leftover_versions": leftover, "plan": plan.to_dict(),
    }
    result.counts.update({
        "versions": len(listed), "versions_expired": len(plan.expired), "versions_leftover": len(leftover),
        "versions_retained": len(plan.retained),
    })
    result.details["oldest_retained_before"] = prev_oldest
    result.details["oldest_retained_after"] = new_oldest
    result.details["stop_reason"] = plan.stop_reason
    return _Plan(latest, listed, prev_oldest, new_oldest, leftover, expired, list(plan.expired), doc)


def _walk_retained(job: _Job, plan: _Plan) -> tuple[Reached, walk_roots.WalkInput]:
    """**walk_retained**: R, from the versions that stay, pinned exports and pinned versions."""
    with job.timed("walk_retained", "walk the retained versions"):
        inp = walk_roots.walk_input(job.lh, latest=plan.latest, min_version=plan.new_oldest)
        try:
            retained, rst = walk_reachable_with_stats(job.ex, job.lh, inp.roots, label=f"{job.label}: retained",
                                                      sizes=False, name="walk_retained")
        except CorruptNodeError as e:
            raise UnsafeOperationError(f"the files of the retained versions cannot be computed, so nothing was "
                                       f"committed or deleted: {e}") from e
    fill_walk_counts(job.result, rst)
    plan.retained_walk = {"roots": rst.roots, "files": rst.files, "exports": inp.export_roots,
                          "self_contained_exports": inp.self_contained_exports,
                          "pinned_versions": inp.pinned_versions, "warnings": inp.warnings}
    return retained, inp


def _walk_expired(job: _Job, plan: _Plan, retained: Reached) -> Reached:
    """**walk_expired**: reach(expired) - R (missing nodes tolerated)."""
    with job.timed("walk_expired", "walk the expired versions"):
        try:
            expired_reach, cst = walk_reachable_with_stats(
                job.ex, job.lh, [(v, root_name(v)) for v in plan.expired], exclude=retained, sizes=True,
                tolerate_missing=True, label=f"{job.label}: expired", name="walk_expired")
        except CorruptNodeError as e:
            raise UnsafeOperationError(f"the files of the expired versions cannot be enumerated, so nothing was "
                                       f"committed or deleted: {e}") from e
    job.result.details["expired_walk"] = {"levels": cst.levels, "missing": cst.missing, "read_ratio": cst.read_ratio,
                                          "where": cst.where}
    return expired_reach


def _write_plan(job: _Job, plan: _Plan, inp: walk_roots.WalkInput, retained: Reached, expired_reach: Reached
                ) -> _Candidates:
    """**write_plan**: C, filtered and counted, written with ``plan.json`` before any commit."""
    ex, storage, result = job.ex, job.lh.storage, job.result
    with job.timed("write_plan", "write the plan"):
        cands = _Candidates(ex, expired_reach, retained)
        cand_uri = cands.write(storage.uri(f"{job.rdir}/candidates"), storage.options)
        doc = plan.doc
        doc["candidates"] = {"files": cands.files, "bytes": cands.bytes, "location": cand_uri,
                             "by_kind": {k: {"files": n, "bytes": b} for k, (n, b) in cands.by_kind.items()},
                             "not_format_owned_kept": cands.not_owned, "already_deleted": cands.already_gone}
        doc["retained_walk"] = plan.retained_walk
        result.plan_location = write_json(storage, f"{job.rdir}/plan.json", doc)
    result.details["candidates_where"] = cands.rows.where
    result.counts.update({"candidates": cands.files, "skipped_not_owned": cands.not_owned,
                          "already_deleted": cands.already_gone})
    for k, (n, b) in cands.by_kind.items():
        result.counts[f"candidates_{k}"] = n
        result.bytes[f"candidates_{k}"] = b
    result.bytes["candidates"] = cands.bytes
    result.output_location = cand_uri
    return cands


def _commit_phase(job: _Job, plan: _Plan) -> None:
    """**commit**: the new floor, in a new version (only when versions were newly expired)."""
    with job.timed("commit", "commit the new oldest retained version"):
        if plan.newly_expired:
            committed = _commit(job.lh, plan.new_oldest, job.result)
            job.result.version_after = committed
            job.result.details["commit_version"] = committed
        crash_point("expire_after_commit")


def _walk_new(job: _Job, plan: _Plan, inp: walk_roots.WalkInput, retained: Reached, cands: _Candidates,
              held: list[Reached | _Candidates]) -> _Candidates:
    """**walk_new**: files of versions (and exports) committed since the plan leave C; what is
    deleted is persisted too when it is no longer the planned candidates. Returns C (on the
    executors when the new versions' walk went there); what it holds joins `held`."""
    ex, result, storage = job.ex, job.result, job.lh.storage
    n_cands = cands.files
    with job.timed("walk_new", "walk versions committed since the plan"):
        inp2 = walk_roots.walk_input(job.lh, latest=job.lh.latest_version(), min_version=plan.new_oldest)
        seen = set(inp.roots)
        new_roots = [r for r in inp2.roots if r not in seen]
        if new_roots:
            try:
                extra, _ = walk_reachable_with_stats(ex, job.lh, new_roots, exclude=retained, sizes=False,
                                                     label=f"{job.label}: new versions", name="walk_new")
            except CorruptNodeError as e:
                raise UnsafeOperationError(f"versions committed since the plan cannot be walked; nothing was "
                                           f"deleted (the expiration is committed; re-run to delete): {e}") from e
            held.append(extra)
            cands.drop_reached(extra)
            result.counts["new_roots_walked"] = len(new_roots)
        n_final = cands.count()
    if n_final != n_cands:
        log.info("expire %s: %d candidates are reachable from versions committed since the plan; kept",
                 result.run_id, n_cands - n_final)
        # What is deleted is no longer the persisted candidates: persist it too, before deleting.
        result.details["delete_location"] = cands.write(storage.uri(f"{job.rdir}/to_delete"), storage.options)
    return cands


def _delete_phase(job: _Job, plan: _Plan, cands: _Candidates) -> None:
    """**delete**: C deepest level first, the expired roots last; then ``result.json``."""
    result = job.result
    planned_bytes = result.bytes["candidates"]
    with job.timed("delete", "delete the expired files"):
        out = _delete_levels(job.ex, job.lh, cands, plan.expired, job.cfg, result)
    result.counts["deleted"] = out.deleted
    result.counts["failed"] = out.failed
    result.counts["delete_batches"] = out.batches
    if out.failed == 0:
        result.bytes["deleted"] = planned_bytes
    write_json(job.lh.storage, f"{job.rdir}/result.json", result.to_dict())


def _commit(lh: Lakehouse, new_oldest: int, result: JobResult) -> int:
    def advance(d: LakehouseDef) -> None:
        pinned = {name: v for name, v in d.exported_snapshot_pins.items() if v < new_oldest}
        if pinned:
            raise UnsafeOperationError(
                f"exports {sorted(pinned)} now pin versions {sorted(set(pinned.values()))}, older than {new_oldest}: "
                "an export was recorded concurrently; re-run the expiration"
            )
        if d.oldest_retained_version < new_oldest:
            d.oldest_retained_version = new_oldest

    txn = lh.begin()
    txn.mutate_definition(advance, f"expire versions older than {new_oldest}")
    version = txn.commit(command="expire", arguments={"run_id": result.run_id, "oldest_retained_version": new_oldest})
    assert version is not None  # a definition mutation always commits a version
    log.info("expire %s: committed version %s with oldest_retained_version %d", result.run_id, version, new_oldest)
    return version


def _delete_levels(ex: Execution, lh: Lakehouse, cands: _Candidates, expired: list[int], cfg: ExpireConfig,
                   result: JobResult) -> DeleteOutcome:
    """Delete non-root candidates deepest level first, then the expired roots, oldest first."""
    total = DeleteOutcome()
    levels = cands.levels()
    for depth in sorted(levels, reverse=True):
        out = delete_keys(ex, lh.storage, cands.level(depth).native, levels[depth], batch_size=cfg.delete_batch_size,
                          max_retries=cfg.max_retries, what=f"files at depth {depth}")
        total.add(out)
        crash_point("expire_mid_delete")  # after the deepest level, before the shallower ones
        if out.failed:
            raise StorageError(
                f"{out.failed} of {levels[depth]} files at depth {depth} could not be deleted (e.g. "
                f"{out.failures[:3]}); shallower files and the expired root files were left in place so that a "
                "re-run finds and deletes them"
            )
    crash_point("expire_before_roots")
    present = cands.root_paths()
    roots = [root_name(v) for v in sorted(expired) if root_name(v) in present]
    out = delete_on_driver(lh.storage, roots, batch_size=cfg.delete_batch_size, max_retries=cfg.max_retries,
                           what="expired root files")
    total.add(out)
    result.counts["deleted_roots"] = out.deleted
    if out.failed:
        raise StorageError(f"{out.failed} expired root files could not be deleted (e.g. {out.failures[:3]}); "
                           "re-run the job to finish")
    return total
