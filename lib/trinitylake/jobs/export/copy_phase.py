"""The export's copy phase, placed: plan parts copied on the driver's threads, its worker
processes (`trinitylake.jobs.export.copy_workers`) or the executors (``mapInArrow``), each part
by the same `trinitylake.jobs.export.copying.copy_part`. `Copier` picks the place per call (the
export's own files, then, with tables, the tables' data files) and starts early, while the
plan is made, what the copy will need.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from trinitylake import progress, rowsets
from trinitylake.errors import StorageError
from trinitylake.jobs.export import copying as export_copying
from trinitylake.jobs.export import rules as export_rules
from trinitylake.jobs.export.copy_workers import CopyWorkers
from trinitylake.jobs.export.copying import copy_part as _copy_part
from trinitylake.jobs.export.planner import raise_failures, shared_pool_map
from trinitylake.spark.execution import AUTO, DISTRIBUTED, LOCAL, Execution, batch_of, rows_of
from trinitylake.storage import Storage, requests
from trinitylake.storage.local_files import LocalFiles

if TYPE_CHECKING:
    from trinitylake.runs.results import JobResult

log = logging.getLogger(__name__)

#: Parts copied at once by a driver-local copy (their files share the driver's thread pool).
LOCAL_PARTS_IN_FLIGHT = 4
#: Parts copied at once by a driver-local copy to an object store the I/O engine serves.
ENGINE_PARTS_IN_FLIGHT = 32
#: A driver-local copy of local files with at least this many files runs its plan parts in
#: worker processes (one per core): copying small files is per-file Python plus system calls,
#: so one process is bound by the interpreter (threads only add GIL contention; see
#: `trinitylake.jobs.export.job`). 21k files here: 1 process ~2.5 s of copy, worker start ~0.4 s.
LOCAL_PROCESS_MIN_FILES = 4096
#: At most this many copy processes (a local disk saturates long before).
LOCAL_PROCESSES_MAX = 8
STATS_SCHEMA = pa.schema([("name", pa.string()), ("stats", pa.string())])


# ---- copy --------------------------------------------------------------------------------------
def _copy_batches(source: Storage, target: Storage, spec: export_rules.ExportSpec, export_dir: str, checksum: bool,
                  resumed: bool, io_threads: int, batches: Iterator[pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
    """Per-batch function of the copy (a driver thread or an executor task): plan part names
    in, one stats row per part out. The parts of one process share its thread pool."""
    src, tgt = LocalFiles.of(source), LocalFiles.of(target)
    pmap = shared_pool_map(io_threads)
    for (name,) in rows_of(batches, "name"):
        before = requests.snapshot()
        st = _copy_part(name, src, tgt, spec, export_dir, checksum, resumed, pmap)
        st.requests = requests.since(before)
        yield batch_of(STATS_SCHEMA, [[name], [json.dumps(st.to_dict())]])


def copy_processes(n_files: int, n_parts: int, source: Storage, target: Storage) -> int:
    """How many worker processes a driver-local copy uses: 0 (the driver's own threads) unless
    both sides are local files, the copy is big and the machine has several cores."""
    cores = os.cpu_count() or 1
    if n_files < LOCAL_PROCESS_MIN_FILES or cores < 2 or n_parts < 2 or source.remote or target.remote:
        return 0
    return min(cores, n_parts, LOCAL_PROCESSES_MAX)


def _copy_processes(pool: CopyWorkers, names: list[str], source: Storage, target: Storage, spec: export_rules.ExportSpec,
                    export_dir: str, checksum: bool, resumed: bool) -> export_copying.CopyStats:
    """Copy on the driver machine with the worker processes of `pool` (`CopyWorkers`), one plan
    part at a time each (the same `_copy_part` as the executors and the threads run)."""
    total = export_copying.CopyStats()
    for d in pool.map(names, (source, target, spec, export_dir, checksum, resumed)):
        st = export_copying.CopyStats.from_dict(d)
        total.add(st)
        progress.advance(st.rows)
    return total


class _Workers:
    """The copy's worker processes, started as soon as the plan is expected to be big (during
    planning, so that their start overlaps it), or at the copy; closed by `close`."""

    def __init__(self, source: Storage, target: Storage, allowed: bool):
        self.source, self.target, self.allowed = source, target, allowed
        self.pool: CopyWorkers | None = None

    def expect(self, files: int) -> None:
        """The plan will hold about `files` files (`Planner` calls this after each level)."""
        if self.pool is None and self.allowed:
            n = copy_processes(files, LOCAL_PROCESSES_MAX, self.source, self.target)
            if n:
                self.pool = self._start(n)

    def take(self, n: int) -> CopyWorkers | None:
        """A pool of `n` workers, or None when no worker process can be started here (an
        embedded interpreter without ``sys.executable``): the copy then runs on threads."""
        if self.pool is not None and self.pool.size != n:
            self.close()
        if self.pool is None and self.allowed:
            self.pool = self._start(n)
        return self.pool

    def _start(self, n: int) -> CopyWorkers | None:
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


class Copier:
    """The export's copy phase, where its placement puts it (`copy_parts`): the export's own
    files and, with tables, the tables' data files (`trinitylake.jobs.export.tables`) both go
    through it. It also starts, while planning goes on, what the copy will need (`expect`)."""

    def __init__(self, ex: Execution, source: Storage, target: Storage, spec: export_rules.ExportSpec, result: JobResult,
                 checksum: bool):
        self.ex, self.source, self.target, self.spec, self.result = ex, source, target, spec, result
        self.checksum = checksum
        self.remote = source.remote or target.remote
        # Local to local: `local_threads` (one by default: 16 threads copied 21k files in 12.0 s
        # here, one in 9.1 s; threads only hide latency).
        self.io_threads = ex.limits.io_threads(source, target)
        self.workers = _Workers(source, target, allowed=ex.mode != DISTRIBUTED)
        self.remote_side = target if target.remote else source
        self.per_file = int(source.remote) + int(target.remote)

    def expect(self, files: int) -> None:
        """After each planned level, with the files the plan is expected to hold: start what
        the copy will need, so that it starts while planning goes on (worker processes for a
        big local copy; the Spark session when the copy will go to the executors)."""
        ex = self.ex
        self.workers.expect(files)
        if ex.mode == AUTO and self.per_file and rowsets.place(ex, files, storage=self.remote_side,
                                                               requests_per_item=self.per_file).distributed:
            ex.prestart()

    def copy_parts(self, phase: str, names: list[str], n_files: int, resumed: bool, what: str
                   ) -> tuple[export_copying.CopyStats, str]:
        """Copy plan parts where the placement puts `n_files` files; raises a typed error for
        any failed file."""
        ex, source, target, spec = self.ex, self.source, self.target, self.spec
        export_dir, checksum = spec.export_dir, self.checksum
        # Per copied file one GET of the source (node files come with their bytes in the
        # plan) and one conditional PUT, verified by the PUT's ETag: on an object store
        # `auto` compares estimated times (the remote side's latency).
        step = rowsets.place(ex, n_files, storage=self.remote_side, requests_per_item=self.per_file, phase=phase)
        n_procs = copy_processes(n_files, len(names), source, target)
        if step.distributed and ex.mode == AUTO and n_procs and ex.executors_share_the_driver():
            # Local files, executors on these same cores: the driver's worker processes
            # copied 1.05M files in 163-165 s, Spark local[2] tasks in 217 s (per-task and
            # Arrow costs, no extra hardware). A cluster's executors keep the copy.
            step = rowsets.Place(ex, LOCAL)
        with step.phase(phase, n_files, what):
            # A big copy of local files on the driver goes to its worker processes.
            pool = self.workers.take(n_procs) if n_procs and not step.distributed else None
            if pool is not None:
                self.result.details["copy_processes"] = n_procs
                total = _copy_processes(pool, names, source, target, spec, export_dir, checksum, resumed)
                self.workers.close()
            else:
                total = _copy(step, names, source, target, spec, export_dir, checksum, resumed, self.io_threads)
        raise_failures(total.missing_sources, total.errors, total.conflicts, f"export {spec.name!r}", spec.version)
        if total.rows != n_files:
            raise StorageError(f"export {spec.name!r}: copied {total.rows} planned files, the plan holds {n_files}")
        return total, step.where

    def close(self) -> None:
        self.workers.close()


def _copy(step: rowsets.Place, names: list[str], source: Storage, target: Storage, spec: export_rules.ExportSpec,
          export_dir: str, checksum: bool, resumed: bool, io_threads: int) -> export_copying.CopyStats:
    """Copy plan parts where `step` runs: one task per part (``mapInArrow`` on the executors;
    on the driver up to `LOCAL_PARTS_IN_FLIGHT` parts at once, or `ENGINE_PARTS_IN_FLIGHT`
    through the I/O engine, whose one limit bounds the requests), one stats row back each."""
    total = export_copying.CopyStats()
    if not names:
        return total
    table = pa.table({"idx": pa.array(range(len(names)), pa.int64()), "name": pa.array(names, pa.string())})
    fn = functools.partial(_copy_batches, source, target, spec, export_dir, checksum, resumed, io_threads)
    in_flight = ENGINE_PARTS_IN_FLIGHT if target.batches_in_flight else LOCAL_PARTS_IN_FLIGHT
    stats = step.rows(table).map_batches(fn, STATS_SCHEMA, step.partitions(len(names), 1), in_flight=in_flight,
                                         by="idx")
    with step.executor_failures("the export copy job", "the files copied so far stay, re-run the export to finish it"):
        for (stats_json,) in rows_of(stats.batches(), "stats"):
            st = export_copying.CopyStats.from_dict(json.loads(str(stats_json)))
            step.add_task_requests(st.requests)
            total.add(st)
            progress.advance(st.rows)
    return total
