"""The `orphans` job: delete old, format-owned files that nothing retained references.

Phases (each placed on the driver or the executors, `trinitylake.spark.execution`):

1. **check** (driver): the minimum age is ``older_than`` or the lakehouse's transaction TTL,
   never less than the TTL unless ``unsafe_min_age`` (`rules.effective_orphan_min_age`);
   ages count back from ``reference_time``.
2. **list** (`trinitylake.jobs.orphans.listing`): the driver lists the root (root files, ``_lakehouse_def_*``, the first-level
   hash folders ``[01]{4}/``) and the second level of each hash folder (up to 256 prefixes),
   then the prefixes recursively: on the driver with a thread pool (a local filesystem is
   scanned with ``os.scandir`` directly), or on the executors (``mapInArrow`` over a table of
   prefixes, a few per task with I/O threads). Folders that are not hash folders
   (``_control/``, ``_maintenance/``, table data, anything foreign) are never listed. Only
   format-owned names are candidates.
3. **walk**: R = reach(every retained version, pinned export's root and pinned version;
   self-contained exports are not walked, `maintenance.walk_roots`). A walk that
   fails refuses the run (`UnsafeOperationError`): nothing is deleted. Its roots are fixed by
   the check phase, so unless ``execution`` is ``distributed`` it runs in a thread while the
   driver lists (node parsing overlaps the listing's filesystem waits); only the walk may
   start Spark meanwhile, a listing handed over to the executors waits for it.
4. **diff**: candidates = listed owned files older than the cutoff, minus R, on walk keys
   (relative paths inside the root): Arrow compute on the driver (``is_in``) when both sides
   are driver-held, else a ``left_anti`` join. References that name files of this lakehouse
   through another scheme or authority are detected (`jobs.orphans.rules.mismatch_key`): by
   default the run stops if one matches a candidate (``prefix_mismatch: error``); ``ignore``
   keeps those files.
5. **write_plan**: the plan and the candidates (path, size, mtime) are written under
   ``_maintenance/orphans/<run_id>/`` BEFORE anything is deleted; a dry run stops here.
6. **delete**: the candidates are deleted in bulk batches with retries (driver threads or
   executors, by their number). Local files are unlinked relative to each open folder
   (`trinitylake.storage.local_storage`), with the storage's retries and fault seam.

Crash safety and idempotence: the job changes nothing but deleting candidates, which were
unreferenced and older than the floor when it listed them; a crash anywhere leaves a subset
deleted and a re-run lists again (files already deleted are simply not listed).

"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trinitylake import rowsets
from trinitylake.config import format_duration, format_timestamp
from trinitylake.errors import CorruptNodeError, StorageError, UnsafeOperationError
from trinitylake.format.definitions import DEFAULT_TXN_TTL_MILLIS
from trinitylake.jobs.orphans import rules as orphan_rules
from trinitylake.jobs.orphans.listing import Listing, list_on_driver, list_rest_distributed
from trinitylake.jobs.orphans.rules import effective_orphan_min_age
from trinitylake.rowsets import RowSet
from trinitylake.runs.folder import run_dir, write_json
from trinitylake.runs.results import JobResult
from trinitylake.spark.delete import delete_keys
from trinitylake.spark.execution import DISTRIBUTED, Execution, timed
from trinitylake.storage.uri import parse_uri
from trinitylake.treewalk import walk_roots, walk_rules
from trinitylake.treewalk.walk_rows import Reached, WalkStats, fill_walk_counts
from trinitylake.treewalk.walker import walk_reachable_with_stats

if TYPE_CHECKING:
    from pyspark.sql import Column

    from trinitylake.config import OrphansConfig
    from trinitylake.lakehouse import Lakehouse

log = logging.getLogger(__name__)

CANDIDATE_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("mtime", pa.float64())])
MISMATCH_SCHEMA = pa.schema([("path", pa.string()), ("reference", pa.string())])
def mismatch_task(root_uri: str, export_dirs: list[str], batches: Iterator[pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: reached references naming a file of the root another way."""
    root = parse_uri(root_uri)
    for b in batches:
        keys, refs = [], []
        for ref in b.column(b.schema.get_field_index("path")).to_pylist():
            key = orphan_rules.mismatch_key(ref, root, export_dirs)
            if key is not None:
                keys.append(key)
                refs.append(ref)
        if keys:
            yield pa.RecordBatch.from_arrays([pa.array(keys, pa.string()), pa.array(refs, pa.string())],
                                             schema=MISMATCH_SCHEMA)


