"""The `expire` job: expire old versions, commit first, then delete what only they reached.

Phases (each labelled in the Spark UI and timed in the result):

1. **plan** (driver): the latest lakehouse definition gives the policy (overridden by the
   job's flags) and ``oldest_retained_version``; root files below it that still exist are
   *leftovers* of an earlier run that was interrupted after its commit. The planner
   (`maintenance.retention.plan_expiration`) picks the newly expired oldest prefix, reading
   only the root files it needs.
2. **walk_retained**: R = every file reachable from the versions that stay (oldest retained
   .. latest), exports and pinned versions. Any missing or unreadable node stops the run
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
7. **delete**: C's files in *descending depth* order, one level at a time, on the executors
   in bulk batches with retries; the root files of the expired versions **last**, from the
   driver, oldest first.

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
from typing import Any

from trinitylake.config import effective_retention
from trinitylake.errors import CorruptNodeError, StorageError, UnsafeOperationError, VersionNotFoundError
from trinitylake.format.keys import SYS_CREATED_AT
from trinitylake.format.node import deserialize
from trinitylake.format.paths import LAKEHOUSE_DEF_RE, OWNED_HASHED_RE, ROOT_RE, root_name
from trinitylake.maintenance import reach as R
from trinitylake.maintenance.plan import run_dir, write_json
from trinitylake.maintenance.results import JobResult
from trinitylake.maintenance.retention import RetentionPolicy, plan_expiration
from trinitylake.spark.common import DeleteBudget, Phases, crash_point
from trinitylake.spark.delete import DeleteOutcome, delete_keys, delete_on_driver
from trinitylake.spark.output import write_parquet
from trinitylake.spark.walk import _fill_walk_counts, walk_reachable_with_stats

log = logging.getLogger(__name__)

OWNED_SQL_PATTERNS = (ROOT_RE.pattern, LAKEHOUSE_DEF_RE.pattern, OWNED_HASHED_RE.pattern)


class RootTimes:
    """``created_at_millis`` of root files, read on demand with look-ahead (the planner asks
    for consecutive versions; reading 32 at a time hides object-store latency)."""

    def __init__(self, lakehouse: Any, lookahead: int = 32, threads: int = 16):
        self.reader = R.Reader(lakehouse.storage.root, lakehouse.storage.options)
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


def _owned(col: Any) -> Any:
    cond = None
    for p in OWNED_SQL_PATTERNS:
        c = col.rlike(p)
        cond = c if cond is None else (cond | c)
    return cond


def compact_control_table(lakehouse: Any, result: JobResult) -> None:
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


def run_expire(spark: Any, lakehouse: Any, cfg: Any, result: JobResult) -> JobResult:
    from pyspark.sql import functions as F

    phase = Phases(spark, result)
    lh = lakehouse
    storage = lh.storage
    rdir = run_dir("expire", result.run_id)
    now = int(cfg.reference_time)
    result.dry_run = bool(cfg.dry_run)

    with phase("plan", "plan the expiration"):
        latest = lh.latest_version()
        d = lh.load_root(latest).lakehouse_def
        listed = sorted({v for v in lh._listed_versions() if v <= latest} | {latest})
        prev_oldest = int(d.oldest_retained_version)
        leftover = [v for v in listed if v < prev_oldest]
        live = [v for v in listed if v >= prev_oldest]
        max_age, keep = effective_retention(cfg, definition_max_age_ms=d.maximum_version_age_millis or None,
                                            definition_min_versions=d.minimum_versions_to_keep or None)
        policy = RetentionPolicy.from_definition(d, max_version_age_ms=max_age, min_versions_to_keep=keep,
                                                 clock_skew_margin_ms=int(cfg.clock_skew_margin))
        times = RootTimes(lh)
        plan = plan_expiration(live, times, policy, now)
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
    if not expired:
        result.counts.update({"candidates": 0, "deleted": 0, "failed": 0})
        result.plan_location = write_json(storage, f"{rdir}/plan.json", doc)
        if not result.dry_run and cfg.compact_control_table:
            with phase("compact_control", "compact the control table"):
                compact_control_table(lh, result)
        return result

    with phase("walk_retained", "walk the retained versions"):
        inp = R.walk_input(lh, latest=latest, min_version=new_oldest)
        try:
            retained_df, rst = walk_reachable_with_stats(spark, lh, inp.roots, label=f"tlake expire {result.run_id}: retained",
                                                         sizes=False)
        except CorruptNodeError as e:
            raise UnsafeOperationError(f"the files of the retained versions cannot be computed, so nothing was "
                                       f"committed or deleted: {e}") from e
    _fill_walk_counts(result, rst)
    persisted = [retained_df]
    try:
        with phase("walk_expired", "walk the expired versions"):
            try:
                cand_df, cst = walk_reachable_with_stats(
                    spark, lh, [(v, root_name(v)) for v in expired], exclude=retained_df, sizes=True,
                    tolerate_missing=True, label=f"tlake expire {result.run_id}: expired")
            except CorruptNodeError as e:
                raise UnsafeOperationError(f"the files of the expired versions cannot be enumerated, so nothing was "
                                           f"committed or deleted: {e}") from e
            persisted.append(cand_df)
        result.details["expired_walk"] = {"levels": cst.levels, "missing": cst.missing, "read_ratio": cst.read_ratio}
        owned = _owned(F.col("path"))
        present = F.col("size") >= 0
        cands = cand_df.filter(owned & present)
        with phase("write_plan", "write the plan"):
            by_kind: dict[str, tuple[int, int]] = {}
            not_owned = already_gone = 0
            groups = cand_df.groupBy("kind", owned.alias("owned"), present.alias("present")).agg(
                F.count("*").alias("n"), F.sum("size").alias("b"))
            for r in groups.collect():
                if not r["owned"]:
                    not_owned += int(r["n"])
                elif not r["present"]:
                    already_gone += int(r["n"])
                else:
                    by_kind[r["kind"]] = (int(r["n"]), int(r["b"] or 0))
            n_cands = sum(n for n, _ in by_kind.values())
            bytes_cands = sum(b for _, b in by_kind.values())
            cand_uri = write_parquet(cands, storage.uri(f"{rdir}/candidates"), storage.options, rows=n_cands)
            doc["candidates"] = {"files": n_cands, "bytes": bytes_cands, "location": cand_uri,
                                 "by_kind": {k: {"files": n, "bytes": b} for k, (n, b) in by_kind.items()},
                                 "not_format_owned_kept": not_owned, "already_deleted": already_gone}
            doc["retained_walk"] = {"roots": rst.roots, "files": rst.files, "exports": inp.export_roots,
                                    "pinned_versions": inp.pinned_versions, "warnings": inp.warnings}
            result.plan_location = write_json(storage, f"{rdir}/plan.json", doc)
        result.counts.update({"candidates": n_cands, "skipped_not_owned": not_owned, "already_deleted": already_gone})
        for k, (n, b) in by_kind.items():
            result.counts[f"candidates_{k}"] = n
            result.bytes[f"candidates_{k}"] = b
        result.bytes["candidates"] = bytes_cands
        result.output_location = cand_uri
        if result.dry_run:
            log.info("expire %s (dry run): would expire %d versions and delete %d files (%d bytes); plan at %s",
                     result.run_id, len(expired), n_cands, bytes_cands, result.plan_location)
            return result

        with phase("commit", "commit the new oldest retained version"):
            if plan.expired:
                committed = _commit(lh, new_oldest, result)
                result.version_after = committed
                result.details["commit_version"] = committed
            crash_point("expire_after_commit")

        with phase("walk_new", "walk versions committed since the plan"):
            latest2 = lh.latest_version()
            inp2 = R.walk_input(lh, latest=latest2, min_version=new_oldest)
            seen = set(inp.roots)
            new_roots = [r for r in inp2.roots if r not in seen]
            if new_roots:
                try:
                    extra_df, xst = walk_reachable_with_stats(spark, lh, new_roots, exclude=retained_df, sizes=False,
                                                              label=f"tlake expire {result.run_id}: new versions")
                except CorruptNodeError as e:
                    raise UnsafeOperationError(f"versions committed since the plan cannot be walked; nothing was "
                                               f"deleted (the expiration is committed; re-run to delete): {e}") from e
                persisted.append(extra_df)
                cands = cands.join(extra_df.select("path"), "path", "left_anti")
                result.counts["new_roots_walked"] = len(new_roots)
        cands = cands.persist()
        persisted.append(cands)
        n_final = cands.count()
        if n_final != n_cands:
            log.info("expire %s: %d candidates are reachable from versions committed since the plan; kept",
                     result.run_id, n_cands - n_final)

        with phase("delete", "delete the expired files"):
            out = _delete_levels(spark, lh, cands, expired, cfg, result)
        result.counts["deleted"] = out.deleted
        result.counts["failed"] = out.failed
        result.counts["delete_batches"] = out.batches
        if out.failed == 0:
            result.bytes["deleted"] = bytes_cands
        write_json(storage, f"{rdir}/result.json", result.to_dict())
    finally:
        for df in persisted:
            df.unpersist()
    if cfg.compact_control_table:
        with phase("compact_control", "compact the control table"):
            compact_control_table(lh, result)
    log.info("expire %s: expired %d versions (oldest retained now %d), deleted %d files (%d failed)", result.run_id,
             len(expired), new_oldest, result.counts["deleted"], result.counts["failed"])
    return result


def _commit(lh: Any, new_oldest: int, result: JobResult) -> int:
    def advance(d: Any) -> None:
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
    log.info("expire %s: committed version %s with oldest_retained_version %d", result.run_id, version, new_oldest)
    return version


def _delete_levels(spark: Any, lh: Any, cands: Any, expired: list[int], cfg: Any, result: JobResult) -> DeleteOutcome:
    """Delete non-root candidates deepest level first, then the expired roots, oldest first."""
    from pyspark.sql import functions as F

    budget = DeleteBudget.from_env()
    total = DeleteOutcome()
    non_roots = cands.filter(F.col("kind") != R.KIND_ROOT)
    levels = {int(r["depth"]): int(r["n"]) for r in non_roots.groupBy("depth").count().withColumnRenamed("count", "n")
              .collect()}
    for depth in sorted(levels, reverse=True):
        spark.sparkContext.setJobDescription(f"tlake expire {result.run_id}: delete {levels[depth]} files at depth {depth}")
        out = delete_keys(spark, lh.storage, non_roots.filter(F.col("depth") == depth), levels[depth],
                          batch_size=cfg.delete_batch_size, max_retries=cfg.max_retries, budget=budget,
                          what=f"files at depth {depth}")
        total.add(out)
        if out.failed:
            raise StorageError(
                f"{out.failed} of {levels[depth]} files at depth {depth} could not be deleted (e.g. "
                f"{out.failures[:3]}); shallower files and the expired root files were left in place so that a "
                "re-run finds and deletes them"
            )
    crash_point("expire_before_roots")
    present = {r["path"] for r in cands.filter(F.col("kind") == R.KIND_ROOT).select("path").collect()}
    roots = [root_name(v) for v in sorted(expired) if root_name(v) in present]
    out = delete_on_driver(lh.storage, roots, batch_size=cfg.delete_batch_size, max_retries=cfg.max_retries,
                           budget=budget, what="expired root files")
    total.add(out)
    result.counts["deleted_roots"] = out.deleted
    if out.failed:
        raise StorageError(f"{out.failed} expired root files could not be deleted (e.g. {out.failures[:3]}); "
                           "re-run the job to finish")
    return total
