"""Which listed file under a table's location is an orphan. Pure Python, no storage: the phases
of `trinitylake.tables_maintenance.orphans` list and delete, these rules decide.

A listed file is, checked in this order (the first that holds):

1. **hidden**: a name in its path starts with ``_`` or ``.`` and is not a partition folder
   ``k=v`` (Iceberg's rule);
2. **nested**: under another table's location inside this one (iceberg #4265): that table's
   own listing judges it;
3. **live**: its canonical (scheme, authority, path), with the configured equivalences
   applied, is a live file's;
4. **young**: not modified before the cutoff (``now - older_than``), or of no known age;
5. **held**: under a location a damaged table has or had: that table's live set is unknown;
6. **mismatched**: a live file has the same path under another scheme or authority. Kept, or
   deleted with ``prefix_mismatch_mode`` ``delete`` (then also an orphan); ``error`` stops
   the run before any delete (iceberg #4194);
7. **orphan**: none of the above.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from trinitylake.errors import ValidationError
from trinitylake.storage import parse_uri

#: Iceberg's default and our floor for the orphan age.
MIN_AGE_MS = 3 * 24 * 3600 * 1000
MISMATCH_MODES = ("error", "ignore", "delete")
#: The verdicts of `Sieve.verdict`, in the order they are checked.
HIDDEN, NESTED, LIVE, YOUNG, HELD, MISMATCHED, ORPHAN = "hidden", "nested", "live", "young", "held", "mismatched", "orphan"


def check_age_and_mode(older_than_ms: int, unsafe_min_age: bool, prefix_mismatch_mode: str) -> None:
    """Raises ValidationError for an age below the floor without the unsafe flag, a negative
    age, or an unknown mode."""
    if older_than_ms < MIN_AGE_MS and not unsafe_min_age:
        raise ValidationError(
            f"--older-than {older_than_ms} ms is below the floor of 3 days ({MIN_AGE_MS} ms): a writer's files "
            "exist before its commit names them; pass --unsafe-min-age (unsafe_min_age: true) to go below it"
        )
    if older_than_ms < 0:
        raise ValidationError(f"--older-than must not be negative, got {older_than_ms} ms")
    if prefix_mismatch_mode not in MISMATCH_MODES:
        raise ValidationError(
            f"--prefix-mismatch-mode must be one of {', '.join(MISMATCH_MODES)}, got {prefix_mismatch_mode!r}"
        )


def hidden(rel: str) -> bool:
    """Iceberg's hidden-path rule: a name starting with ``_`` or ``.`` (a partition folder
    ``k=v`` is not hidden)."""
    return any(part[:1] in ("_", ".") and "=" not in part for part in rel.split("/"))


class Equivalence:
    """(scheme, authority, path) of a URI with the configured equivalences applied."""

    def __init__(self, schemes: dict[str, str], authorities: dict[str, str]):
        self.schemes, self.authorities = schemes, authorities

    def key(self, uri: str) -> tuple[str, str, str]:
        p = parse_uri(uri)
        return (self.schemes.get(p.scheme, p.scheme), self.authorities.get(p.authority, p.authority), p.path.strip("/"))


@dataclass
class Sieve:
    """The rules of the module doc over one run's live set (`live`: canonical URIs)."""

    eq: Equivalence
    live: Iterable[str]
    cutoff_s: float
    #: Whether a URI lies under a damaged table's location (`Damage.holds`).
    held: Callable[[str], bool] = lambda uri: False
    live_keys: set[tuple[str, str, str]] = field(init=False)
    #: path -> the (scheme, authority) pairs a live file has it under.
    live_paths: dict[str, set[tuple[str, str]]] = field(init=False)

    def __post_init__(self) -> None:
        self.live_keys = {self.eq.key(u) for u in self.live}
        self.live_paths = {}
        for s, a, p in self.live_keys:
            self.live_paths.setdefault(p, set()).add((s, a))

    def verdict(self, rel: str, uri: str, mtime: float | None, nested_in: list[str]) -> str:
        """One listed file's verdict: `rel` its path under the table's location, `nested_in`
        the locations of the tables inside this one (each ending in ``/``)."""
        if hidden(rel):
            return HIDDEN
        if any(uri.startswith(o) for o in nested_in):
            return NESTED
        k = self.eq.key(uri)
        if k in self.live_keys:
            return LIVE
        if not (mtime and 0 < mtime < self.cutoff_s):
            return YOUNG
        if self.held(uri):
            return HELD
        if self.live_paths.get(k[2]):
            return MISMATCHED
        return ORPHAN

    def live_as(self, uri: str) -> str:
        """Where a mismatched file is live: ``scheme://authority`` pairs, for the report."""
        return ", ".join(f"{s}://{a}" for s, a in sorted(self.live_paths.get(self.eq.key(uri)[2], ())))
