"""The `orphans` job: delete old, format-owned files that nothing retained references.

Phases (each placed on the driver or the executors, `trinitylake.spark.execution`):

1. **check** (driver): the minimum age is ``older_than`` or the lakehouse's transaction TTL,
   never less than the TTL unless ``unsafe_min_age`` (`config.effective_orphan_min_age`);
   ages count back from ``reference_time``.
2. **list**: the driver lists the root (root files, ``_lakehouse_def_*``, the first-level
   hash folders ``[01]{4}/``) and the second level of each hash folder (up to 256 prefixes),
   then the prefixes recursively: on the driver with a thread pool (a local filesystem is
   scanned with ``os.scandir`` directly), or on the executors (``mapInArrow`` over a table of
   prefixes, a few per task with I/O threads). Folders that are not hash folders
   (``_control/``, ``_maintenance/``, table data, anything foreign) are never listed. Only
   format-owned names are candidates.
3. **walk**: R = reach(every retained version, export root and pinned version). A walk that
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
   executors, by their number). A plain
   local storage deletes through `LocalDeleteStorage` (keys joined without URI parsing,
   ``unlink`` relative to an open folder), keeping the storage's retries and fault seam.

Crash safety and idempotence: the job changes nothing but deleting candidates, which were
unreferenced and older than the floor when it listed them; a crash anywhere leaves a subset
deleted and a re-run lists again (files already deleted are simply not listed).

**Where the listing runs.** Its size is unknown until it is done (up to 4,096 second-level
prefixes always exist), and a listing is I/O-bound: driver threads list as fast as one
executor's I/O threads, without the seconds Spark costs to start. So it runs on the driver
unless ``execution`` is ``distributed``; in ``auto`` it hands the prefixes not yet listed to
the executors as soon as it holds more than ``driver_max_rows`` rows or, after a sixteenth of
the prefixes (hash prefixes are uniformly filled), projects to more than that. What the
driver listed so far goes with them (bounded by that same limit), nothing is listed twice.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trinitylake.config import effective_orphan_min_age, format_duration, format_timestamp
from trinitylake.errors import CorruptNodeError, StorageError, UnsafeOperationError
from trinitylake.format.definitions import DEFAULT_TXN_TTL_MILLIS
from trinitylake.format.paths import OWNED_HASHED_RE
from trinitylake.jobs.orphans import rules as O
from trinitylake.jobs.walk import rules as W
from trinitylake.jobs.walk.job import fill_walk_counts, walk_reachable_with_stats
from trinitylake.jobs.walk.rows import Reached
from trinitylake.maintenance import walk_roots as WR
from trinitylake.maintenance.plan import run_dir, write_json
from trinitylake.maintenance.results import JobResult
from trinitylake.spark.delete import delete_keys
from trinitylake.spark.execution import DISTRIBUTED, LOCAL, Execution
from trinitylake.spark.output import write_listing
from trinitylake.storage import Storage
from trinitylake.storage.local_delete import LocalDeleteStorage
from trinitylake.storage.uri import parse_uri

if TYPE_CHECKING:
    from trinitylake.config import OrphansConfig
    from trinitylake.lakehouse import Lakehouse

log = logging.getLogger(__name__)

LISTING_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("mtime", pa.float64()),
                            ("owned", pa.bool_())])
CANDIDATE_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("mtime", pa.float64())])
MISMATCH_SCHEMA = pa.schema([("path", pa.string()), ("reference", pa.string())])
PREFIX_SCHEMA = pa.schema([("prefix", pa.string())])
# Prefixes an executor task lists (each is a small subtree: 1/256 of the hash space).
_PREFIXES_PER_TASK = 4
# Temporary names of in-flight local writes (`Storage` skips them when listing too).
_TMP_MARK = ".tmp-"


# ---- listing one prefix --------------------------------------------------------------------
def _scan_tree(top: str, prefix: str) -> tuple[list[str], list[int], list[float]]:
    """Files under the local folder `top` (keys ``prefix/...``), with ``os.scandir``."""
    paths: list[str] = []
    sizes: list[int] = []
    mtimes: list[float] = []
    stack = [(top, prefix.rstrip("/"))]
    while stack:
        d, rel = stack.pop()
        try:
            it = os.scandir(d)
        except (FileNotFoundError, NotADirectoryError):
            continue
        with it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append((e.path, f"{rel}/{e.name}"))
                elif e.is_file(follow_symlinks=False) and _TMP_MARK not in e.name:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except FileNotFoundError:  # deleted since the folder was read
                        continue
                    paths.append(f"{rel}/{e.name}")
                    sizes.append(st.st_size)
                    mtimes.append(st.st_mtime)
    return paths, sizes, mtimes


def list_prefix(storage: Storage, prefix: str) -> tuple[list[str], list[int], list[float]]:
    """Every file under `prefix` (relative keys, sizes, mtimes); a local filesystem is scanned
    directly (one retried storage operation per prefix), anything else through `Storage.list`."""
    root = storage.local_path("")
    if root is not None:
        top = os.path.join(root, prefix)
        # Through the storage's retry (and test fault-injection) seam, like its own listing.
        return storage.retrying("list", prefix, _scan_tree, top, prefix)
    paths, sizes, mtimes = [], [], []
    for f in storage.list(prefix):
        paths.append(f.path)
        sizes.append(int(f.size))
        mtimes.append(float(f.mtime))
    return paths, sizes, mtimes


_OWNED_PATTERN = OWNED_HASHED_RE.pattern


def listing_batch(paths: list[str], sizes: list[int], mtimes: list[float]) -> pa.RecordBatch:
    """A `LISTING_SCHEMA` batch of files listed under hash prefixes (ownership by Arrow regex:
    below the root only hashed names can be format-owned)."""
    p = pa.array(paths, pa.string())
    owned = pc.match_substring_regex(p, _OWNED_PATTERN) if len(p) else pa.array([], pa.bool_())
    return pa.RecordBatch.from_arrays([p, pa.array(sizes, pa.int64()), pa.array(mtimes, pa.float64()), owned],
                                      schema=LISTING_SCHEMA)


def list_task(storage: Storage, io_threads: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: list the task's prefixes with I/O threads, a batch per prefix."""
    prefixes = [p for b in batches for p in b.column(0).to_pylist()]
    if not prefixes:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(io_threads, len(prefixes)))) as pool:
        for cols in pool.map(functools.partial(list_prefix, storage), prefixes):
            if cols[0]:
                yield listing_batch(*cols)


