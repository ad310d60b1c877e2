"""Where each phase of a job runs: on the driver (a thread pool, no Spark job) or on the
executors (``DataFrame.mapInArrow``), decided per phase by its size.

Spark costs seconds before the first task runs (session start 6-8 s, first job ~4 s, ~30 ms per
Python task on our machines), so a phase of a few thousand files is done sooner by the
driver's own threads, and a job whose every phase is small never starts Spark at all: the
session is created lazily, on the first phase that goes to the executors.

Modes (job option ``execution``):

* ``local``: every phase on the driver, whatever its size;
* ``distributed``: every phase that has items on the executors;
* ``auto`` (default): a phase goes to the executors when its item count exceeds the phase's
  threshold (``local_max_items``, measured crossover in BENCHMARKS.md); a driver phase never
  holds more than ``driver_max_rows`` rows (a walk that grows past it hands the rest of its
  levels to the executors), so the driver's memory stays bounded however big the lakehouse.

Executor work goes only through the DataFrame API (``createDataFrame(arrow_table)``,
``mapInArrow``, aggregates, ``localCheckpoint``, ``toArrow``): no SparkContext, RDD or
accumulator, so the same code runs in classic mode, under Spark Connect
(``spark.api.mode=connect``, ``--remote sc://...``), Databricks serverless and Unity Catalog
standard access mode. Every function shipped to executors takes and yields Arrow record batches
and wraps the same per-file library code the driver-side phases call directly.

Each phase's placement is recorded in ``result.details["execution"]``: where it ran, how many
items, how long.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from trinitylake import progress
from trinitylake.errors import StorageError, TrinityLakeError
from trinitylake.spark import placement
from trinitylake.storage import requests
from trinitylake.util import is_connect_session

if TYPE_CHECKING:
    from types import ModuleType

    from pyspark.sql import DataFrame
    from pyspark.sql.conf import RuntimeConfig
    from pyspark.sql.connect.conf import RuntimeConf

    from trinitylake.storage import Storage
    from trinitylake.storage.object_io import ObjectIO
    from trinitylake.util import Session

T = TypeVar("T")

log = logging.getLogger("trinitylake.spark")

MODES = ("auto", "local", "distributed")
AUTO = "auto"
LOCAL = "local"
DISTRIBUTED = "distributed"

#: A function over Arrow record batches, as ``mapInArrow`` calls it.
BatchFn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

# Python tasks cost ~30 ms each here; more tasks than this per core only add overhead.
PARTITIONS_PER_CORE = 4


@dataclass(frozen=True)
class Limits:
    """Size thresholds of ``auto`` (items of one phase) and the driver's memory bound."""

    #: A phase with at most this many items (node files of a walk level, listed prefixes x
    #: files, candidates to delete, files to copy) runs on the driver.
    local_max_items: int = 200_000
    #: Rows a driver-local phase may hold at once (walk output, listing, candidates). A driver
    #: walk of 1.1M files peaked at 811 MiB RSS, and the orphans job that also held its 1.22M-row
    #: listing at 893 MiB (each definition held once, each level's rows released as it ends).
    driver_max_rows: int = 1_200_000
    #: Threads of a driver-local phase, and I/O threads inside one executor task.
    threads: int = 16
    #: `threads` over local files (see `io_threads`; deletes keep `threads`).
    local_threads: int = 1

    def io_threads(self, *storages: Storage) -> int:
        """Threads for I/O on `storages`: `local_threads` when all are local files, whose system
        calls are short (more threads only contend for the interpreter lock: 16 made a
        20k-table orphans listing and walk 2x slower than 1), else `threads` (requests that
        wait on the network)."""
        local = not any(s.remote for s in storages)
        return max(1, self.local_threads if local else self.threads)


#: Driver memory of one held row, measured (see `Limits.driver_max_rows`): phases that hold
#: file contents (an export plan keeps node bytes) count every `ROW_BYTES` of them as a row.
ROW_BYTES = 480


# Progress listeners: called with a phase's description when it starts (the CLI shows it).
_progress: list[Callable[[str], None]] = []


def add_progress_listener(fn: Callable[[str], None]) -> Callable[[], None]:
    """Register `fn(description)` for phase starts; returns a function that removes it."""
    _progress.append(fn)
    return lambda: _progress.remove(fn) if fn in _progress else None


def notify(what: str) -> None:
    for fn in list(_progress):
        fn(what)