# ---- the job ---------------------------------------------------------------------------------
@dataclass
class _Job:
    """What every phase of one run reads: the execution, lakehouse, options, result, the run's
    folder (``_maintenance/orphans/<run_id>``) and its plan document (filled phase by phase)."""

    ex: Execution
    lh: Lakehouse
    cfg: OrphansConfig
    result: JobResult
    rdir: str
    doc: dict[str, Any] = field(default_factory=dict)

    def timed(self, name: str, what: str) -> AbstractContextManager[None]:
        return timed(self.result.seconds, name, what, job=f"orphans {self.result.run_id}")


@dataclass
class _Held:
    """What the run holds until it ends: the walk's result and the rows its steps kept."""

    reached: Reached | None = None
    rows: list[RowSet] = field(default_factory=list)

    def release(self) -> None:
        if self.reached is not None:
            self.reached.release()
        for r in self.rows:
            r.release()


def run_orphans(ex: Execution, lakehouse: Lakehouse, cfg: OrphansConfig, result: JobResult) -> JobResult:
    result.dry_run = bool(cfg.dry_run)
    job = _Job(ex, lakehouse, cfg, result, run_dir("orphans", result.run_id))
    latest, cutoff = _check(job)
    held = _Held()
    try:
        listing, inp, rst = _list_and_walk(job, latest, held)
        young = _count_listing(job, listing, cutoff, held)
        _record_walk(job, inp, rst)
        assert held.reached is not None
        cands, n_cands, b_cands, n_clash = _diff(job, listing, held.reached, rst, inp, cutoff, held)
        del listing  # the candidates are computed: let the listing go
        result.counts.update({"candidates": n_cands, "too_young": young, "prefix_mismatch": n_clash})
        result.bytes["candidates"] = b_cands
        log.info("orphans %s: %d candidates (%d bytes); %d owned files too young; %d reachable", result.run_id,
                 n_cands, b_cands, young, rst.total_files)
        _write_plan(job, cands, n_cands, b_cands, young, n_clash)
        if result.dry_run:
            result.counts.update({"deleted": 0, "failed": 0})
            return result
        _delete(job, cands, n_cands, b_cands)
    finally:
        held.release()
    return result


def _check(job: _Job) -> tuple[int, orphan_rules.AgeCutoff]:
    """**check**: the age floor (never below the transaction TTL unless unsafe), and the start
    of the plan document."""
    lh, cfg, result = job.lh, job.cfg, job.result
    with job.timed("check", "check the age floor"):
        latest = lh.latest_version()
        d = lh.load_root(latest).lakehouse_def
        ttl = int(d.txn_ttl_millis or DEFAULT_TXN_TTL_MILLIS)
        min_age = effective_orphan_min_age(cfg, txn_ttl_ms=ttl)
        cutoff = orphan_rules.AgeCutoff(int(cfg.reference_time), min_age)
    log.info("orphans %s: files modified before %s (reference %s - %s) may be deleted", result.run_id,
             format_timestamp(cutoff.cutoff_ms), format_timestamp(cutoff.reference_ms), format_duration(min_age))
    job.doc.update({"run_id": result.run_id, "lakehouse": lh.uri, "dry_run": result.dry_run,
                    "latest_version": latest, "txn_ttl_ms": ttl, "min_age_ms": min_age,
                    "reference_time": format_timestamp(cutoff.reference_ms),
                    "cutoff": format_timestamp(cutoff.cutoff_ms), "prefix_mismatch": cfg.prefix_mismatch})
    result.details["cutoff"] = job.doc["cutoff"]
    return latest, cutoff


def _walk(job: _Job, latest: int) -> tuple[walk_roots.WalkInput, Reached, WalkStats, float]:
    """**walk**: R = reach(every retained version, pinned export's root and pinned version;
    self-contained exports reference no source file and are not walked)."""
    t0 = time.perf_counter()
    inp = walk_roots.walk_input(job.lh, latest=latest)
    try:
        reached, rst = walk_reachable_with_stats(job.ex, job.lh, inp.roots, sizes=False, name="walk",
                                                 label=f"tlake orphans {job.result.run_id}: walk")
    except CorruptNodeError as e:
        raise UnsafeOperationError(f"the referenced files cannot be computed, so nothing was deleted: {e}") from e
    return inp, reached, rst, time.perf_counter() - t0


