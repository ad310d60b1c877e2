"""Named points where a test harness may act on a running job or commit (`crash_point`): a
handler may observe the point, or kill the process there; the library's own behaviour never
depends on it.

Production code only calls them; by default nothing is registered and they do nothing. The
tests register handlers (``tests/support/faultsite``: in the pytest process and, through
``sitecustomize``, in every process the tests start, Spark's Python workers included), so no
fault switch is read from the environment by the library itself. Imports nothing from the
package (the lakehouse and the Spark jobs both use it).
"""

from __future__ import annotations

from collections.abc import Callable

_crash_handlers: list[Callable[[str], None]] = []


def crash_point(name: str) -> None:
    """A point where a crash test may kill the process (e.g. ``expire_after_commit``)."""
    for handler in _crash_handlers:
        handler(name)


def on_crash_point(handler: Callable[[str], None]) -> None:
    """Register `handler(name)`, called at every crash point (tests only)."""
    if handler not in _crash_handlers:
        _crash_handlers.append(handler)
