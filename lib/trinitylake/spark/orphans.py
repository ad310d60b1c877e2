"""The `orphans` job: delete old, format-owned files that nothing retained references.

Phases:

1. **check** (driver): the minimum age is ``older_than`` or the lakehouse's transaction TTL,
   never less than the TTL unless ``unsafe_min_age`` (`config.effective_orphan_min_age`);
   ages count back from ``reference_time``.
2. **list**: the driver lists the root (root files, ``_lakehouse_def_*``, the first-level
   hash folders ``[01]{4}/``) and the second level of each hash folder (up to 256 prefixes);
   executors list those prefixes recursively, a few per task with I/O threads. Folders that
   are not hash folders (``_control/``, ``_maintenance/``, table data, anything foreign) are
   never listed. Only format-owned names are kept.
3. **walk**: R = reach(every retained version, export root and pinned version).
4. **diff**: candidates = listed files older than the cutoff ``left_anti`` R, on walk keys
   (relative paths inside the root). References that name files of this lakehouse through
   another scheme or authority are detected (`maintenance.orphans.mismatch_key`): by default
   the run stops if one matches a candidate (``prefix_mismatch: error``); ``ignore`` keeps
   those files.
5. The plan and the candidates (path, size, mtime) are written under
   ``_maintenance/orphans/<run_id>/``; a dry run stops here.
6. **delete**: executors delete the candidates in bulk batches with retries.

Idempotent: a re-run lists again; files already deleted are simply not listed.
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trinitylake.config import effective_orphan_min_age, format_duration, format_timestamp
from trinitylake.errors import CorruptNodeError, StorageError, UnsafeOperationError
from trinitylake.format.definitions import DEFAULT_TXN_TTL_MILLIS
from trinitylake.format.paths import is_format_owned
from trinitylake.maintenance import orphans as O
from trinitylake.maintenance import reach as R
from trinitylake.maintenance.plan import run_dir, write_json
from trinitylake.maintenance.results import JobResult
from trinitylake.spark.common import DeleteBudget, Phases, partitions_for
from trinitylake.spark.delete import delete_keys
from trinitylake.spark.output import write_parquet
from trinitylake.spark.walk import _fill_walk_counts, walk_reachable_with_stats
from trinitylake.storage import Storage
from trinitylake.storage.uri import parse_uri

log = logging.getLogger(__name__)

_LISTING_DDL = "path string, size bigint, mtime double, owned boolean"
_MISMATCH_DDL = "path string, reference string"
# Prefixes an executor task lists (each is a small subtree: 1/256 of the hash space).
_PREFIXES_PER_TASK = 4


def _list_partition(storage: Storage, io_threads: int, rows: Any) -> Any:
    prefixes = [r[0] for r in rows]

    def one(prefix: str) -> list[tuple[str, int, float, bool]]:
        return [(f.path, int(f.size), float(f.mtime), is_format_owned(f.path)) for f in storage.list(prefix)]

    if not prefixes:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(io_threads, len(prefixes)))) as pool:
        for files in pool.map(one, prefixes):
            yield from files


def _mismatch_partition(root_uri: str, export_dirs: list[str], rows: Any) -> Any:
    root = parse_uri(root_uri)
    for r in rows:
        key = O.mismatch_key(r[0], root, export_dirs)
        if key is not None:
            yield key, r[0]


def list_lakehouse(spark: Any, storage: Storage, *, io_threads: int = 8, result: JobResult | None = None) -> tuple[Any, dict[str, int]]:
    """Distributed listing of the format-owned part of a lakehouse.

    Returns a DataFrame ``[path, size, mtime, owned]`` (relative paths) and counts.
    """
    top_dirs, top_files = storage.list_dirs("")
    hash_dirs, skipped, owned_top, not_owned_top = O.split_top_level(
        top_dirs, [(f.path, f.size, f.mtime) for f in top_files])
    prefixes: list[str] = []
    not_owned_second = 0

    def second(d: str) -> tuple[list[str], int]:
        subdirs, files = storage.list_dirs(d)
        subs = [s for s in subdirs if O.is_hash_dir(s)]
        # Files directly in a first-level hash folder, or folders that are not hash folders,
        # cannot be format-owned; list the foreign folders anyway so that they are counted.
        others = [s for s in subdirs if not O.is_hash_dir(s)]
        return subs + others, len(files)

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hash_dirs) or 1))) as pool:
        for subs, n_files in pool.map(second, hash_dirs):
            prefixes.extend(subs)
            not_owned_second += n_files
    top_rows = [(p, int(s), float(m), True) for p, s, m in owned_top]
    parts = partitions_for(spark, len(prefixes), _PREFIXES_PER_TASK)
    listed = spark.createDataFrame(top_rows, _LISTING_DDL)
    if prefixes:
        rdd = (spark.sparkContext.parallelize([(p,) for p in prefixes], parts)
               .mapPartitions(functools.partial(_list_partition, storage, io_threads)))
        listed = listed.unionByName(spark.createDataFrame(rdd, _LISTING_DDL, verifySchema=False))
    counts = {"top_level_files": len(top_files), "skipped_folders": len(skipped), "hash_folders": len(hash_dirs),
              "list_prefixes": len(prefixes), "list_tasks": parts if prefixes else 0,
              "not_owned": not_owned_top + not_owned_second}
    if result is not None:
        result.details["skipped_folders"] = skipped[:50]
    return listed, counts


def run_orphans(spark: Any, lakehouse: Any, cfg: Any, result: JobResult) -> JobResult:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    phase = Phases(spark, result)
    lh = lakehouse
    storage = lh.storage
    rdir = run_dir("orphans", result.run_id)
    result.dry_run = bool(cfg.dry_run)
    with phase("check", "check the age floor"):
        latest = lh.latest_version()
        d = lh.load_root(latest).lakehouse_def
        ttl = int(d.txn_ttl_millis or DEFAULT_TXN_TTL_MILLIS)
        min_age = effective_orphan_min_age(cfg, txn_ttl_ms=ttl)
        cutoff = O.AgeCutoff(int(cfg.reference_time), min_age)
    log.info("orphans %s: files modified before %s (reference %s - %s) may be deleted", result.run_id,
             format_timestamp(cutoff.cutoff_ms), format_timestamp(cutoff.reference_ms), format_duration(min_age))
    doc: dict[str, Any] = {"run_id": result.run_id, "lakehouse": lh.uri, "dry_run": result.dry_run,
                           "latest_version": latest, "txn_ttl_ms": ttl, "min_age_ms": min_age,
                           "reference_time": format_timestamp(cutoff.reference_ms),
                           "cutoff": format_timestamp(cutoff.cutoff_ms), "prefix_mismatch": cfg.prefix_mismatch}
    result.details["cutoff"] = doc["cutoff"]
    persisted: list[Any] = []

    def keep(df: Any) -> Any:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        persisted.append(df)
        return df

    try:
        with phase("list", "list the lakehouse"):
            listed, lcounts = list_lakehouse(spark, storage, result=result)
            listed = keep(listed)
            is_old = F.col("owned") & (F.col("mtime") > 0) & (F.col("mtime") < F.lit(cutoff.cutoff_s))
            agg = listed.agg(F.count("*").alias("n"), F.sum(F.col("owned").cast("int")).alias("owned"),
                             F.sum(F.when(F.col("owned"), F.col("size"))).alias("b"),
                             F.sum(is_old.cast("int")).alias("old")).collect()[0]
        n_rows, n_owned = int(agg["n"]), int(agg["owned"] or 0)
        young = n_owned - int(agg["old"] or 0)
        lcounts["not_owned"] += n_rows - n_owned
        result.counts["listed"] = n_owned + lcounts["not_owned"]
        result.counts["listed_owned"] = n_owned
        result.counts["listed_not_owned"] = lcounts["not_owned"]
        result.bytes["listed_owned"] = int(agg["b"] or 0)
        doc["listing"] = lcounts
        log.info("orphans %s: listed %d files (%d format-owned) under %d prefixes", result.run_id,
                 result.counts["listed"], n_owned, lcounts["list_prefixes"])

        with phase("walk", "walk the retained versions"):
            inp = R.walk_input(lh, latest=latest)
            try:
                reach_df, rst = walk_reachable_with_stats(spark, lh, inp.roots, sizes=False,
                                                          label=f"tlake orphans {result.run_id}: walk")
            except CorruptNodeError as e:
                raise UnsafeOperationError(f"the referenced files cannot be computed, so nothing was deleted: {e}") from e
            persisted.append(reach_df)
        _fill_walk_counts(result, rst)
        doc["walk"] = {"roots": rst.roots, "files": rst.files, "exports": inp.export_roots,
                       "pinned_versions": inp.pinned_versions, "warnings": inp.warnings}

        with phase("diff", "find the orphans"):
            cands = listed.filter(is_old).join(reach_df.select("path"), "path", "left_anti").select(
                "path", "size", "mtime")
            n_clash = 0
            if rst.outside:
                # Only references outside the root can alias a file inside it.
                foreign = reach_df.filter(F.col("path").contains("://")).select("path")
                export_dirs = O.export_root_dirs(inp.export_roots.values())
                mism = spark.createDataFrame(
                    foreign.rdd.mapPartitions(functools.partial(_mismatch_partition, storage.root, export_dirs)),
                    _MISMATCH_DDL, verifySchema=False)
                clash = cands.join(mism, "path", "inner")
                n_clash = clash.count()
            if n_clash:
                sample = [(r["path"], r["reference"]) for r in clash.limit(5).collect()]
                msg = (f"{n_clash} orphan candidates are referenced through another scheme or authority (e.g. "
                       + "; ".join(f"{p} referenced as {ref}" for p, ref in sample) + ")")
                if cfg.prefix_mismatch == "error":
                    raise UnsafeOperationError(msg + "; nothing was deleted. Fix the references, or pass "
                                               "--prefix-mismatch ignore to keep those files and go on")
                log.warning("%s; keeping them (prefix_mismatch=ignore)", msg)
                cands = cands.join(mism.select("path"), "path", "left_anti")
            cands = keep(cands)
            agg = cands.agg(F.count("*").alias("n"), F.sum("size").alias("b")).collect()[0]
            n_cands, b_cands = int(agg["n"]), int(agg["b"] or 0)
        result.counts.update({"candidates": n_cands, "too_young": young, "prefix_mismatch": n_clash})
        result.bytes["candidates"] = b_cands
        log.info("orphans %s: %d candidates (%d bytes); %d owned files too young; %d reachable", result.run_id,
                 n_cands, b_cands, young, rst.total_files)

        with phase("write_plan", "write the plan"):
            cand_uri = write_parquet(cands, storage.uri(f"{rdir}/candidates"), storage.options, rows=n_cands)
            doc["candidates"] = {"files": n_cands, "bytes": b_cands, "location": cand_uri, "too_young": young,
                                 "prefix_mismatch": n_clash}
            result.plan_location = write_json(storage, f"{rdir}/plan.json", doc)
            result.output_location = cand_uri
        if result.dry_run:
            result.counts.update({"deleted": 0, "failed": 0})
            return result

        with phase("delete", "delete the orphans"):
            out = delete_keys(spark, storage, cands, n_cands, batch_size=cfg.delete_batch_size,
                              max_retries=cfg.max_retries, budget=DeleteBudget.from_env(), what="orphan files")
        result.counts.update({"deleted": out.deleted, "failed": out.failed, "delete_batches": out.batches})
        if out.failed == 0:
            result.bytes["deleted"] = b_cands
        write_json(storage, f"{rdir}/result.json", result.to_dict())
        if out.failed:
            result.details["failures"] = out.failures
            raise StorageError(f"{out.failed} of {n_cands} orphan files could not be deleted (e.g. "
                               f"{out.failures[:3]}); re-run the job")
    finally:
        for df in persisted:
            df.unpersist()
    return result
