"""The `walk` job: every file reachable from the configured versions, listed into Parquet.

The walk itself is the library's one walker (`trinitylake.treewalk.walker`), which expire and
orphans use too; this job plans its roots (`trinitylake.treewalk.walk_roots`), writes the
listing and its summary, and reports what was walked.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from trinitylake.runs.folder import run_dir, write_json
from trinitylake.runs.results import JobResult
from trinitylake.treewalk import reach, table_pointers, walk_roots
from trinitylake.treewalk.walk_rows import WalkStats, fill_walk_counts
from trinitylake.treewalk.walker import walk_reachable_with_stats

if TYPE_CHECKING:
    from trinitylake.config import WalkConfig
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.spark.execution import Execution

log = logging.getLogger(__name__)


def run_walk(ex: Execution, lakehouse: Lakehouse, cfg: WalkConfig, result: JobResult) -> JobResult:
    """The walk job: list every file reachable from the configured versions (default: every
    retained version, pinned export and pinned version; self-contained exports are reported in
    ``details["exports"]``, not walked) into Parquet at ``cfg.output``."""
    t0 = time.perf_counter()
    versions = None if isinstance(cfg.versions, str) else list(cfg.versions)  # str: 'retained'
    # The version the job started at: the walk reports that snapshot (a commit meanwhile is
    # walked by the next run), and discovering it again costs round trips on an object store.
    inp = walk_roots.walk_input(lakehouse, versions, latest=result.version_before)
    result.seconds["plan"] = round(time.perf_counter() - t0, 3)
    result.counts["versions"] = len(inp.retained_versions)
    result.counts["exports"] = len(inp.export_roots)
    result.counts["self_contained_exports"] = len(inp.self_contained_exports)
    result.counts["pinned_versions"] = len(inp.pinned_versions)
    result.details["exports"] = exports_walked(inp)
    result.details["warnings"] = inp.warnings
    t0 = time.perf_counter()
    reached, st = walk_reachable_with_stats(ex, lakehouse, inp.roots, cfg.batch_size, cfg.parallelism,
                                            label=f"tlake walk {result.run_id}")
    result.seconds["walk"] = round(time.perf_counter() - t0, 3)
    try:
        t0 = time.perf_counter()
        out = reached.rows.write(cfg.output, lakehouse.storage.options, st.total_files)
        result.seconds["write"] = round(time.perf_counter() - t0, 3)
        result.output_location = out
        fill_walk_counts(result, st)
        fill_table_pointer_counts(result, lakehouse, st, ex.limits.io_threads(lakehouse.storage))
        summary = {"run_id": result.run_id, "lakehouse": lakehouse.uri, "output": out,
                   "versions": inp.retained_versions, "exports": inp.export_roots,
                   "self_contained_exports": inp.self_contained_exports,
                   "pinned_versions": inp.pinned_versions, "stats": st.to_dict()}
        result.plan_location = write_json(lakehouse.storage, f"{run_dir('walk', result.run_id)}/_summary.json", summary)
    finally:
        reached.release()
    log.info("walk %s: %d reachable files (%s), %d bytes; listing at %s", result.run_id, st.total_files,
             ", ".join(f"{k} {v}" for k, v in sorted(st.files.items())), sum(st.bytes.values()), out)
    return result


def exports_walked(inp: walk_roots.WalkInput) -> dict[str, dict[str, Any]]:
    """What the walk did with each recorded export, for the result's details: a pinned export's
    root was walked (it may reference source files); a self-contained one (unpinned: a full
    export, or a partial one that reached the bottom of the tree) was neither read nor sized
    (`trinitylake.treewalk.walk_roots`)."""
    out: dict[str, dict[str, Any]] = {}
    pinned = inp.pinned_versions
    for name, uri in inp.export_roots.items():
        out[name] = {"root": uri, "walked": True, "pinned_version": pinned.get(name),
                     "reason": "pinned: references source files"}
    for name, v in pinned.items():
        if name not in out:  # its root is missing (see the warnings): the pinned version is walked
            out[name] = {"root": None, "walked": False, "pinned_version": v,
                         "reason": f"root missing; pinned version {v} walked instead"}
    for name, uri in inp.self_contained_exports.items():
        out[name] = {"root": uri, "walked": False, "pinned_version": None,
                     "reason": "self-contained, not walked"}
    return dict(sorted(out.items()))


def fill_table_pointer_counts(result: JobResult, lakehouse: Lakehouse, st: WalkStats, io_threads: int) -> None:
    """``table_pointers_<kind>`` counts of the latest version's tables (`table_pointers.table_pointer_counts`:
    ICEBERG / other formats / none, and how many point outside the lakehouse root), from the
    table definitions alone; ``details["table_pointers"]`` says what was counted, or why not
    (more than `table_pointers.TABLE_POINTER_DEF_LIMIT` definition files reached)."""
    t0 = time.perf_counter()
    counts, details = table_pointers.table_pointer_counts(lakehouse, None, st.files.get(reach.KIND_DEFINITION, 0),
                                             io_threads=io_threads)
    result.counts.update(counts)
    details["seconds"] = round(time.perf_counter() - t0, 3)
    result.details["table_pointers"] = details
