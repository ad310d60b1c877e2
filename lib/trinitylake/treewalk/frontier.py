"""One frontier walk over the tree: the level loop that the reachable-file walk
(`trinitylake.treewalk.walker`: the walk, expire and orphans) and the export planner
(`trinitylake.jobs.export.planner`) both run.

A walk reads the tree level by level from its roots. Each level is placed where it finishes
first: on the driver while the level is small (`Execution.distributed`: the item thresholds on
local disk, the estimated times on an object store) and the rows the driver would then hold
stay within ``driver_max_rows``; else the walk hands its frontier and what it holds over to
the executors, once, for all its remaining levels. The executors' levels run with Spark's
adaptive query execution off: each level is one small query whose partitions the walk sizes
itself, and AQE split it into several jobs with re-planning between them (measured: a third
of a level's time on small lakehouses).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar

from trinitylake.rowsets import Place, RowSet, place
from trinitylake.spark.execution import DISTRIBUTED

if TYPE_CHECKING:
    from trinitylake.spark.execution import Execution
    from trinitylake.storage import Storage
    from trinitylake.util import Session

#: What a walk returns.
R_co = TypeVar("R_co", covariant=True)

_AQE = "spark.sql.adaptive.enabled"


class Levels(Protocol[R_co]):
    """What one walk reads per level (its rows, its rules): the frontier walk decides where."""

    @property
    def phase(self) -> str:
        """The phase its levels are recorded under (``walk.read_nodes``), for `auto`'s estimate."""
        ...

    @property
    def storage(self) -> Storage:
        """Where its node files are (one GET per node file: an object store's estimate counts them)."""
        ...

    def held_after(self, frontier: int) -> int:
        """Rows the driver would hold after reading a level of `frontier` node files there."""
        ...

    def on_executors_only(self) -> bool:
        """Whether what the walk holds is on the executors already (its levels must go there)."""
        ...

    def read_level(self, step: Place, frontier: RowSet, size: int, depth: int) -> tuple[RowSet, int]:
        """Read the `size` node files of `frontier` (held where `step` runs) at `depth`; the
        next frontier and its size (at least its distinct files, 0 at the bottom)."""
        ...

    def result(self, step: Place) -> R_co:
        """The walk's result, from what its levels held (`step`: where the last level ran)."""
        ...

    def release(self) -> None:
        """Let go of what the levels kept (checkpoints, thread pools), once the result is made."""
        ...


def walk_levels(ex: Execution, levels: Levels[R_co], frontier: RowSet, size: int, depth: int) -> R_co:
    """Walk from `frontier` (`size` node files at `depth`) to the bottom of the tree: driver
    levels while they are small and fit, then (at most once) the executors for the rest; each
    level is the walk's one `read_level`, over rows held where it runs."""
    step = Place(ex, frontier.where)
    with ExitStack() as stack:
        stack.callback(levels.release)
        if step.distributed:
            stack.enter_context(executor_levels(ex.spark))
        while size:
            if not step.distributed and _to_executors(ex, levels, size):
                step = Place(ex, DISTRIBUTED)
                stack.enter_context(executor_levels(ex.spark))
            frontier, size = levels.read_level(step, step.rows(frontier), size, depth)
            depth += 1
        return levels.result(step)


def _to_executors(ex: Execution, levels: Levels[R_co], size: int) -> bool:
    if levels.on_executors_only():
        return True
    # One GET per node file: on an object store `auto` compares estimated times.
    if place(ex, size, storage=levels.storage, requests_per_item=1, phase=levels.phase).distributed:
        return True
    return not ex.fits_driver(levels.held_after(size))


@contextmanager
def executor_levels(spark: Session) -> Iterator[None]:
    """Adaptive query execution off while a walk's levels run on the executors (see the module
    doc); the session's setting is restored after."""
    before = _conf_get(spark, _AQE)
    _conf_set(spark, _AQE, "false")
    try:
        yield
    finally:
        _conf_set(spark, _AQE, before)


def _conf_get(spark: Session, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a server may refuse to show a setting
        return None
    return None if value is None else str(value)


def _conf_set(spark: Session, key: str, value: str | None) -> None:
    try:
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
    except Exception:  # noqa: BLE001 - a server may refuse runtime settings; a walk works either way
        pass