class Execution:
    """Per-job placement of phases, and the job's (lazily started) Spark session.

    Args:
        mode: ``auto``, ``local`` or ``distributed``.
        spark: an existing session (tests, Databricks, spark-submit), else ...
        session_factory: ... a function that creates one, called on first use.
        limits: the thresholds of ``auto``.
        record: a dict to record phases into (``result.details["execution"]``).
    """

    def __init__(self, mode: str = "auto", *, spark: Session | None = None,
                 session_factory: Callable[[], Session] | None = None,
                 limits: Limits | None = None, record: dict[str, Any] | None = None, label: str = "tlake",
                 promised: tuple[int, bool] | None = None, start_s: float | None = None):
        if mode not in MODES:
            raise ValueError(f"execution mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self._spark = spark
        self._factory = session_factory
        self.limits = limits or Limits()
        self.record = record if record is not None else {}
        self.label = label
        self.session_seconds = 0.0
        self._parallelism: int | None = None
        self._tag: str | None = None
        #: Object-store requests the executors' tasks counted and sent back (the driver's own
        #: are counted in this process; see `trinitylake.storage.requests`).
        self.executor_requests: dict[str, int] = requests.zero()
        #: (executor cores, on this machine) the session's master or configuration promises
        #: before it starts (`placement.promised_slots`); None: unknown.
        self.promised = promised
        #: What starting the session costs up to its first task (`placement.start_seconds`).
        self.start_s = start_s
        self._estimates: dict[str, dict[str, Any]] = {}
        self._starting: tuple[Any, dict[str, Any]] | None = None

    # ---- the session ---------------------------------------------------------------------
    @property
    def started(self) -> bool:
        """Whether the session is up (one started early still counts as starting)."""
        return self._spark is not None

    @property
    def spark(self) -> Session:
        if self._spark is None:
            if self._factory is None:
                raise RuntimeError("this phase needs Spark, but no session or session factory was given")
            notify("starting Spark")
            t0 = time.perf_counter()
            starting = self._starting
            if starting is not None:  # started early (`prestart`): wait for it
                starting[0].join()
                self._starting = None
                if "error" in starting[1]:
                    raise starting[1]["error"]
                self._spark = starting[1]["spark"]
                log.info("Spark session started early in %.1fs; waited %.1fs for it", starting[1]["seconds"],
                         time.perf_counter() - t0)
            else:
                self._spark = self._factory()
            self.session_seconds = round(time.perf_counter() - t0, 3)
            log.info("Spark session ready in %.1fs (%s)", self.session_seconds, describe_session(self._spark))
        return self._spark

    def prestart(self) -> None:
        """Start the session now, in a background thread, when a job knows it will need it
        (``distributed``): starting one takes seconds (8 s for local[2] here, 25-40 s for a
        4-executor local-cluster on 2 cores) that then overlap the driver's own first steps
        (opening the lakehouse, validating, the first requests). `spark` waits for it."""
        if self._spark is not None or self._factory is None or self._starting is not None:
            return

        box: dict[str, Any] = {}
        factory = self._factory

        def start() -> None:
            t0 = time.perf_counter()
            try:
                box["spark"] = factory()
            except BaseException as e:  # noqa: BLE001 - raised where the session is needed
                box["error"] = e
            box["seconds"] = time.perf_counter() - t0
            if "spark" in box:
                warm_executors(box["spark"])

        th = threading.Thread(target=start, name="tlake-spark-start", daemon=True)
        th.start()
        self._starting = (th, box)

    @property
    def is_connect(self) -> bool:
        return self.started and is_connect_session(self._spark)

    @property
    def F(self) -> ModuleType:  # noqa: N802 - reads like the usual `functions as F`
        """``pyspark.sql.functions`` of this session's kind: Spark Connect's functions build
        Connect columns, the classic ones JVM columns. pyspark picks by an environment switch,
        which is wrong in a process that holds both kinds of session (the tests do)."""
        return functions_for(self.spark)

    def default_parallelism(self) -> int:
        """Cores Spark offers (without SparkContext, which Spark Connect does not have)."""
        if self._parallelism is None:
            self._parallelism = session_parallelism(self.spark)
        return self._parallelism

    def partitions(self, n: int, per_task: int, cap: int = 0) -> int:
        """Partitions for `n` items handled `per_task` per task: ``ceil(n / per_task)``, capped at
        `cap` when given, else at 4 x the default parallelism, but at least one per core while
        items last (a phase on the executors should use every core)."""
        if n <= 0:
            return 1
        cores = self.default_parallelism()
        cap = cap if cap and cap > 0 else PARTITIONS_PER_CORE * cores
        return max(1, min(max(math.ceil(n / max(1, per_task)), min(n, cores)), cap))

    def add_executor_requests(self, delta: str | dict[str, int]) -> None:
        """Add a task's request counts (a dict, or its JSON) to the job's."""
        if isinstance(delta, str):

            delta = json.loads(delta) if delta else {}
        requests.add(self.executor_requests, delta)

    # ---- placement -----------------------------------------------------------------------
    def distributed(self, items: int, limit: int | None = None, *, storage: Storage | None = None, requests_per_item: float = 0.0,
                    phase: str | None = None, jobs: int = 1) -> bool:
        """Whether a phase of `items` items runs on the executors.

        ``auto`` over an object store (`storage` not local, `requests_per_item` given): where its
        estimated time is shorter (`placement.estimate`; recorded into the phase's entry in
        ``details["execution"]`` when `phase` names it). Over local files: when the items exceed
        `limit` (default ``local_max_items``), the crossover measured for local disk.
        """
        if self.mode == LOCAL:
            return False
        if self.mode == DISTRIBUTED:
            return items > 0
        if storage is not None and storage.remote and requests_per_item > 0 and items > 0:
            est = self.estimate(items * requests_per_item, storage.scheme, items, jobs,
                                engine=getattr(storage, "engine", None))
            if est is not None:
                if phase:
                    self._estimates[phase] = est.to_dict()
                return est.executors_faster
        return items > (self.limits.local_max_items if limit is None else limit)

    def estimate(self, n_requests: float, scheme: str, items: int, jobs: int = 1, engine: ObjectIO | None = None
                 ) -> placement.Estimate | None:
        """`placement.Estimate` of a phase of `n_requests` requests on `scheme`, or None before
        any request measured the store's latency. With the I/O engine (`engine`, the storage's
        `trinitylake.storage.object_io.ObjectIO`), the driver and each executor task keep its
        limit of requests in flight, at its measured CPU per request."""
        lat = requests.latency(scheme)
        if lat is None:
            return None
        cpus_here = os.cpu_count() or 1
        # Executors on this machine share its cores with whatever else runs: the load average
        # says how many are really free (a 4-executor local-cluster took 29 s to start on an idle
        # 2-core machine, 52-84 s beside other work).
        busy = max(1.0, _load() / cpus_here)
        here = False
        if self.started:
            slots = self.default_parallelism()
            here = self.executors_share_the_driver() or _local_cluster(self.spark)
            cpus = min(slots, cpus_here) if here else slots
        elif self.promised is not None:
            slots, here = self.promised
            cpus = min(slots, cpus_here) if here else slots
        else:
            slots = cpus = placement.ASSUMED_SLOTS
        threads = self.limits.threads
        cpu_per_request = placement.CPU_PER_REQUEST
        if engine is not None:
            threads = engine.in_flight.limit()
            cpu_per_request = engine.in_flight.cpu_per_request_s
        tasks = min(items, PARTITIONS_PER_CORE * slots)
        start = self.start_s if self.start_s is not None else placement.SESSION_START
        if here:
            cpus = max(1, int(cpus / busy))
            start *= busy
        if self._starting is not None:  # already starting (`prestart`): count half of it
            start /= 2
        return placement.estimate(n_requests, lat, threads=threads, slots=slots, cpus=cpus, tasks=tasks,
                                  session_started=self.started, jobs=jobs, start_s=start, here=here,
                                  driver_cpus=cpus_here if engine is not None else 1,
                                  cpu_per_request=cpu_per_request)

    def executors_share_the_driver(self) -> bool:
        """Whether the started classic session's executors run on the driver's own cores (a
        ``local``/``local[N]`` master): "distributed" then adds no hardware, only Spark's per-task
        and Arrow costs. False before a session starts and under Spark Connect (whose server, and
        so its executors, may be anywhere)."""
        if not self.started or self.is_connect:
            return False
        master = (_conf(self.spark.conf, "spark.master") or "").strip()
        return master == "local" or re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master) is not None

    def fits_driver(self, rows: int) -> bool:
        """Whether a driver-local phase may hold `rows` rows (always in ``local`` mode)."""
        return self.mode == LOCAL or rows <= self.limits.driver_max_rows

    @contextmanager
    def phase(self, name: str, where: str, items: int, what: str | None = None) -> Iterator[dict[str, Any]]:
        """Record one phase: where it ran, its items and seconds (summed over repeats)."""
        notify(what or name)
        shown = progress.start_phase(name, what or name, items, where)  # counts for the CLI and logs
        t0 = time.perf_counter()
        entry = self.record.setdefault(name, {"where": where, "items": 0, "seconds": 0.0})
        if entry["where"] != where:
            entry["where"] = "mixed"
        est = self._estimates.pop(name, None)
        if est is not None:  # what `auto` expected, beside what happened (`seconds`)
            entry.setdefault("estimates", []).append({**est, "chose": where})
        entry["items"] += int(items)
        if where == DISTRIBUTED:
            self.describe(f"{what or name} ({items} items)")
        ok = False
        try:
            yield entry
            ok = True
        finally:
            progress.end_phase(shown, failed=not ok)
            entry["seconds"] = round(entry["seconds"] + time.perf_counter() - t0, 3)
            if where == DISTRIBUTED:
                self.describe(None)

    def describe(self, what: str | None) -> None:
        """Tag the session's next Spark jobs with the phase (``SparkSession.addTag``: the
        DataFrame-API way, in classic mode and under Spark Connect alike)."""
        if not self.started:
            return
        try:
            if self._tag:
                self.spark.removeTag(self._tag)
                self._tag = None
            if what:
                self._tag = re.sub(r"[^A-Za-z0-9_.:-]+", "_", f"{self.label}: {what}")[:200]
                self.spark.addTag(self._tag)
        except Exception:  # noqa: BLE001 - tags are cosmetic
            self._tag = None

    # ---- running Arrow functions ---------------------------------------------------------
    def to_df(self, table: pa.Table, partitions: int = 0) -> DataFrame:
        """A DataFrame of a driver-held Arrow table (bounded by the phase thresholds)."""
        df = self.spark.createDataFrame(table, schema=ddl(table.schema))
        if partitions > 1:
            df = df.repartition(partitions)
        return df

    def map_arrow(self, source: pa.Table | DataFrame, fn: BatchFn, schema: pa.Schema, partitions: int) -> DataFrame:
        """Run `fn` over `source` (a DataFrame, or an Arrow table shipped to the executors) in
        `partitions` tasks; returns the (lazy) DataFrame of what it yields."""
        df = self.to_df(source) if isinstance(source, pa.Table) else source
        df = df.repartition(partitions) if partitions > 1 else df.coalesce(1)
        return df.mapInArrow(fn, ddl(schema))


