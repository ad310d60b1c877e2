"""The `orphans` job's listing: every file under the lakehouse's hash prefixes, format-owned or
not (the root's own files, ``_lakehouse_def_*``, and the two levels of hash folders, then each
second-level prefix recursively; ``_control/``, ``_maintenance/``, table data and anything
foreign are never listed), held by the driver (an Arrow table) or the executors (a DataFrame).

**Where the listing runs.** Its size is unknown until it is done (up to 4,096 second-level
prefixes always exist), and a listing is I/O-bound: driver threads list as fast as one
executor's I/O threads, without the seconds Spark costs to start. So it runs on the driver
unless ``execution`` is ``distributed``; in ``auto`` it hands the prefixes not yet listed to
the executors as soon as it holds more than ``driver_max_rows`` rows or, after a sixteenth of
the prefixes (hash prefixes are uniformly filled), projects to more than that. What the
driver listed so far goes with them (bounded by that same limit), nothing is listed twice.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trinitylake import rowsets
from trinitylake.format.paths import OWNED_HASHED_RE
from trinitylake.jobs.orphans import rules as orphan_rules
from trinitylake.rowsets import RowSet
from trinitylake.spark.execution import DISTRIBUTED, LOCAL, Execution
from trinitylake.storage import Storage

log = logging.getLogger(__name__)

LISTING_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("mtime", pa.float64()),
                            ("owned", pa.bool_())])
PREFIX_SCHEMA = pa.schema([("prefix", pa.string())])
# Prefixes an executor task lists (each is a small subtree: 1/256 of the hash space).
_PREFIXES_PER_TASK = 4


# ---- listing one prefix --------------------------------------------------------------------
def list_prefix(storage: Storage, prefix: str) -> tuple[list[str], list[int], list[float]]:
    """Every file under `prefix` (relative keys, sizes, mtimes), as the storage lists a
    folder tree fastest (`Storage.list_columns`: one retried operation per prefix)."""
    return storage.list_columns(prefix)


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


# ---- the listing ---------------------------------------------------------------------------
@dataclass
class Listing:
    """The listed files (`rows`, wherever they are held), the prefixes not listed yet (`rest`)
    and how many rows the driver holds (`held_rows`: 0 once they went to the executors)."""

    rows: RowSet
    counts: dict[str, Any] = field(default_factory=dict)
    rest: list[str] = field(default_factory=list)
    held_rows: int = 0


def _top_and_prefixes(storage: Storage, pool: ThreadPoolExecutor) -> tuple[list[tuple[str, int, float]], list[str],
                                                                           dict[str, Any], list[str]]:
    """The root and second-level listing (driver): owned top-level files, prefixes, counts."""
    top_dirs, top_files = storage.list_dirs("")
    hash_dirs, skipped, owned_top, not_owned_top = orphan_rules.split_top_level(
        top_dirs, [(f.path, f.size, f.mtime) for f in top_files])
    prefixes: list[str] = []
    not_owned_second = 0
    if storage.remote:
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
        subs = ([s for s in subdirs if orphan_rules.is_hash_dir(s)]
                + [s for s in subdirs if not orphan_rules.is_hash_dir(s)])
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
    return Listing(rowsets.driver(ex, table), counts, rest, table.num_rows)


def list_rest_distributed(ex: Execution, storage: Storage, listing: Listing) -> Listing:
    """List `listing.rest` on the executors; the driver's rows go with them (bounded)."""
    rest = listing.rest
    parts = ex.partitions(len(rest), _PREFIXES_PER_TASK)
    counts = dict(listing.counts, list_tasks=parts, list_prefixes_distributed=len(rest))
    step = rowsets.Place(ex, DISTRIBUTED)
    with step.phase("list.prefixes", len(rest), f"list {len(rest)} prefixes ({parts} tasks)"):
        prefixes = step.rows(pa.table({"prefix": pa.array(rest, pa.string())}))
        rows = prefixes.map_batches(functools.partial(list_task, storage, ex.limits.io_threads(storage)),
                                    LISTING_SCHEMA, parts)
        if listing.held_rows:
            rows = rows.union(listing.rows)
        # Materialized once: the candidates must come from one listing (no re-listing later).
        rows = rows.keep(eager=True)
    return Listing(rows, counts, [], 0)


def list_lakehouse(ex: Execution, storage: Storage) -> Listing:
    """List the format-owned part of a lakehouse (see the module doc for where)."""
    listing = list_on_driver(ex, storage)
    return list_rest_distributed(ex, storage, listing) if listing.rest else listing
