"""Progress of a job's long phases, with counts: items done / total, rate, per phase.

The jobs announce phases (`trinitylake.spark.execution.Execution.phase` calls
:func:`start_phase` and :func:`end_phase`); code that loops over a phase's items calls
:func:`advance`. What is shown is chosen by whoever runs the job:

* :class:`RichProgress` (``tlake <job>`` on a terminal): one bar per phase with done/total,
  rate and elapsed time, drawn on stderr by `rich`;
* :class:`LogProgress` (no terminal: Airflow, spark-submit, cron): one log line per phase
  when it ends, ``walk.read_nodes: read 1,204 node files at depth 3: 1,204 of 1,204 items in
  3.1 s (388 items/s) on the driver``, and a "so far" line every `LOG_INTERVAL_S` while a long
  phase advances, so that a log shows where a run spends its time without a line per item.

This module imports nothing from `trinitylake` so that every layer may report to it. A
listener error never stops a job (progress is cosmetic).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Column

if TYPE_CHECKING:
    from rich.console import Console

log = logging.getLogger("trinitylake.progress")


@dataclass
class PhaseProgress:
    """One running phase; `done` grows through :func:`advance`."""

    name: str
    what: str
    total: int
    where: str
    started: float = field(default_factory=lambda: time.perf_counter())  # looked up at each call
    done: int = 0
    ended: float | None = None

    @property
    def seconds(self) -> float:
        return (self.ended or time.perf_counter()) - self.started

    @property
    def rate(self) -> float | None:
        """Items per second (None until time has passed)."""
        s = self.seconds
        return self.done / s if s > 0 else None


class Listener(Protocol):
    def started(self, p: PhaseProgress) -> None: ...

    def advanced(self, p: PhaseProgress) -> None: ...

    def ended(self, p: PhaseProgress) -> None: ...


_lock = threading.Lock()
_listeners: list[Listener] = []
_current: list[PhaseProgress] = []  # a stack: phases may nest (a walk inside an expire)


def add_listener(listener: Listener) -> Callable[[], None]:
    """Register `listener`; returns the function that removes it."""
    with _lock:
        _listeners.append(listener)

    def remove() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return remove


def _call(method: str, p: PhaseProgress) -> None:
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        try:
            getattr(listener, method)(p)
        except Exception as e:  # noqa: BLE001 - progress is cosmetic; never fail a job over it
            log.debug("progress listener %r failed: %s", listener, e)


def start_phase(name: str, what: str, total: int, where: str) -> PhaseProgress:
    p = PhaseProgress(name=name, what=what, total=max(int(total), 0), where=where)
    with _lock:
        _current.append(p)
    _call("started", p)
    return p


def advance(n: int = 1) -> None:
    """`n` more items of the innermost running phase are done (thread-safe)."""
    with _lock:
        if not _current:
            return
        p = _current[-1]
        p.done = min(p.done + int(n), p.total) if p.total else p.done + int(n)
    _call("advanced", p)


def end_phase(p: PhaseProgress, *, failed: bool = False) -> None:
    """The phase is over; when it succeeded, all its items count as done."""
    with _lock:
        if p in _current:
            _current.remove(p)
        p.ended = time.perf_counter()
        if not failed:
            p.done = max(p.done, p.total)
    _call("ended", p)


def fmt_rate(rate: float | None) -> str:
    if rate is None:
        return "–"
    return f"{rate:,.0f} items/s" if rate >= 10 else f"{rate:.1f} items/s"


_WHERE = {"local": "on the driver", "distributed": "on the executors"}


def _label(p: PhaseProgress) -> str:
    return p.name if p.what == p.name else f"{p.name}: {p.what}"


def phase_line(p: PhaseProgress) -> str:
    """The one log line of an ended phase."""
    return (f"{_label(p)}: {p.done:,} of {p.total:,} items in {p.seconds:.1f} s ({fmt_rate(p.rate)}) "
            f"{_WHERE.get(p.where, p.where)}")


def running_line(p: PhaseProgress) -> str:
    """A line for a phase still running: its counts so far."""
    pct = f" ({100 * p.done / p.total:.0f}%)" if p.total else ""
    return f"{_label(p)}: {p.done:,} of {p.total:,} items so far{pct}, {p.seconds:.0f} s, {fmt_rate(p.rate)}"


#: Seconds between the "so far" lines of a long phase in a log (no terminal): a 10-minute copy
#: says where it is a few times a minute, a 1-second phase only when it ends.
LOG_INTERVAL_S = 15.0


class LogProgress:
    """One line per ended phase (no terminal), and a "so far" line every `interval` seconds
    while a phase advances: to `emit` (e.g. a write to stderr), else logged at INFO on
    ``trinitylake.progress``."""

    def __init__(self, emit: Callable[[str], None] | None = None, interval: float = LOG_INTERVAL_S):
        self.emit = emit or (lambda line: log.info("%s", line))
        self.interval = interval
        self._last: dict[int, float] = {}
        self._lock = threading.Lock()

    def started(self, p: PhaseProgress) -> None:
        with self._lock:
            self._last[id(p)] = p.started

    def advanced(self, p: PhaseProgress) -> None:
        now = time.perf_counter()
        with self._lock:
            last = self._last.get(id(p), p.started)
            if now - last < self.interval:
                return
            self._last[id(p)] = now
        self.emit(running_line(p))

    def ended(self, p: PhaseProgress) -> None:
        with self._lock:
            self._last.pop(id(p), None)
        if p.total or p.done:  # an empty phase (nothing to size, nothing to delete) says nothing
            self.emit(phase_line(p))


class RichProgress:
    """A `rich` progress display: one row per phase with done/total, rate and elapsed time.

    Use as a context manager around the job (it starts and stops the live display). The
    description column takes what the counts leave of the terminal's width and ends in an
    ellipsis, so the counts are never cut; a phase with nothing to do gets no row; the
    status row ("starting Spark") shows only while no phase runs."""

    def __init__(self, console: Console, title: str):

        self.title = title
        self.progress = Progress(
            TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
            BarColumn(bar_width=20), MofNCompleteColumn(), TaskProgressColumn(), TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(), console=console, transient=False, expand=True)
        self._tasks: dict[int, Any] = {}
        self._running = 0
        self._status = self.progress.add_task(f"{title}: starting", total=None, rate="")

    def __enter__(self) -> RichProgress:
        self.progress.start()
        self._remove = add_listener(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._remove()
        self.progress.remove_task(self._status)
        self.progress.stop()

    def status(self, what: str) -> None:
        """A message without counts (e.g. "starting Spark"), shown while no phase runs."""
        self.progress.update(self._status, description=f"{self.title}: {what}", visible=self._running == 0)

    def _row(self, p: PhaseProgress) -> Any:
        task = self._tasks.get(id(p))
        if task is None:
            task = self._tasks[id(p)] = self.progress.add_task(p.what, total=p.total or None, rate="")
        return task

    def started(self, p: PhaseProgress) -> None:
        self._running += 1
        self.progress.update(self._status, visible=False)
        if p.total:
            self._row(p)

    def advanced(self, p: PhaseProgress) -> None:
        self.progress.update(self._row(p), completed=p.done, rate=fmt_rate(p.rate))

    def ended(self, p: PhaseProgress) -> None:
        self._running = max(0, self._running - 1)
        task = self._tasks.pop(id(p), None)
        if task is not None:
            self.progress.update(task, completed=p.done, total=p.total or p.done, rate=fmt_rate(p.rate))