def _warm_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of `warm_executors`: import what the jobs' tasks import."""

    for name in ("trinitylake.treewalk.reach", "trinitylake.jobs.export.copying", "fsspec", "s3fs"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    yield from batches


def warm_executors(spark: Session) -> None:
    """One small job with a task per core, so that every executor registers and starts its
    Python worker (and imports our modules) before the first phase needs it: on a 4-executor
    local-cluster the first job took 18 s, the next ones 2-3 s. Best effort."""
    try:
        n = session_parallelism(spark)
        spark.range(0, n, 1, n).mapInArrow(_warm_task, "id bigint").count()
    except Exception:  # noqa: BLE001 - the phase that needs Spark will say what is wrong
        log.debug("warming the executors failed", exc_info=True)


def warm_arrow() -> None:
    """Let pyarrow import pandas now, in the background: its first ``pa.array`` of a Python
    list imports pandas when installed (0.4-0.9 s here), which a job's first Arrow conversion
    would otherwise wait for; the job's first reads overlap it. Called once per job."""

    if "pandas" in sys.modules:
        return
    threading.Thread(target=lambda: pa.array([0], pa.int64()), name="tlake-warm-arrow", daemon=True).start()


@contextmanager
def timed(seconds: dict[str, float], name: str, what: str | None = None, *, announce: bool = False,
          job: str = "") -> Iterator[None]:
    """Time one phase of a job into `seconds` (the job's ``result.seconds``; summed over repeats,
    in seconds to the millisecond). With `what`, its start (and end) is logged, prefixed by `job`;
    with `announce`, `what` also goes to the progress listeners (`notify`) as it starts."""
    if what is not None:
        if announce:
            notify(what)
        log.info("%sphase %s started (%s)", f"{job}: " if job else "", name, what)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        dt = time.perf_counter() - t0
        seconds[name] = round(seconds.get(name, 0.0) + dt, 3)
        if what is not None:
            log.info("%sphase %s took %.2fs", f"{job}: " if job else "", name, dt)


@contextmanager
def executor_failures(what: str, advice: str) -> Iterator[None]:
    """A failed executor job (a lost executor, a task's error, all arriving wrapped) raised as a
    `StorageError` that names `what` plainly, then `advice`; the library's own typed errors pass
    as raised. The one wrapper (`rowsets.Place.executor_failures` for a placed step)."""
    try:
        yield
    except TrinityLakeError:
        raise
    except Exception as e:
        first = str(e).strip().splitlines()[0][:500] if str(e).strip() else type(e).__name__
        raise StorageError(f"{what} failed ({first}); {advice}") from e


# ---- sessions --------------------------------------------------------------------------------
def functions_for(spark: Session) -> ModuleType:
    """The ``functions`` module matching `spark` (see :attr:`Execution.F`), imported now: a
    session exists, so pyspark is loaded already (this module never imports it at its top)."""
    return importlib.import_module("pyspark.sql.connect.functions" if is_connect_session(spark)
                                   else "pyspark.sql.functions")


def describe_session(spark: Session) -> str:
    try:
        return f"{'connect' if is_connect_session(spark) else 'classic'}, Spark {spark.version}"
    except Exception:  # noqa: BLE001
        return "unknown"


def session_parallelism(spark: Session) -> int:
    """Default parallelism without SparkContext: ``spark.default.parallelism`` when set, else the
    cores of a ``local[N]`` master, else the shuffle partitions (a cluster's usual sizing)."""
    conf = spark.conf
    v = _conf(conf, "spark.default.parallelism")
    if v and v.isdigit():
        return max(1, int(v))
    # local, local[N], local-cluster[E,C,M]: the cores the master names (no probe job).
    named = placement.promised_slots(_conf(conf, "spark.master") or "")
    if named is not None and named[1]:
        return max(1, named[0])
    # A cluster: the partitions of a range without an explicit count are Spark's default
    # parallelism (one tiny job; works without SparkContext).
    try:
        F = functions_for(spark)  # noqa: N806
        row = spark.range(0, 1 << 16).select(F.max(F.spark_partition_id()).alias("p")).collect()[0]
        return max(1, int(row["p"]) + 1)
    except Exception:  # noqa: BLE001
        v = _conf(conf, "spark.sql.shuffle.partitions")
        return max(1, int(v)) if v and v.isdigit() else 8


def _load() -> float:
    """The 1-minute load average (0 where the system does not tell)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return 0.0


def _local_cluster(spark: Session) -> bool:
    """Whether a classic session's master is ``local-cluster[...]`` (executor JVMs on this machine)."""
    try:
        return (_conf(spark.conf, "spark.master") or "").startswith("local-cluster")
    except Exception:  # noqa: BLE001
        return False


def _conf(conf: RuntimeConfig | RuntimeConf, key: str) -> str | None:
    try:
        v = conf.get(key, None)
    except Exception:  # noqa: BLE001 - Connect raises for unknown keys on some servers
        return None
    return None if v is None else str(v)


# ---- Arrow helpers -----------------------------------------------------------------------------
_DDL_TYPES = {
    pa.string(): "string",
    pa.large_string(): "string",
    pa.int64(): "bigint",
    pa.int32(): "int",
    pa.float64(): "double",
    pa.bool_(): "boolean",
    pa.binary(): "binary",
}


def ddl(schema: pa.Schema) -> str:
    """Spark DDL of a flat Arrow schema (the return type of ``mapInArrow``)."""
    return ", ".join(f"{f.name} {_DDL_TYPES[f.type]}" for f in schema)


def batch_of(schema: pa.Schema, columns: Mapping[str, Sequence[object]] | Iterable[Sequence[object]]
             ) -> pa.RecordBatch:
    """One record batch of `schema` from column lists (by name or in order)."""
    cols = [columns[f.name] for f in schema] if isinstance(columns, Mapping) else list(columns)
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)],
                                      schema=schema)


def chunks(it: Iterable[T], n: int) -> Iterator[list[T]]:
    """Lists of up to `n` consecutive items of `it` (bounds what a task holds at once)."""
    buf: list[T] = []
    for x in it:
        buf.append(x)
        if len(buf) >= n:
            yield buf
            buf = []
    if buf:
        yield buf


def rows_of(batches: Iterable[pa.RecordBatch], *names: str) -> Iterator[tuple[Any, ...]]:
    """Rows (tuples of the named columns) of record batches, batch by batch."""
    for b in batches:
        cols = [b.column(b.schema.get_field_index(n)).to_pylist() for n in names]
        yield from zip(*cols, strict=True)


def as_execution(spark_or_ex: Execution | Session) -> Execution:
    """An `Execution` as given, or one that puts every phase on the executors of `spark` (a
    SparkSession passed by callers that predate placement: tests, notebooks)."""
    if isinstance(spark_or_ex, Execution):
        return spark_or_ex
    return Execution(DISTRIBUTED, spark=spark_or_ex)