def _list_and_walk(job: _Job, latest: int, held: _Held) -> tuple[Listing, walk_roots.WalkInput, WalkStats]:
    """**list** and **walk**, side by side where that pays (their seconds: ``list`` and ``walk``).

    The walk's roots were fixed by the check (`latest`), so it may run while the driver lists an
    object store: the walk reads nodes (Python) while the listing waits on the network. Not on
    local files: there the listing is Python and system calls too, and each stat hands the
    interpreter lock to the walk and waits to get it back (20k tables, 121k files: listing
    2.8 s beside the walk, 1.0-1.2 s before it; list + walk 2.0-2.7 s one after the other,
    2.8 s side by side). Only the walk's thread may start Spark; the listing's executor part
    waits for it. The walk's result goes into `held` as soon as it is there."""
    ex, storage = job.ex, job.lh.storage
    overlap = ex.mode != DISTRIBUTED and storage.remote
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="orphans-walk") as bg:
        walking = bg.submit(_walk, job, latest) if overlap else None
        t0 = time.perf_counter()
        try:
            listing = list_on_driver(ex, storage)
        finally:
            t_list = time.perf_counter() - t0
            if walking is not None:
                concurrent.futures.wait([walking])
        if walking is None:
            t1 = time.perf_counter()
            listing = list_rest_distributed(ex, storage, listing) if listing.rest else listing
            t_list += time.perf_counter() - t1
            inp, held.reached, rst, t_walk = _walk(job, latest)
        else:
            inp, held.reached, rst, t_walk = walking.result()
            if listing.rest:
                t1 = time.perf_counter()
                listing = list_rest_distributed(ex, storage, listing)
                t_list += time.perf_counter() - t1
    job.result.details["list_walk_overlap"] = overlap
    job.result.seconds["list"] = round(job.result.seconds.get("list", 0.0) + t_list, 3)
    job.result.seconds["walk"] = round(t_walk, 3)
    return listing, inp, rst


def _count_listing(job: _Job, listing: Listing, cutoff: orphan_rules.AgeCutoff, held: _Held) -> int:
    """The listing's counts (timed into ``list``); returns the owned files too young to go."""
    result = job.result
    with job.timed("list", "count the listing"):
        held.rows.append(listing.rows)
        lcounts = listing.counts
        result.details["skipped_folders"] = lcounts.pop("skipped", [])
        n_rows, n_owned, b_owned, n_old = _listing_counts(listing, cutoff)
    lcounts["not_owned"] += n_rows - n_owned
    result.counts["listed"] = n_owned + lcounts["not_owned"]
    result.counts["listed_owned"] = n_owned
    result.counts["listed_not_owned"] = lcounts["not_owned"]
    result.bytes["listed_owned"] = b_owned
    job.doc["listing"] = lcounts
    log.info("orphans %s: listed %d files (%d format-owned) under %d prefixes (%s)", result.run_id,
             result.counts["listed"], n_owned, lcounts["list_prefixes"],
             listing.rows.where)
    return n_owned - n_old


def _record_walk(job: _Job, inp: walk_roots.WalkInput, rst: WalkStats) -> None:
    """The walk's counts: the walk here does not size what it reaches (the diff needs paths
    only), so the byte counts it did not measure are left out rather than shown as 0 B."""
    result = job.result
    fill_walk_counts(result, rst)
    unsized = [k for k in rst.files if rst.files[k] and not rst.bytes.get(k)]
    for k in unsized:
        result.bytes.pop(f"reachable_{k}", None)
    if unsized:
        result.bytes.pop("reachable", None)
    job.doc["walk"] = {"roots": rst.roots, "files": rst.files, "exports": inp.export_roots,
                       "self_contained_exports": inp.self_contained_exports,
                       "pinned_versions": inp.pinned_versions, "warnings": inp.warnings}


def _diff(job: _Job, listing: Listing, reached: Reached, rst: WalkStats, inp: walk_roots.WalkInput,
          cutoff: orphan_rules.AgeCutoff, held: _Held) -> tuple[RowSet, int, int, int]:
    """**diff**: candidates = old owned files - R, minus (or refused for) references through
    another scheme or authority. Returns (candidates, their count, their bytes, clashes).
    On the driver (Arrow compute) when both sides are driver-held, else on the executors (a
    ``left_anti`` join; a driver-held side is shipped)."""
    ex, storage, cfg = job.ex, job.lh.storage, job.cfg
    with job.timed("diff", "find the orphans"):
        export_dirs = orphan_rules.export_root_dirs(inp.export_roots.values())
        listed, reach = listing.rows, reached.rows
        step = rowsets.place(ex, 0, inputs=(listed, reach))
        with step.phase("diff.join", listing.held_rows + rst.total_files, "find the orphans", on_driver=False):
            cands = (step.rows(listed).filter(_OldOwned(cutoff)).anti_join(reach, "path")
                     .select(*CANDIDATE_SCHEMA.names))
            n_clash, sample, mism = 0, [], None
            if rst.outside:
                foreign = step.rows(reach).filter(_OUTSIDE).select("path")
                mism = foreign.map_batches(functools.partial(mismatch_task, storage.root, export_dirs),
                                           MISMATCH_SCHEMA, step.partitions(rst.outside, 4096)).keep(eager=True)
                held.rows.append(mism)
                clash = mism.semi_join(cands, "path")
                n_clash = clash.distinct_count("path")
                sample = [(str(p), str(r)) for p, r in clash.head(5, "path", "reference")] if n_clash else []
        if n_clash:
            msg = (f"{n_clash} orphan candidates are referenced through another scheme or authority (e.g. "
                   + "; ".join(f"{p} referenced as {ref}" for p, ref in sample) + ")")
            if cfg.prefix_mismatch == "error":
                raise UnsafeOperationError(msg + "; nothing was deleted. Fix the references, or pass "
                                           "--prefix-mismatch ignore to keep those files and go on")
            log.warning("%s; keeping them (prefix_mismatch=ignore)", msg)
            assert mism is not None
            cands = cands.anti_join(mism, "path")
        # Materialized once, by the count just below (one job, not two): the plan and the
        # delete see the very same candidates.
        cands = cands.keep()
        held.rows.append(cands)
        n_cands, b_cands = cands.totals("size")
    return cands, n_cands, b_cands, n_clash


