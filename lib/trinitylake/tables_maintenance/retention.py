"""Which snapshots of one Iceberg table stay, by Iceberg's own rules (``RemoveSnapshots`` in
Iceberg's core, the ``expire_snapshots`` procedure). Pure: reads table metadata JSON (a dict),
no I/O.

* Defaults come from the table's properties: ``history.expire.max-snapshot-age-ms`` (5 days),
  ``history.expire.min-snapshots-to-keep`` (1) and ``history.expire.max-ref-age-ms`` (never);
  `older_than_ms` and `retain_last` (the job's ``--older-than`` / ``--retain-last``) replace the
  first two, as Iceberg's ``expireOlderThan`` / ``retainLast`` do.
* A ref whose snapshot is older than its ``max-ref-age-ms`` (the ref's own, else the table's) is
  removed, except ``main``.
* Each remaining branch keeps the ancestors of its head that are among its
  ``min-snapshots-to-keep`` newest or no older than its ``max-snapshot-age-ms`` (the branch's own
  values first); a tag keeps its snapshot.
* A snapshot no remaining ref reaches stays while it is no older than the default age.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinitylake.errors import ValidationError

MAX_SNAPSHOT_AGE = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
MAX_REF_AGE = "history.expire.max-ref-age-ms"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1
NEVER = 2**63 - 1


@dataclass
class Retention:
    """What expiry keeps and removes of one table's metadata."""

    kept: set[int] = field(default_factory=set)
    expired: set[int] = field(default_factory=set)
    removed_refs: list[str] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return bool(self.expired or self.removed_refs)


def _int_prop(props: dict[str, Any], key: str, default: int) -> int:
    raw = props.get(key)
    if raw in (None, ""):
        return default
    try:
        return int(str(raw))
    except ValueError:
        raise ValidationError(f"table property {key}={raw!r} is not an integer") from None


def refs_of(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The table's refs; metadata without a ``refs`` map (format v1) has ``main`` at its current
    snapshot."""
    refs = meta.get("refs")
    if refs:
        return dict(refs)
    current = meta.get("current-snapshot-id")
    if current is None or int(current) < 0:
        return {}
    return {"main": {"snapshot-id": int(current), "type": "branch"}}


def plan_retention(
    meta: dict[str, Any], now_ms: int, older_than_ms: int | None = None, retain_last: int | None = None
) -> Retention:
    """The snapshots of `meta` that stay and go at `now_ms` (see the module doc).

    `older_than_ms` is an age (snapshots created before ``now_ms - older_than_ms`` may go);
    `retain_last` is at least 1 (the current snapshot of a branch always stays)."""
    props = meta.get("properties") or {}
    max_age = (
        older_than_ms if older_than_ms is not None else _int_prop(props, MAX_SNAPSHOT_AGE, DEFAULT_MAX_SNAPSHOT_AGE_MS)
    )
    min_keep = (
        retain_last
        if retain_last is not None
        else _int_prop(props, MIN_SNAPSHOTS_TO_KEEP, DEFAULT_MIN_SNAPSHOTS_TO_KEEP)
    )
    max_ref_age = _int_prop(props, MAX_REF_AGE, NEVER)
    default_cutoff = now_ms - max_age
    snaps = {int(s["snapshot-id"]): s for s in meta.get("snapshots") or []}

    out = Retention()
    heads: list[tuple[str, dict[str, Any]]] = []
    for name, ref in sorted(refs_of(meta).items()):
        sid = int(ref["snapshot-id"])
        snap = snaps.get(sid)
        if snap is None:
            continue  # a ref to a missing snapshot keeps nothing (PyIceberg drops it with the snapshot)
        ref_age = ref.get("max-ref-age-ms")
        limit = int(ref_age) if ref_age is not None else max_ref_age
        if name != "main" and limit != NEVER and now_ms - int(snap["timestamp-ms"]) > limit:
            out.removed_refs.append(name)
            continue
        heads.append((name, ref))

    reached: set[int] = set()  # what the remaining refs reference: a branch its ancestry, a tag its snapshot
    for _name, ref in heads:
        head = int(ref["snapshot-id"])
        if (ref.get("type") or "branch") != "branch":
            reached.add(head)
            out.kept.add(head)
            continue
        age = ref.get("max-snapshot-age-ms")
        cutoff = now_ms - int(age) if age is not None else default_cutoff
        keep_n = max(int(ref["min-snapshots-to-keep"]) if ref.get("min-snapshots-to-keep") is not None else min_keep, 1)
        keeping = True
        for n, snap in enumerate(_ancestry(snaps, head)):
            sid = int(snap["snapshot-id"])
            reached.add(sid)
            if keeping and (n < keep_n or int(snap["timestamp-ms"]) >= cutoff):
                out.kept.add(sid)
            else:
                keeping = False  # Iceberg stops at the first ancestor that may go
    for sid, snap in snaps.items():
        if sid not in reached and int(snap["timestamp-ms"]) >= default_cutoff:
            out.kept.add(sid)
    out.expired = set(snaps) - out.kept
    return out


def _ancestry(snaps: dict[int, dict[str, Any]], head: int) -> list[dict[str, Any]]:
    """`head` and its ancestors present in the metadata, newest first."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    sid: int | None = head
    while sid is not None and sid in snaps and sid not in seen:
        seen.add(sid)
        out.append(snaps[sid])
        parent = snaps[sid].get("parent-snapshot-id")
        sid = int(parent) if parent is not None else None
    return out
