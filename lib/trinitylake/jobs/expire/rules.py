"""Which versions expire: the retention policy and its planner. Pure Python, no storage.

A version ``u`` (never the latest) expires only if **all** of these hold, checked from the
oldest version upwards; the first version that fails one stops the scan, so only a
contiguous *oldest* prefix ever expires:

1. it is not among the newest ``min_versions_to_keep`` versions;
2. it is older than its maximum age: ``now - created_at(u) > overrides.get(u, max_age)``;
3. it is older than every version pinned by a partial or minimal export (a pinned version and
   everything newer are kept);
4. ``created_at(u) < now - txn_ttl - clock_skew_margin`` (the spec's rule: a transaction that
   could still exclusively create root ``u`` began before ``u`` existed, so it has expired and
   cannot fork history after the root file is deleted); and the same for ``u + 1``, its
   successor: a transaction pinned at ``u`` began while ``u`` was the latest version, i.e.
   before ``u + 1`` was created, so once ``u + 1`` is older than the TTL no live transaction
   still reads ``u``'s tree.

The plan refuses (UnsafeOperationError) to leave no retained version.

**Owned.** Of the files only the expired versions reach, expire deletes only those whose
names the format owns (`OWNED_PATTERNS`: root node files, ``_lakehouse_def_*`` and
hash-prefixed ``.arrow|binpb`` files, as `trinitylake.format.paths.is_format_owned`), and
only those still present (`trinitylake.treewalk.walk_rules.present`). The patterns are the rule;
:func:`owned` (a Python value), :func:`owned_arrow` (an Arrow array) and :func:`owned_column`
(a Spark column) only apply them.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trinitylake.config import DEFAULT_MAX_VERSION_AGE_MS, DEFAULT_MIN_VERSIONS_TO_KEEP, format_timestamp
from trinitylake.errors import UnsafeOperationError, ValidationError
from trinitylake.format.definitions import DEFAULT_TXN_TTL_MILLIS, LakehouseDef
from trinitylake.format.paths import LAKEHOUSE_DEF_RE, OWNED_HASHED_RE, ROOT_RE
from trinitylake.values import format_duration

if TYPE_CHECKING:
    from pyspark.sql import Column

    from trinitylake.config import ExpireConfig

#: Format-owned paths (relative to the root): only these are ever deleted. Java regexes
#: (``rlike``), RE2 (``pc.match_substring_regex``) and Python's ``re`` read them the same.
OWNED_PATTERNS = (ROOT_RE.pattern, LAKEHOUSE_DEF_RE.pattern, OWNED_HASHED_RE.pattern)


def owned(path: str) -> bool:
    """The rule on one path: the format owns it."""
    return any(re.search(p, path) for p in OWNED_PATTERNS)


def owned_arrow(paths: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """The rule on an Arrow array of paths: a boolean mask (false where the path is null)."""
    masks = [pc.match_substring_regex(paths, p) for p in OWNED_PATTERNS]
    return pc.fill_null(functools.reduce(pc.or_, masks), False)


def owned_column(path: Column) -> Column:
    """The rule on a Spark column of paths: a boolean column."""
    cols: list[Column] = [path.rlike(p) for p in OWNED_PATTERNS]
    return functools.reduce(operator.or_, cols)


@dataclass(frozen=True)
class RetentionPolicy:
    """Effective retention settings of one expire run."""

    max_version_age_ms: int
    min_versions_to_keep: int
    txn_ttl_ms: int
    clock_skew_margin_ms: int = 0
    overrides_ms: Mapping[int, int] = field(default_factory=dict)
    pins: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.min_versions_to_keep < 1:
            raise ValidationError(f"min_versions_to_keep must be at least 1, got {self.min_versions_to_keep}")
        if self.max_version_age_ms < 0 or self.txn_ttl_ms < 0 or self.clock_skew_margin_ms < 0:
            raise ValidationError("ages, TTL and clock skew margin must not be negative")

    @classmethod
    def from_definition(
        cls,
        d: LakehouseDef,
        *,
        max_version_age_ms: int | None = None,
        min_versions_to_keep: int | None = None,
        clock_skew_margin_ms: int = 0,
    ) -> RetentionPolicy:
        """Policy from the lakehouse definition's extension fields, overridden by the job's
        explicit settings (None = not given). Unset fields (0) fall back to 7 days and 3."""
        def_age = d.maximum_version_age_millis or None
        def_keep = d.minimum_versions_to_keep or None
        age = max_version_age_ms if max_version_age_ms is not None else (def_age or DEFAULT_MAX_VERSION_AGE_MS)
        keep = min_versions_to_keep if min_versions_to_keep is not None else (def_keep or DEFAULT_MIN_VERSIONS_TO_KEEP)
        return cls(
            max_version_age_ms=int(age),
            min_versions_to_keep=int(keep),
            txn_ttl_ms=int(d.txn_ttl_millis or DEFAULT_TXN_TTL_MILLIS),
            clock_skew_margin_ms=int(clock_skew_margin_ms),
            overrides_ms={int(k): int(v) for k, v in d.maximum_version_age_millis_overrides.items()},
            pins={str(k): int(v) for k, v in d.exported_snapshot_pins.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["overrides_ms"] = {str(k): v for k, v in self.overrides_ms.items()}
        out["pins"] = dict(self.pins)
        return out


def effective_retention(
    cfg: ExpireConfig, *, definition_max_age_ms: int | None, definition_min_versions: int | None
) -> tuple[int, int]:
    """``(max_version_age_ms, min_versions_to_keep)`` of an expire run: the config's nulls
    resolved against the lakehouse (`trinitylake.config` leaves them null).

    The config wins when set; else the lakehouse definition's value; else 7d and 3.
    """
    max_age = cfg.max_version_age
    if max_age is None:
        max_age = definition_max_age_ms if definition_max_age_ms is not None else DEFAULT_MAX_VERSION_AGE_MS
    keep = cfg.min_versions_to_keep
    if keep is None:
        keep = definition_min_versions if definition_min_versions is not None else DEFAULT_MIN_VERSIONS_TO_KEEP
    return max_age, keep


@dataclass(frozen=True)
class ExpirationPlan:
    """Which of the considered versions expire. `expired` is an oldest prefix of `versions`."""

    now_ms: int
    policy: RetentionPolicy
    versions: tuple[int, ...]
    expired: tuple[int, ...]
    retained: tuple[int, ...]
    stop_version: int | None
    stop_reason: str

    @property
    def oldest_retained(self) -> int:
        return self.retained[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "now_ms": self.now_ms,
            "now": format_timestamp(self.now_ms),
            "policy": self.policy.to_dict(),
            "versions_considered": len(self.versions),
            "expired": list(self.expired),
            "oldest_retained": self.oldest_retained,
            "latest": self.retained[-1],
            "stop_version": self.stop_version,
            "stop_reason": self.stop_reason,
        }


def plan_expiration(
    versions: Sequence[int],
    created_at: Callable[[int], int] | Mapping[int, int],
    policy: RetentionPolicy,
    now_ms: int,
) -> ExpirationPlan:
    """Plan an expiration over the available `versions` (ascending; the last is the latest).

    `created_at` gives a version's ``created_at_millis``; it is called for the versions the
    scan looks at only (the expired prefix, the version that stops it, and its successor), so
    a caller can read root files lazily.

    Raises:
        UnsafeOperationError: no version is available, or none would be retained.
    """
    vs = tuple(versions)
    if not vs:
        raise UnsafeOperationError("no version is available: the lakehouse has no root node file to retain")
    if any(b <= a for a, b in zip(vs, vs[1:], strict=False)):
        raise ValidationError(f"versions must be strictly ascending, got {list(vs)[:10]}...")
    get = created_at.__getitem__ if isinstance(created_at, Mapping) else created_at
    n = len(vs)
    keep_from = max(0, n - policy.min_versions_to_keep)
    first_pin = min(policy.pins.values()) if policy.pins else None
    pin_name = min(policy.pins, key=lambda k: (policy.pins[k], k)) if policy.pins else None
    txn_cutoff = now_ms - policy.txn_ttl_ms - policy.clock_skew_margin_ms
    stop_version: int | None = None
    reason = "every version but the latest is expirable"
    i = 0
    while i < n - 1:
        u = vs[i]
        if i >= keep_from:
            stop_version, reason = u, f"the newest {policy.min_versions_to_keep} versions are kept"
            break
        if first_pin is not None and u >= first_pin:
            stop_version, reason = u, f"version {first_pin} is pinned by export {pin_name!r}; it and newer are kept"
            break
        created = get(u)
        max_age = policy.overrides_ms.get(u, policy.max_version_age_ms)
        if not now_ms - created > max_age:
            stop_version = u
            reason = f"version {u} (created {format_timestamp(created)}) is not older than its maximum age {format_duration(max_age)}"
            break
        if not created < txn_cutoff:
            stop_version = u
            reason = (f"version {u} is younger than the transaction TTL plus clock skew margin "
                      f"({format_duration(policy.txn_ttl_ms + policy.clock_skew_margin_ms)})")
            break
        succ = vs[i + 1]
        if succ != u + 1:
            stop_version, reason = u, f"version {u + 1} is missing; expiration stops at a gap in the version chain"
            break
        if not get(succ) < txn_cutoff:
            stop_version = u
            reason = (f"version {succ}, the successor of version {u}, is younger than the transaction TTL plus "
                      f"clock skew margin: a transaction that began at version {u} may still be running")
            break
        i += 1
    else:
        if n == 1:
            reason = "only the latest version exists"
    expired, retained = vs[:i], vs[i:]
    if not retained:  # unreachable by construction; the guard stays (paimon #7710)
        raise UnsafeOperationError("the expiration plan would retain no version; refusing")
    return ExpirationPlan(now_ms, policy, vs, expired, retained, stop_version, reason)
