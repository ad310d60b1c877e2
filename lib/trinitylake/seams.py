"""Named points where a test harness may act on a running job or commit: crash the process
(`crash_point`), or let only so many delete batches run (`delete_batches_allowed`).

Production code only calls them; by default nothing is registered and they do nothing. The
tests register handlers (``tests/support/faultsite``: in the pytest process and, through
``sitecustomize``, in every process the tests start, Spark's Python workers included), so no
fault switch is read from the environment by the library itself. Imports nothing from the
package (the lakehouse and the Spark jobs both use it).
"""

from __future__ import annotations

from collections.abc import Callable

_crash_handlers: list[Callable[[str], None]] = []
_delete_budget: list[Callable[[], int | None]] = []


def crash_point(name: str) -> None:
    """A point where a crash test may kill the process (e.g. ``expire_after_commit``)."""
    for handler in _crash_handlers:
        handler(name)


def delete_batches_allowed() -> int | None:
    """How many delete batches of the coming phase may run before the rest fail as if the job
    had been killed mid-delete; None (the normal case): all of them."""
    for source in _delete_budget:
        n = source()
        if n is not None:
            return n
    return None


def on_crash_point(handler: Callable[[str], None]) -> None:
    """Register `handler(name)`, called at every crash point (tests only)."""
    if handler not in _crash_handlers:
        _crash_handlers.append(handler)


def on_delete_budget(source: Callable[[], int | None]) -> None:
    """Register `source()`, asked for the delete budget of each delete phase (tests only)."""
    if source not in _delete_budget:
        _delete_budget.append(source)
