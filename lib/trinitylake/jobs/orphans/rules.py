"""Orphan-file rules: which listed files may be deleted. Pure: no I/O, no Spark, no storage.

A listed file is an orphan candidate only if

* it lies inside the lakehouse root and its name is owned by the format
  (:func:`trinitylake.format.paths.is_format_owned`: root node files, ``_lakehouse_def_*``
  and hash-prefixed ``bbbb/bbbb/bbbb/bbbbbbbb-*.arrow|binpb`` files);
* it is not under a folder the format does not own (``_control/``, ``_maintenance/``,
  Iceberg table folders, anything else): listing descends only into the sixteen
  first-level hash folders ``[01]{4}/``;
* its modification time is known and older than the cutoff (``reference_time - older_than``,
  where ``older_than`` is at least the lakehouse's transaction TTL: in-flight commits write
  their node and definition files before their root exists);
* no retained version, export or pinned version reaches it (compared on walk keys, see
  `trinitylake.treewalk.reach`), nor the running root of a live distributed transaction
  (`trinitylake.lakehouse.distributed`: a lease renewed by every stage can outlive the age
  floor, so its older staged definitions are kept by reachability, not by age). Its state
  files ``txn-<id>[.<n>].binpb`` are hash-prefixed ``.binpb`` files like any other: the latest
  is younger than the floor while the lease runs, and the superseded ones are never read again.

**Prefix mismatch.** A reference may name a file of this lakehouse through another scheme or
authority (a bucket alias, ``hdfs://nn1`` vs ``hdfs://nn2``): its key is then an absolute URI
while the listing gives a relative path, and the file would look orphaned (iceberg #4194).
:func:`mismatch_key` finds such references: an absolute URI outside the root and outside
the root of every walked export (a pinned one; self-contained exports are not walked, see
`trinitylake.treewalk.walk_roots`) whose path, without scheme and authority, lies under the
root's path. By default the job stops when one of them matches a candidate; ``ignore`` keeps
those files.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trinitylake.errors import InvalidURIError, UnsafeOperationError
from trinitylake.format.paths import is_format_owned
from trinitylake.storage.uri import ParsedURI, is_absolute, parse_uri
from trinitylake.values import format_duration

HASH_DIR_RE = re.compile(r"^[01]{4}$")

if TYPE_CHECKING:
    from pyspark.sql import Column

    from trinitylake.config import OrphansConfig


def is_hash_dir(name: str) -> bool:
    """True for a first- or second-level hash folder name (``0110``)."""
    return bool(HASH_DIR_RE.match(name.rstrip("/").rsplit("/", 1)[-1]))


def split_top_level(dirs: Iterable[str], files: Iterable[tuple[str, int, float]]) -> tuple[list[str], list[str], list[tuple[str, int, float]], int]:
    """Split the root's listing: (hash folders to descend, other folders never touched,
    format-owned top-level files, count of top-level files the format does not own)."""
    hash_dirs: list[str] = []
    skipped: list[str] = []
    for d in dirs:
        (hash_dirs if is_hash_dir(d) else skipped).append(d)
    owned, not_owned = [], 0
    for f in files:
        if is_format_owned(f[0]):
            owned.append(f)
        else:
            not_owned += 1
    return sorted(hash_dirs), sorted(skipped), owned, not_owned


#: The comparisons the rule may use, each as Python's operator (which Spark columns overload
#: too) and as its Arrow compute function.
_COMPARE: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]] = {
    "gt": (operator.gt, pc.greater),
    "lt": (operator.lt, pc.less),
}


@dataclass(frozen=True)
class AgeCutoff:
    """The age rule, written once as data: a file is old enough to delete when its modification
    time (epoch seconds) is known, i.e. positive, and strictly before ``reference - min_age``.

    :meth:`checks` is that rule; :meth:`old_enough` (a Python value), :meth:`old_enough_arrow`
    (an Arrow array) and :meth:`old_enough_column` (a Spark column) only apply it. Unknown
    times (None, null, 0) are young everywhere."""

    reference_ms: int
    min_age_ms: int

    @property
    def cutoff_ms(self) -> int:
        return self.reference_ms - self.min_age_ms

    @property
    def cutoff_s(self) -> float:
        return self.cutoff_ms / 1000.0

    def checks(self) -> tuple[tuple[str, float], ...]:
        """The rule: every ``(comparison, bound)`` must hold for the mtime (see `_COMPARE`)."""
        return (("gt", 0.0), ("lt", self.cutoff_s))

    def old_enough(self, mtime_s: float | None) -> bool:
        """The rule on one Python value (None is young)."""
        return mtime_s is not None and all(_COMPARE[op][0](mtime_s, bound) for op, bound in self.checks())

    def old_enough_arrow(self, mtime_s: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        """The rule on an Arrow array of mtimes: a boolean array (null where the mtime is null)."""
        masks = [_COMPARE[op][1](mtime_s, bound) for op, bound in self.checks()]
        return functools.reduce(pc.and_, masks)

    def old_enough_column(self, F: ModuleType, mtime_s: Column) -> Column:  # noqa: N803 - the session's functions module
        """The rule on a Spark column of mtimes; `F` is the session's functions module."""
        masks = [_COMPARE[op][0](mtime_s, F.lit(bound)) for op, bound in self.checks()]
        return functools.reduce(operator.and_, masks)


