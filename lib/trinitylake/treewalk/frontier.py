"""One frontier walk over the tree: the level loop that the reachable-file walk
(`trinitylake.jobs.walk.job`, and so expire's walks) and the export planner
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

from collections.abc import Iterator, Sized
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from trinitylake.spark.execution import Execution
    from trinitylake.storage import Storage
    from trinitylake.util import Session

#: What a walk's frontier holds (keys and what each level needs of them).
F = TypeVar("F", bound=Sized)
#: What a walk returns.
R_co = TypeVar("R_co", covariant=True)

_AQE = "spark.sql.adaptive.enabled"


class Levels(Protocol[F, R_co]):
    """What one walk reads per level (its rows, its rules): the frontier walk decides where."""

    @property
    def phase(self) -> str:
        """The phase its levels are recorded under (``walk.read_nodes``), for `auto`'s estimate."""
        ...

    @property
    def storage(self) -> Storage:
        """Where its node files are (one GET per node file: an object store's estimate counts them)."""
        ...

    def held_after(self, frontier: F) -> int:
        """Rows the driver would hold after reading `frontier` there."""
        ...

    def on_executors_only(self) -> bool:
        """Whether what the walk holds is on the executors already (its levels must go there)."""
        ...

    def driver_level(self, frontier: F, depth: int) -> F:
        """Read one level on the driver; the next frontier."""
        ...

    def executor_levels(self, frontier: F, depth: int) -> R_co:
        """Hand `frontier` and what the driver holds to the executors; read every remaining
        level there; the walk's result."""
        ...

    def driver_result(self) -> R_co:
        """The walk's result when every level ran on the driver."""
        ...


def walk_levels(ex: Execution, levels: Levels[F, R_co], frontier: F, depth: int) -> R_co:
    """Walk from `frontier` (node files at `depth`) to the bottom of the tree: driver levels
    while they are small and fit, then (at most once) the executors for the rest."""
    while size := len(frontier):
        # One GET per node file: on an object store `auto` compares estimated times.
        on_executors = ex.distributed(size, storage=levels.storage, requests_per_item=1, phase=levels.phase)
        if levels.on_executors_only() or on_executors or not ex.fits_driver(levels.held_after(frontier)):
            with executor_levels(ex.spark):
                return levels.executor_levels(frontier, depth)
        frontier = levels.driver_level(frontier, depth)
        depth += 1
    return levels.driver_result()


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
