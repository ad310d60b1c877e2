"""Root node files: what a version's root says about itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trinitylake.errors import VersionExpiredError
from trinitylake.format import keys
from trinitylake.format.definitions import LakehouseDef
from trinitylake.format.node import Node

if TYPE_CHECKING:
    from trinitylake.storage import Storage


@dataclass
class RootRef:
    """One version: its root node, its lakehouse definition and where both came from.

    `base` is the storage that relative pointers in this tree resolve against (the source
    lakehouse, or an export's target for ``--snapshot``).
    """

    version: int
    path: str
    node: Node
    lakehouse_def: LakehouseDef
    def_path: str
    base: Storage

    @property
    def created_at_millis(self) -> int:
        return int(self.node.system.get(keys.SYS_CREATED_AT, "0") or 0)

    @property
    def previous_root(self) -> str | None:
        return self.node.system.get(keys.SYS_PREVIOUS_ROOT)

    @property
    def rollback_from_root(self) -> str | None:
        return self.node.system.get(keys.SYS_ROLLBACK_FROM_ROOT)

    @property
    def rollback_to_root(self) -> str | None:
        return self.node.system.get(keys.SYS_ROLLBACK_TO_ROOT)

    @property
    def txn_id(self) -> str | None:
        return self.node.system.get(keys.SYS_TXN_ID)

    @property
    def txn_seq(self) -> int | None:
        v = self.node.system.get(keys.SYS_TXN_SEQ)
        return int(v) if v and v.isdigit() else None


def root_system_rows(
    *,
    created_at_millis: int,
    lakehouse_def: str,
    previous_root: str | None = None,
    rollback_from_root: str | None = None,
    rollback_to_root: str | None = None,
    txn_id: str | None = None,
    txn_seq: int | None = None,
) -> dict[str, str]:
    rows = {keys.SYS_CREATED_AT: str(created_at_millis), keys.SYS_LAKEHOUSE_DEF: lakehouse_def}
    if previous_root is not None:
        rows[keys.SYS_PREVIOUS_ROOT] = previous_root
    if rollback_from_root is not None:
        rows[keys.SYS_ROLLBACK_FROM_ROOT] = rollback_from_root
    if rollback_to_root is not None:
        rows[keys.SYS_ROLLBACK_TO_ROOT] = rollback_to_root
    if txn_id is not None:
        rows[keys.SYS_TXN_ID] = txn_id
    if txn_seq is not None:
        rows[keys.SYS_TXN_SEQ] = str(txn_seq)
    return rows


def check_retained(d: LakehouseDef, version: int, what: str) -> None:
    """Refuse to make anything reference `version` when the latest definition `d` says it is
    expired. Expire commits ``oldest_retained_version`` *before* it deletes, so a root file
    below the floor may still exist while its files are being deleted; a rollback, export pin
    or any other new reference to it would point at files that are about to disappear.

    Raises:
        VersionExpiredError: `version` is below ``d.oldest_retained_version``.
    """
    floor = int(d.oldest_retained_version)
    if version < floor:
        raise VersionExpiredError(
            f"{what}: version {version} is expired (the lakehouse retains versions {floor} and newer; "
            f"oldest_retained_version = {floor}), so it can no longer be referenced"
        )


def check_new_pins(before: LakehouseDef, after: LakehouseDef) -> None:
    """Refuse a definition change that adds or moves an export pin to an expired version.

    Called on every commit attempt with the latest definition as `before`, so a pin recorded
    while an expiration raised the floor is re-checked after the rebase.
    """
    for name, v in after.exported_snapshot_pins.items():
        if before.exported_snapshot_pins.get(name) != v:
            check_retained(after, int(v), f"export {name!r} pins version {v}")