def mismatch_task(root_uri: str, export_dirs: list[str], batches: Iterator[pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: reached references naming a file of the root another way."""
    root = parse_uri(root_uri)
    for b in batches:
        keys, refs = [], []
        for ref in b.column(b.schema.get_field_index("path")).to_pylist():
            key = O.mismatch_key(ref, root, export_dirs)
            if key is not None:
                keys.append(key)
                refs.append(ref)
        if keys:
            yield pa.RecordBatch.from_arrays([pa.array(keys, pa.string()), pa.array(refs, pa.string())],
                                             schema=MISMATCH_SCHEMA)


# ---- the listing ---------------------------------------------------------------------------
@dataclass
class Listing:
    """The listed files: driver-held rows (`table`), the executors' part (`df`, None when
    everything was listed on the driver), and the prefixes not listed yet (`rest`)."""

    table: pa.Table
    df: Any = None
    counts: dict[str, Any] = field(default_factory=dict)
    rest: list[str] = field(default_factory=list)

    @property
    def is_local(self) -> bool:
        return self.df is None and not self.rest


def _top_and_prefixes(storage: Storage, pool: ThreadPoolExecutor) -> tuple[list[tuple[str, int, float]], list[str],
                                                                           dict[str, Any], list[str]]:
    """The root and second-level listing (driver): owned top-level files, prefixes, counts."""
    top_dirs, top_files = storage.list_dirs("")
    hash_dirs, skipped, owned_top, not_owned_top = O.split_top_level(
        top_dirs, [(f.path, f.size, f.mtime) for f in top_files])
    prefixes: list[str] = []
    not_owned_second = 0
    if not storage.is_local:
        # An object store lists 1,000 keys per request under any prefix: the 16 top-level hash
        # folders, each listed recursively, cost the model's LIST per 1,000 keys (plus one per
        # folder), where the 256 second-level prefixes cost 273 requests for 20k files. Files
        # that are not format-owned come back marked so (`listing_batch`).
        counts = {"top_level_files": len(top_files), "skipped_folders": len(skipped), "hash_folders": len(hash_dirs),
                  "list_prefixes": len(hash_dirs), "list_tasks": 0, "not_owned": not_owned_top}
        return owned_top, list(hash_dirs), counts, skipped

    def second(d: str) -> tuple[list[str], int]:
        subdirs, files = storage.list_dirs(d)
        # Files directly in a first-level hash folder, or folders that are not hash folders,
        # cannot be format-owned; list the foreign folders anyway so that they are counted.
        subs = [s for s in subdirs if O.is_hash_dir(s)] + [s for s in subdirs if not O.is_hash_dir(s)]
        return subs, len(files)

    for subs, n_files in pool.map(second, hash_dirs):
        prefixes.extend(subs)
        not_owned_second += n_files
    counts = {"top_level_files": len(top_files), "skipped_folders": len(skipped), "hash_folders": len(hash_dirs),
              "list_prefixes": len(prefixes), "list_tasks": 0, "not_owned": not_owned_top + not_owned_second}
    return owned_top, prefixes, counts, skipped


def list_on_driver(ex: Execution, storage: Storage) -> Listing:
    """The driver's part of the listing (never touches Spark): everything, or (``distributed``,
    or a listing past the driver's bound) the root and the prefixes left in `Listing.rest`."""
    threads = ex.limits.io_threads(storage)
    paths: list[str] = []
    sizes: list[int] = []
    mtimes: list[float] = []
    rest: list[str] = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        owned_top, prefixes, counts, skipped = _top_and_prefixes(storage, pool)
        counts["skipped"] = skipped[:50]
        if ex.mode == DISTRIBUTED:
            rest = prefixes
        elif prefixes:
            limit = ex.limits.driver_max_rows
            check_after = max(1, len(prefixes) // 16)
            chunk = threads * 8
            with ex.phase("list.prefixes", LOCAL, len(prefixes), f"list {len(prefixes)} prefixes"):
                for i in range(0, len(prefixes), chunk):
                    for p, sz, mt in pool.map(functools.partial(list_prefix, storage), prefixes[i : i + chunk]):
                        paths.extend(p)
                        sizes.extend(sz)
                        mtimes.extend(mt)
                    done = min(len(prefixes), i + chunk)
                    held = len(paths)
                    if ex.fits_driver(held) and (ex.mode == LOCAL or done < check_after
                                                 or held * len(prefixes) / done <= limit):
                        continue
                    rest = prefixes[done:]
                    log.info("orphans: the listing holds %d rows after %d of %d prefixes; the executors list "
                             "the other %d", held, done, len(prefixes), len(rest))
                    break
    top = pa.RecordBatch.from_arrays(
        [pa.array([p for p, _, _ in owned_top], pa.string()), pa.array([int(s) for _, s, _ in owned_top], pa.int64()),
         pa.array([float(m) for _, _, m in owned_top], pa.float64()), pa.array([True] * len(owned_top), pa.bool_())],
        schema=LISTING_SCHEMA)
    table = pa.Table.from_batches([top, listing_batch(paths, sizes, mtimes)])
    return Listing(table, None, counts, rest)


def list_rest_distributed(ex: Execution, storage: Storage, listing: Listing) -> Listing:
    """List `listing.rest` on the executors; the driver's rows go with them (bounded)."""
    rest = listing.rest
    parts = ex.partitions(len(rest), _PREFIXES_PER_TASK)
    counts = dict(listing.counts, list_tasks=parts, list_prefixes_distributed=len(rest))
    with ex.phase("list.prefixes", DISTRIBUTED, len(rest), f"list {len(rest)} prefixes ({parts} tasks)"):
        df = ex.map_arrow(pa.table({"prefix": pa.array(rest, pa.string())}),
                          functools.partial(list_task, storage, ex.limits.io_threads(storage)), LISTING_SCHEMA, parts)
        if listing.table.num_rows:
            df = df.unionByName(ex.to_df(listing.table))
        # Materialized once: the candidates must come from one listing (no re-listing later).
        df = df.localCheckpoint(eager=True)
    return Listing(listing.table.slice(0, 0), df, counts, [])


def list_lakehouse(ex: Execution, storage: Storage) -> Listing:
    """List the format-owned part of a lakehouse (see the module doc for where)."""
    listing = list_on_driver(ex, storage)
    return list_rest_distributed(ex, storage, listing) if listing.rest else listing


# ---- the job ---------------------------------------------------------------------------------
def run_orphans(ex: Execution, lakehouse: Lakehouse, cfg: OrphansConfig, result: JobResult) -> JobResult:
    lh = lakehouse
    storage = lh.storage
    rdir = run_dir("orphans", result.run_id)
    result.dry_run = bool(cfg.dry_run)

    @contextmanager
    def phase(name: str, what: str) -> Iterator[None]:
        t0 = time.perf_counter()
        log.info("orphans %s: phase %s (%s)", result.run_id, name, what)
        try:
            yield
        finally:
            result.seconds[name] = round(result.seconds.get(name, 0.0) + time.perf_counter() - t0, 3)

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

    def walk() -> tuple[WR.WalkInput, Any, Any, float]:
        t0 = time.perf_counter()
        inp = WR.walk_input(lh, latest=latest)
        try:
            reached, rst = walk_reachable_with_stats(ex, lh, inp.roots, sizes=False, name="walk",
                                                     label=f"tlake orphans {result.run_id}: walk")
        except CorruptNodeError as e:
            raise UnsafeOperationError(f"the referenced files cannot be computed, so nothing was deleted: {e}") from e
        return inp, reached, rst, time.perf_counter() - t0

    cleanup: list[Any] = []
    reached = None
    try:
        # The walk's roots were fixed above (`latest`), so it may run while the driver lists an
        # object store: the walk reads nodes (Python) while the listing waits on the network.
        # Not on local files: there the listing is Python and system calls too, and each stat
        # hands the interpreter lock to the walk and waits to get it back (20k tables, 121k
        # files: listing 2.8 s beside the walk, 1.0-1.2 s before it; list + walk 2.0-2.7 s
        # one after the other, 2.8 s side by side). Only the walk's thread may start Spark;
        # the listing's executor part waits for it.
        overlap = ex.mode != DISTRIBUTED and not storage.is_local
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="orphans-walk") as bg:
            walking = bg.submit(walk) if overlap else None
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
                inp, reached, rst, t_walk = walk()
            else:
                inp, reached, rst, t_walk = walking.result()
                if listing.rest:
                    t1 = time.perf_counter()
                    listing = list_rest_distributed(ex, storage, listing)
                    t_list += time.perf_counter() - t1
        result.details["list_walk_overlap"] = overlap
        with phase("list", "count the listing"):
            if listing.df is not None:
                cleanup.append(listing.df)
            lcounts = listing.counts
            result.details["skipped_folders"] = lcounts.pop("skipped", [])
            n_rows, n_owned, b_owned, n_old = _listing_counts(ex, listing, cutoff)
        result.seconds["list"] = round(result.seconds["list"] + t_list, 3)
        result.seconds["walk"] = round(t_walk, 3)
        young = n_owned - n_old
        lcounts["not_owned"] += n_rows - n_owned
        result.counts["listed"] = n_owned + lcounts["not_owned"]
        result.counts["listed_owned"] = n_owned
        result.counts["listed_not_owned"] = lcounts["not_owned"]
        result.bytes["listed_owned"] = b_owned
        doc["listing"] = lcounts
        log.info("orphans %s: listed %d files (%d format-owned) under %d prefixes (%s)", result.run_id,
                 result.counts["listed"], n_owned, lcounts["list_prefixes"],
                 LOCAL if listing.is_local else DISTRIBUTED)
        fill_walk_counts(result, rst)
        # The walk here does not size what it reaches (the diff needs paths only): leave out
        # the byte counts it did not measure rather than print them as 0 B.
        unsized = [k for k in rst.files if rst.files[k] and not rst.bytes.get(k)]
        for k in unsized:
            result.bytes.pop(f"reachable_{k}", None)
        if unsized:
            result.bytes.pop("reachable", None)
        doc["walk"] = {"roots": rst.roots, "files": rst.files, "exports": inp.export_roots,
                       "pinned_versions": inp.pinned_versions, "warnings": inp.warnings}

        with phase("diff", "find the orphans"):
            export_dirs = O.export_root_dirs(inp.export_roots.values())
            if listing.is_local and reached.is_local:
                cands, n_clash, sample, keep_out = _diff_local(listing.table, reached.table, cutoff,
                                                               storage.root, export_dirs, rst.outside)
            else:
                cands, n_clash, sample, keep_out = _diff_distributed(ex, listing, reached, cutoff,
                                                                     storage.root, export_dirs, rst.outside)
            if n_clash:
                msg = (f"{n_clash} orphan candidates are referenced through another scheme or authority (e.g. "
                       + "; ".join(f"{p} referenced as {ref}" for p, ref in sample) + ")")
                if cfg.prefix_mismatch == "error":
                    raise UnsafeOperationError(msg + "; nothing was deleted. Fix the references, or pass "
                                               "--prefix-mismatch ignore to keep those files and go on")
                log.warning("%s; keeping them (prefix_mismatch=ignore)", msg)
                cands = keep_out(cands)
            if isinstance(cands, pa.Table):
                n_cands = cands.num_rows
                b_cands = int(pc.sum(cands.column("size")).as_py() or 0) if n_cands else 0
            else:
                F = ex.F
                # Materialized once: the plan and the delete see the very same candidates.
                cands = cands.localCheckpoint(eager=True)
                cleanup.append(cands)
                agg = cands.agg(F.count("*").alias("n"), F.sum("size").alias("b")).collect()[0]
                n_cands, b_cands = int(agg["n"]), int(agg["b"] or 0)
        del listing  # the candidates are computed: let the listing go
        result.counts.update({"candidates": n_cands, "too_young": young, "prefix_mismatch": n_clash})
        result.bytes["candidates"] = b_cands
        log.info("orphans %s: %d candidates (%d bytes); %d owned files too young; %d reachable", result.run_id,
                 n_cands, b_cands, young, rst.total_files)

        with phase("write_plan", "write the plan"):
            cand_uri = write_listing(ex, cands, storage.uri(f"{rdir}/candidates"), storage.options, rows=n_cands)
            doc["candidates"] = {"files": n_cands, "bytes": b_cands, "location": cand_uri, "too_young": young,
                                 "prefix_mismatch": n_clash}
            result.plan_location = write_json(storage, f"{rdir}/plan.json", doc)
            result.output_location = cand_uri
        limit = cfg.max_candidates
        if limit is not None and n_cands > limit:
            # Far more unreferenced files than expected usually means the live set is wrong (a
            # lakehouse restored from an old copy, a pointer rewrite gone astray): stop, with the
            # candidate list persisted for a person to look at. The DAG's dry run is this gate.
            raise UnsafeOperationError(
                f"orphans {result.run_id}: {n_cands} candidates exceed max_candidates {limit}; nothing was deleted. "
                f"Inspect them at {cand_uri}; if they are truly unreferenced, re-run with a higher --max-candidates")
        if result.dry_run:
            result.counts.update({"deleted": 0, "failed": 0})
            return result

        with phase("delete", "delete the orphans"):
            out = delete_keys(ex, LocalDeleteStorage.of(storage), cands, n_cands, batch_size=cfg.delete_batch_size,
                              max_retries=cfg.max_retries, what="orphan files")
        result.counts.update({"deleted": out.deleted, "failed": out.failed, "delete_batches": out.batches})
        if out.failed == 0:
            result.bytes["deleted"] = b_cands
        write_json(storage, f"{rdir}/result.json", result.to_dict())
        if out.failed:
            result.details["failures"] = out.failures
            raise StorageError(f"{out.failed} of {n_cands} orphan files could not be deleted (e.g. "
                               f"{out.failures[:3]}); re-run the job")
    finally:
        if reached is not None:
            reached.release()
        for df in cleanup:
            try:
                df.unpersist()
            except Exception:  # noqa: BLE001 - checkpoints go with the session
                pass
    return result


def _listing_counts(ex: Execution, listing: Listing, cutoff: O.AgeCutoff) -> tuple[int, int, int, int]:
    """(rows, owned rows, owned bytes, owned rows older than the cutoff)."""
    if listing.is_local:
        t = listing.table
        if t.num_rows == 0:
            return 0, 0, 0, 0
        owned = t.column("owned")
        old = _is_old(t, cutoff)
        n_owned = int(pc.sum(owned.cast(pa.int64())).as_py() or 0)
        b_owned = int(pc.sum(pc.if_else(owned, t.column("size"), 0)).as_py() or 0)
        return t.num_rows, n_owned, b_owned, int(pc.sum(old.cast(pa.int64())).as_py() or 0)
    F = ex.F
    df = listing.df
    agg = df.agg(F.count("*").alias("n"), F.sum(F.col("owned").cast("int")).alias("owned"),
                 F.sum(F.when(F.col("owned"), F.col("size"))).alias("b"),
                 F.sum(_is_old_col(F, cutoff).cast("int")).alias("old")).collect()[0]
    return int(agg["n"]), int(agg["owned"] or 0), int(agg["b"] or 0), int(agg["old"] or 0)


def _is_old(t: pa.Table, cutoff: O.AgeCutoff) -> Any:
    """Owned and old enough (`AgeCutoff`), on an Arrow listing."""
    return pc.and_(t.column("owned"), cutoff.old_enough_arrow(t.column("mtime")))


def _is_old_col(F: ModuleType, cutoff: O.AgeCutoff) -> Any:  # noqa: N803 - the session's functions module
    """Owned and old enough (`AgeCutoff`), on a Spark listing."""
    return F.col("owned") & cutoff.old_enough_column(F, F.col("mtime"))


def _mismatches_local(reached: pa.Table, root_uri: str, export_dirs: list[str]) -> pa.Table:
    paths = reached.column("path")
    foreign = pc.filter(paths, W.outside_arrow(paths)).to_pylist()
    root = parse_uri(root_uri)
    keys, refs = [], []
    for ref in foreign:
        key = O.mismatch_key(ref, root, export_dirs)
        if key is not None:
            keys.append(key)
            refs.append(ref)
    return pa.table({"path": pa.array(keys, pa.string()), "reference": pa.array(refs, pa.string())})


def _diff_local(listing: pa.Table, reached: pa.Table, cutoff: O.AgeCutoff, root_uri: str, export_dirs: list[str],
                outside: int) -> tuple[pa.Table, int, list[tuple[str, str]], Any]:
    """Candidates by Arrow compute; (candidates, clashes, sample, fn removing the clashes)."""
    mask = pc.and_(_is_old(listing, cutoff),
                   pc.invert(pc.is_in(listing.column("path"), value_set=reached.column("path"))))
    cands = listing.filter(mask).select(CANDIDATE_SCHEMA.names)
    if not outside or cands.num_rows == 0:
        return cands, 0, [], lambda c: c
    mism = _mismatches_local(reached, root_uri, export_dirs)
    if mism.num_rows == 0:
        return cands, 0, [], lambda c: c
    hit = pc.is_in(cands.column("path"), value_set=mism.column("path"))
    clash_paths = set(cands.filter(hit).column("path").to_pylist())
    sample = [(p, r) for p, r in zip(mism.column("path").to_pylist(), mism.column("reference").to_pylist(),
                                     strict=True) if p in clash_paths][:5]
    return cands, len(clash_paths), sample, lambda c: c.filter(pc.invert(hit))


def _diff_distributed(ex: Execution, listing: Listing, reached: Reached, cutoff: O.AgeCutoff, root_uri: str,
                      export_dirs: list[str], outside: int) -> tuple[Any, int, list[tuple[str, str]], Any]:
    """Candidates by a ``left_anti`` join on the executors (a driver-held side is shipped)."""
    F = ex.F
    n_list = listing.table.num_rows if listing.is_local else 0
    with ex.phase("diff.join", DISTRIBUTED, n_list + reached.stats.total_files, "find the orphans"):
        listed = listing.df if listing.df is not None else ex.to_df(listing.table)
        reach_df = reached.as_df(ex)
        cands = (listed.filter(_is_old_col(F, cutoff)).join(reach_df.select("path"), "path", "left_anti")
                 .select(*CANDIDATE_SCHEMA.names))
        if not outside:
            return cands, 0, [], lambda c: c
        if reached.is_local:
            mism = ex.to_df(_mismatches_local(reached.table, root_uri, export_dirs))
        else:
            foreign = reach_df.filter(W.outside_column(F.col("path"))).select("path")
            mism = ex.map_arrow(foreign, functools.partial(mismatch_task, root_uri, export_dirs), MISMATCH_SCHEMA,
                                ex.partitions(outside, 4096))
        mism = mism.localCheckpoint(eager=True)
        clash = cands.join(mism, "path", "inner")
        n_clash = clash.select("path").distinct().count()
        sample = [(r["path"], r["reference"]) for r in clash.limit(5).collect()] if n_clash else []
    return cands, n_clash, sample, lambda c: c.join(mism.select("path"), "path", "left_anti")


__all__ = ["LISTING_SCHEMA", "Listing", "list_lakehouse", "list_prefix", "run_orphans"]
