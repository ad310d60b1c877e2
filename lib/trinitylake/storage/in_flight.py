"""How many requests the I/O engine (`trinitylake.storage.object_io`) keeps in flight: Little's
law over the store's round trip and the rate this process can sustain (cores / CPU per
request), both measured as the requests go."""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque

__all__ = ["DEFAULT_CPU_PER_REQUEST_S", "DEFAULT_LATENCY_S", "MAX_IN_FLIGHT", "MIN_IN_FLIGHT", "QUIET_IN_FLIGHT",
           "InFlight"]

#: Fewest requests kept in flight (a store answering in 1 ms still gains from a few).
MIN_IN_FLIGHT = 16
#: Most requests in flight per process (sockets and memory; S3 answers 5,500 GETs/s a prefix).
MAX_IN_FLIGHT = 768
#: Client CPU per request assumed before any is measured (obstore, measured 0.21-0.46 ms).
DEFAULT_CPU_PER_REQUEST_S = 0.3e-3
#: Requests a CPU-per-request sample spans at least (`InFlight.batch_ended`).
_CPU_SAMPLE_MIN = 64
#: Round trip assumed before any request returned (S3 in-region: tens of ms).
DEFAULT_LATENCY_S = 0.02
#: Recent round trips the latency estimate reads (the shortest of them): a changed latency is
#: followed within this many requests.
_LATENCY_WINDOW = 64
#: A request that starts and ends with at most this many in flight measured the store, not the
#: client: a "quiet" round trip (see `InFlight.latency`).
QUIET_IN_FLIGHT = 16
#: How long a quiet round trip stays in the estimate (a store that slowed down meanwhile is
#: then measured by the batches again).
_QUIET_TTL_S = 60.0


class InFlight:
    """How many requests to keep in flight: the store's round trip (a low percentile of the
    recent ones) times the request rate this process can sustain (cores / CPU per request)."""

    def __init__(self, cores: int | None = None, cpu_per_request_s: float = DEFAULT_CPU_PER_REQUEST_S):
        self.cores = max(1, cores or os.cpu_count() or 1)
        self.cpu_per_request_s = cpu_per_request_s
        self._recent: deque[float] = deque(maxlen=_LATENCY_WINDOW)
        self._quiet: deque[tuple[float, float]] = deque(maxlen=_LATENCY_WINDOW)  # (when, seconds)
        self._lock = threading.Lock()
        self._done = 0  # requests completed (`observe`)
        self._window: tuple[float, int] | None = None  # (process CPU, requests done) when the window began
        self._batches = 0  # batches running

    def observe(self, seconds: float, quiet: bool = False) -> None:
        """A round trip of `seconds`; `quiet`: the request started and ended with at most
        `QUIET_IN_FLIGHT` in flight."""
        self._recent.append(seconds)
        self._done += 1
        if quiet:
            self._quiet.append((time.monotonic(), seconds))

    def batch_started(self) -> None:
        """A batch begins: when none was running, the CPU-per-request window begins now (the
        process's CPU between batches is no request's)."""
        with self._lock:
            if self._batches == 0:
                self._window = (time.process_time(), self._done)
            self._batches += 1

    def batch_ended(self) -> None:
        """A batch ends: the process's CPU since the window began over the requests completed in
        it, whichever batch they belonged to, once the window holds enough of them (then a new
        window begins).

        Why one window for the process: concurrent batches (an export's parts) each saw the
        whole process's CPU over their own time but counted only their own requests, so nine
        parts at once measured nine times the cost; the limit fell to its floor (41 copies in
        flight at 100 ms, 385 a second, where 128 in flight copied 870 a second)."""
        with self._lock:
            self._batches -= 1
            cpu, done = time.process_time(), self._done
            if self._window is None or done - self._window[1] < _CPU_SAMPLE_MIN:
                return  # too few requests yet for a credible figure: the window goes on
            self.observe_cpu(cpu - self._window[0], done - self._window[1])
            self._window = (cpu, done)

    def observe_cpu(self, cpu_seconds: float, n_requests: int) -> None:
        """A batch of `n_requests` cost this process `cpu_seconds` of CPU (all its threads)."""
        if n_requests >= _CPU_SAMPLE_MIN and cpu_seconds > 0:
            per = cpu_seconds / n_requests
            # Smoothed, and bounded so that one noisy batch cannot swing the limit tenfold.
            self.cpu_per_request_s = min(max(0.7 * self.cpu_per_request_s + 0.3 * per, 0.05e-3), 5e-3)

    def latency(self) -> float:
        """The store's round trip in seconds (before any request: `DEFAULT_LATENCY_S`): the
        shortest of the recent ones and of the quiet ones of the last minute.

        Why the quiet ones: a request of a batch that keeps hundreds in flight also waits for
        the client to handle the others, so in a batch the client has to work hard for every
        round trip looks long (20 ms store, 1,000 GETs on 2 cores: 420-790 ms), and a longer
        round trip asked for more in flight, which made it longer still (the limit climbed to
        its maximum, and each extra connection cost CPU: tables expire-snapshots read its
        2,050 files 11% slower than with 128 in flight). A lone request's round trip is the
        store's; a shorter one is always credible."""
        cutoff = time.monotonic() - _QUIET_TTL_S
        seen = [*self._recent, *(x for t, x in list(self._quiet) if t >= cutoff)]
        return min(seen) if seen else DEFAULT_LATENCY_S

    def rate_ceiling(self) -> float:
        """Requests per second one process can sustain."""
        return self.cores / self.cpu_per_request_s

    def limit(self) -> int:
        """Little's law: in flight = rate x latency, within [MIN_IN_FLIGHT, MAX_IN_FLIGHT]."""
        return int(min(MAX_IN_FLIGHT, max(MIN_IN_FLIGHT, math.ceil(self.rate_ceiling() * self.latency()))))