def _write_plan(job: _Job, cands: RowSet, n_cands: int, b_cands: int, young: int, n_clash: int) -> None:
    """**write_plan**: the candidates and ``plan.json``, before anything is deleted; then the
    ``max_candidates`` gate."""
    storage, result = job.lh.storage, job.result
    with job.timed("write_plan", "write the plan"):
        cand_uri = cands.write(storage.uri(f"{job.rdir}/candidates"), storage.options, n_cands)
        job.doc["candidates"] = {"files": n_cands, "bytes": b_cands, "location": cand_uri, "too_young": young,
                                 "prefix_mismatch": n_clash}
        result.plan_location = write_json(storage, f"{job.rdir}/plan.json", job.doc)
        result.output_location = cand_uri
    limit = job.cfg.max_candidates
    if limit is not None and n_cands > limit:
        # Far more unreferenced files than expected usually means the live set is wrong (a
        # lakehouse restored from an old copy, a pointer rewrite gone astray): stop, with the
        # candidate list persisted for a person to look at. The DAG's dry run is this gate.
        raise UnsafeOperationError(
            f"orphans {result.run_id}: {n_cands} candidates exceed max_candidates {limit}; nothing was deleted. "
            f"Inspect them at {cand_uri}; if they are truly unreferenced, re-run with a higher --max-candidates")


def _delete(job: _Job, cands: RowSet, n_cands: int, b_cands: int) -> None:
    """**delete**: the candidates, in bulk batches with retries; then ``result.json``."""
    cfg, storage, result = job.cfg, job.lh.storage, job.result
    with job.timed("delete", "delete the orphans"):
        out = delete_keys(job.ex, storage, cands.native, n_cands, batch_size=cfg.delete_batch_size,
                          max_retries=cfg.max_retries, what="orphan files")
    result.counts.update({"deleted": out.deleted, "failed": out.failed, "delete_batches": out.batches})
    if out.failed == 0:
        result.bytes["deleted"] = b_cands
    write_json(storage, f"{job.rdir}/result.json", result.to_dict())
    if out.failed:
        result.details["failures"] = out.failures
        raise StorageError(f"{out.failed} of {n_cands} orphan files could not be deleted (e.g. "
                           f"{out.failures[:3]}); re-run the job")


def _listing_counts(listing: Listing, cutoff: orphan_rules.AgeCutoff) -> tuple[int, int, int, int]:
    """(rows, owned rows, owned bytes, owned rows older than the cutoff)."""
    n, n_owned, b_owned, n_old = listing.rows.totals(_OWNED, (_OWNED, "size"), _OldOwned(cutoff))
    return n, n_owned, b_owned, n_old


class _Owned:
    """Format-owned rows of a listing."""

    def arrow(self, table: pa.Table) -> pa.ChunkedArray:
        return table.column("owned")

    def column(self, functions: ModuleType) -> Column:
        return functions.col("owned")


class _OldOwned:
    """Owned and old enough (`AgeCutoff`)."""

    def __init__(self, cutoff: orphan_rules.AgeCutoff):
        self.cutoff = cutoff

    def arrow(self, table: pa.Table) -> pa.ChunkedArray:
        return pc.and_(table.column("owned"), self.cutoff.old_enough_arrow(table.column("mtime")))

    def column(self, functions: ModuleType) -> Column:
        return functions.col("owned") & self.cutoff.old_enough_column(functions, functions.col("mtime"))


class _Outside:
    """Reached references outside the lakehouse root (exports' own files, other stores)."""

    def arrow(self, table: pa.Table) -> pa.ChunkedArray:
        return walk_rules.outside_arrow(table.column("path"))

    def column(self, functions: ModuleType) -> Column:
        return walk_rules.outside_column(functions.col("path"))


_OWNED = _Owned()
_OUTSIDE = _Outside()


__all__ = ["CANDIDATE_SCHEMA", "run_orphans"]
