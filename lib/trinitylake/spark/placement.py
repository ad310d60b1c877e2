"""Where a phase over an object store finishes first: its time estimated on the driver and on
the executors, from what can be measured before it runs.

A phase over an object store is bound by requests: each waits a round trip (10-100 ms), and a
Python client spends about `CPU_PER_REQUEST` of its interpreter on each. The driver overlaps
`threads` of them in one interpreter; the executors overlap ``slots x threads`` in as many
interpreters, after Spark's own costs (starting a session, a job, its tasks):

    driver    = requests / min(threads / latency, 1 / CPU_PER_REQUEST)
    executors = start + job + tasks x per_task / slots
                + requests / min(slots x threads / latency, cpus / CPU_PER_REQUEST)

`latency` is the median of the job's first single requests (`storage.requests.latency`);
`slots` the executor cores the session has (or, before it starts, what its master or
configuration promises); `cpus` the cores that run them (on a ``local[N]`` or ``local-cluster``
master, this machine's). Local files are not estimated this way: their per-item cost is CPU in
one interpreter, and the item-count thresholds measured for them stay (BENCHMARKS.md).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from typing import Any

#: Interpreter time a Python S3 client spends per request (signing, HTTP, parsing): 1.75-2.3 ms
#: measured here with our lean client settings (`storage.filesystem._LEAN_CLIENT`; 2.5-2.7 ms with
#: botocore's defaults), so one interpreter tops out near 500 requests/s.
CPU_PER_REQUEST = 0.002
#: Spark's own costs, measured here (BENCHMARKS.md): a classic session 6-8 s (a local-cluster
#: of 4 executor JVMs ~10 s), a job's scheduling and Python worker start ~1-4 s, a Python
#: task ~30 ms.
SESSION_START = 8.0
JOB_OVERHEAD = 2.0
TASK_OVERHEAD = 0.03
#: A ``local-cluster`` master starts its executor JVMs on this machine, and each must register
#: and start its Python worker before the first task: measured with 4 executors on 2 cores,
#: 29 s to the session and 18 s more for the first job (against ~8 s and ~4 s for local[2]).
LOCAL_EXECUTOR_START = 18.0
#: Executors on the driver's own machine (local[N], local-cluster) share its cores with the
#: driver, their JVMs and Arrow hand-overs (and, on our benchmark machines, with the store's
#: server and latency proxy): a 4-executor local-cluster copied 8,717 files (17.4k requests)
#: in 52-92 s on 2 cores, 190-335 requests/s, about 3x the client's CPU per request.
HERE_CPU_FACTOR = 3.0
#: How much faster the executors' estimate must be to move a phase there (`Estimate.executors_faster`).
EXECUTOR_MARGIN = 1.25
#: ``local-cluster[executors, cores each, MiB each]``: executor JVMs on this machine.
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]")
#: Executor cores assumed for a session whose size cannot be read before it starts.
ASSUMED_SLOTS = 8


def start_seconds(master: str | None, conf: dict[str, str] | None = None) -> float:
    """Seconds from asking for a session to its first task: `SESSION_START`, plus, for a
    ``local-cluster[E,C,M]`` master, E executor starts sharing this machine's cores."""
    m = (master or (conf or {}).get("spark.master") or "").strip()
    hit = _LOCAL_CLUSTER.fullmatch(m)
    if hit:
        return SESSION_START + LOCAL_EXECUTOR_START * int(hit.group(1)) / max(1, os.cpu_count() or 1)
    return SESSION_START


@dataclass(frozen=True)
class Estimate:
    """A phase's estimated seconds in each place, and what the estimate rests on."""

    driver_s: float
    executors_s: float
    requests: float
    latency_ms: float
    driver_threads: int
    slots: int
    cpus: int

    @property
    def executors_faster(self) -> bool:
        """Clearly faster: by `EXECUTOR_MARGIN`, since a Spark estimate is the less certain
        one (a session's start varies 2-3x with the machine's load) and a wrong move to the
        executors costs far more than a phase kept on the driver."""
        return self.executors_s * EXECUTOR_MARGIN < self.driver_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("driver_s", "executors_s", "requests", "latency_ms"):
            d[k] = round(float(d[k]), 3)
        return d


def estimate(requests: float, latency_s: float, *, threads: int, slots: int, cpus: int, tasks: int,
             session_started: bool, jobs: int = 1, start_s: float = SESSION_START, here: bool = False,
             driver_cpus: int = 1, cpu_per_request: float = CPU_PER_REQUEST) -> Estimate:
    """Seconds of a phase of `requests` requests on the driver and on the executors (see the
    module doc). `jobs`: Spark jobs the phase runs (a walk runs one per level); `start_s`: what
    starting the session costs when it is not up (`start_seconds`); `here`: the executors run on
    the driver's machine (`HERE_CPU_FACTOR`). `threads`: requests in flight per process (the I/O
    engine's limit, or a thread pool's size); `cpu_per_request` the client's CPU per request;
    `driver_cpus`: the cores its requests can use on the driver (the engine's client runtime
    spreads over them; botocore, under the interpreter lock, cannot: leave 1)."""
    latency_s = max(latency_s, 1e-4)
    threads, slots, cpus = max(1, threads), max(1, slots), max(1, cpus)
    driver_rate = min(threads / latency_s, max(1, driver_cpus) / cpu_per_request)
    executor_rate = min(slots * threads / latency_s, cpus / (cpu_per_request * (HERE_CPU_FACTOR if here else 1.0)))
    overhead = (0.0 if session_started else start_s) + jobs * JOB_OVERHEAD + tasks * TASK_OVERHEAD / slots
    return Estimate(driver_s=requests / driver_rate, executors_s=overhead + requests / executor_rate,
                    requests=requests, latency_ms=latency_s * 1000.0, driver_threads=threads, slots=slots, cpus=cpus)


def promised_slots(master: str | None, conf: dict[str, str] | None = None) -> tuple[int, bool] | None:
    """Executor cores a session will have, read from its master or configuration before it
    starts: (cores, on this machine), or None when nothing says (a cluster manager's default,
    Spark Connect)."""
    conf = conf or {}
    m = (master or conf.get("spark.master") or "").strip()
    if m == "local":
        return 1, True
    hit = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", m)
    if hit:
        return (os.cpu_count() or 1) if hit.group(1) == "*" else int(hit.group(1)), True
    hit = _LOCAL_CLUSTER.fullmatch(m)
    if hit:
        return int(hit.group(1)) * int(hit.group(2)), True
    inst, cores = conf.get("spark.executor.instances"), conf.get("spark.executor.cores")
    if inst and inst.isdigit():
        return int(inst) * (int(cores) if cores and cores.isdigit() else 1), False
    dyn = conf.get("spark.dynamicAllocation.maxExecutors")
    if dyn and dyn.isdigit() and int(dyn) < 10_000:
        return int(dyn) * (int(cores) if cores and cores.isdigit() else 1), False
    return None