def effective_orphan_min_age(cfg: OrphansConfig, *, txn_ttl_ms: int) -> int:
    """Minimum age (ms) of an orphan candidate: ``older_than``, or the transaction TTL if null.

    Raises:
        UnsafeOperationError: ``older_than`` is below the transaction TTL and
            ``unsafe_min_age`` is not set (files of in-flight commits look unreferenced).
    """
    if cfg.older_than is None:
        return txn_ttl_ms
    if cfg.older_than < txn_ttl_ms and not cfg.unsafe_min_age:
        raise UnsafeOperationError(
            f"orphans older_than {format_duration(cfg.older_than)} is below the lakehouse transaction TTL "
            f"{format_duration(txn_ttl_ms)}: files of in-flight transactions would look orphaned. Raise older_than, "
            f"or pass --unsafe-min-age if no transaction can be running"
        )
    return cfg.older_than


def is_candidate(path: str, mtime_s: float | None, cutoff: AgeCutoff, reachable: set[str] | frozenset[str]) -> bool:
    """The whole rule for one listed file (the Spark job applies it as a join)."""
    return (not is_absolute(path) and is_format_owned(path) and cutoff.old_enough(mtime_s)
            and path not in reachable)


def mismatch_key(uri: str, root: ParsedURI, export_roots: Iterable[str] = ()) -> str | None:
    """Relative path a foreign reference `uri` would have if it meant a file of the lakehouse
    at `root` through another scheme or authority, else None.

    References under an export's root are the export's own files, not aliases.
    """
    if not is_absolute(uri):
        return None
    try:
        p = parse_uri(uri)
    except InvalidURIError:
        return None
    for e in export_roots:
        prefix = e.rstrip("/") + "/"
        if p.uri.startswith(prefix):
            return None
    if (p.scheme, p.authority) == (root.scheme, root.authority):
        return None  # same store: inside the root it would have a relative key already
    rpath = root.path.strip("/")
    path = p.path.strip("/")
    if rpath:
        if not path.startswith(rpath + "/"):
            return None
        rel = path[len(rpath) + 1 :]
    else:
        rel = path
    return rel if rel and is_format_owned(rel) else None


def export_root_dirs(export_uris: Iterable[str]) -> list[str]:
    """Root folders of exports, from the URIs of their root node files."""
    out = []
    for u in export_uris:
        try:
            out.append(parse_uri(u).uri.rsplit("/", 1)[0])
        except InvalidURIError:
            continue
    return sorted(set(out))
