"""Which of an expiry's candidate files go, and what its plan says per table. Pure Python, no
storage: the phases of `trinitylake.tables_maintenance.expire` read and commit, these rules decide.

A candidate (a file a removed snapshot reached and no kept one does, or a file pending from an
earlier run) is, against the live set read after the commits:

1. **held** when no current table reaches it and its table is damaged, or it lies under a
   location a damaged table has or had (`Damage.holds`): that table's live set is unknown;
2. **deferred** when a retained lakehouse version (or a pinned export) still reaches it and no
   current table does: the first run after that version expires deletes it;
3. **deleted** when neither a current table nor a retained version reaches it.

A file some current table reaches is none of these: it stays, and leaves the pending file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trinitylake.tables_maintenance.common import DELETE_BATCH
from trinitylake.tables_maintenance.retention import Retention

if TYPE_CHECKING:
    from trinitylake.tables_maintenance.damage import Damage


@dataclass
class ExpireOptions:
    """Options of one run (the CLI's flags)."""

    older_than_ms: int | None = None  # None: each table's history.expire.max-snapshot-age-ms
    retain_last: int | None = None  # None: each table's history.expire.min-snapshots-to-keep
    tables: list[str] = field(default_factory=list)
    dry_run: bool = False
    batch_size: int = 100
    max_attempts: int = 20
    reference_ms: int | None = None  # "now" of the age rules (default: when the run starts)
    catalog_properties: dict[str, str] = field(default_factory=dict)
    delete_batch: int = DELETE_BATCH


@dataclass
class TablePlan:
    """What the run decided for one table."""

    name: str
    metadata: str  # the metadata location the plan was made on
    retention: Retention
    new_metadata: str | None = None
    candidates: dict[str, str] = field(default_factory=dict)
    version: int | None = None
    attempts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "metadata": self.metadata,
            "new_metadata": self.new_metadata,
            "snapshots_expired": len(self.retention.expired),
            "snapshots_kept": len(self.retention.kept),
            "expired_snapshot_ids": sorted(self.retention.expired),
            "refs_removed": self.retention.removed_refs,
            "version": self.version,
            "attempts": self.attempts,
        }


@dataclass
class Split:
    """The candidates sorted by the rules of the module doc (each URI -> kind)."""

    to_delete: dict[str, str]
    deferred: dict[str, str]
    held: dict[str, str]
    #: URI -> the table it is pending for or a plan made it a candidate of (a plan wins).
    owner: dict[str, str]
    #: URI -> the table it is pending for (the pending file's own owner).
    pending_owner: dict[str, str]

    def still_pending(self, deleted: set[str]) -> set[str]:
        """What stays in the pending file after the deletes: deferred, held, and not deleted."""
        return set(self.deferred) | set(self.held) | (set(self.to_delete) - deleted)


def candidates(
    plans: Mapping[str, TablePlan], pending: Mapping[str, Mapping[str, str]]
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Every candidate of a run: URI -> kind (a plan's kind wins over the pending file's), URI
    -> its owner (a plan wins), and URI -> the table it is pending for."""
    kinds: dict[str, str] = {}
    pending_owner: dict[str, str] = {}
    for t, fs in pending.items():
        kinds.update(fs)
        pending_owner.update(dict.fromkeys(fs, t))
    owner = dict(pending_owner)
    for p in plans.values():
        kinds.update(p.candidates)
        owner.update(dict.fromkeys(p.candidates, p.name))
    return kinds, owner, pending_owner


def split_candidates(
    plans: Mapping[str, TablePlan],
    pending: Mapping[str, Mapping[str, str]],
    live_tables: set[str] | Mapping[str, str],
    live_versions: set[str] | Mapping[str, str],
    dmg: Damage,
) -> Split:
    """Sort every candidate, the pending ones (`pending`: table -> {URI: kind}) and those of
    `plans`, by the rules of the module doc."""
    kinds, owner, pending_owner = candidates(plans, pending)
    prefixes = dmg.prefixes()
    held = {
        u: k
        for u, k in kinds.items()
        if u not in live_tables and (pending_owner.get(u) in dmg.tables or (prefixes and dmg.holds(u, prefixes)))
    }
    to_delete = {u: k for u, k in kinds.items() if u not in live_tables and u not in live_versions and u not in held}
    deferred = {u: k for u, k in kinds.items() if u in live_versions and u not in live_tables and u not in held}
    return Split(to_delete, deferred, held, owner, pending_owner)


def kind_counts(files: Mapping[str, str]) -> dict[str, int]:
    """How many files of each kind."""
    out: dict[str, int] = {}
    for kind in files.values():
        out[kind] = out.get(kind, 0) + 1
    return out


def per_table(
    plans: Mapping[str, TablePlan], pending: Mapping[str, Mapping[str, str]], split: Split, damaged: set[str] | Mapping[str, Any]
) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """The plan's row of each table (its plan's ``snapshots_expired``, ``version``, ...;
    ``files_to_delete`` and by kind, ``files_deferred``, ``files_held``; a damaged table's
    ``skipped`` or ``damaged``), and the files to delete of each table."""
    by_table: dict[str, list[str]] = {}
    for u, t in split.owner.items():
        by_table.setdefault(t, []).append(u)
    # A held file counts for the table it is pending for and for every plan that made it a
    # candidate (tables may share files), once each: one pass over the held files.
    planned_by: dict[str, list[str]] = {}
    for planned in plans.values():
        for u in planned.candidates:
            planned_by.setdefault(u, []).append(planned.name)
    held_by: Counter[str] = Counter()
    for u in split.held:
        held_by.update({*planned_by.get(u, ()), *((split.pending_owner[u],) if u in split.pending_owner else ())})
    out: dict[str, dict[str, Any]] = {}
    owned: dict[str, list[str]] = {}
    for name in sorted(set(plans) | set(pending)):
        p = plans.get(name)
        row: dict[str, Any] = p.to_dict() if p is not None else {"snapshots_expired": 0, "version": None}
        mine = by_table.get(name, [])
        dels = [u for u in mine if u in split.to_delete]
        row["files_to_delete"] = len(dels)
        row["files_to_delete_by_kind"] = kind_counts({u: split.to_delete[u] for u in dels})
        row["files_deferred"] = sum(1 for u in mine if u in split.deferred)
        row["files_held"] = held_by[name]
        owned[name] = dels
        out[name] = row
    for name in damaged:
        row = out.setdefault(name, {"snapshots_expired": 0, "version": None})
        plan = plans.get(name)
        if plan is not None and plan.new_metadata:
            # Damaged only in what a retained version points at (found after the commits, by the
            # live set's read): its expiry committed, but none of its files is deleted.
            row["damaged"] = "found after its expiry committed: its files are held"
        else:
            row["skipped"] = "damaged"
    return out, owned
