"""Module-level thread pools that survive a fork: each process gets its own."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


class ForkSafePool:
    """A `ThreadPoolExecutor` made on first use in each process. A pool made at import and used
    before a fork (a server's worker processes, Spark's forked Python workers) is copied into the
    child without its threads, and believes its idle ones are there: work given to it there
    waits forever."""

    def __init__(self, workers: int, name: str):
        self._workers, self._name = workers, name
        self._lock = threading.Lock()
        self._pool: tuple[int, ThreadPoolExecutor] | None = None

    def get(self) -> ThreadPoolExecutor:
        pid = os.getpid()
        made = self._pool
        if made is None or made[0] != pid:
            with self._lock:
                made = self._pool
                if made is None or made[0] != pid:
                    made = self._pool = (pid, ThreadPoolExecutor(self._workers, thread_name_prefix=self._name))
        return made[1]
