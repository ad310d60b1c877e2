"""What a version changed, and the clock the lakehouse stamps its records with. Shared by
`Lakehouse` (which describes versions) and `Transaction` (which checks them for conflicts):
kept apart so that neither imports the other."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class ChangeSet:
    """What one version changed: keys set (value) or deleted (None), and whether the
    lakehouse definition pointer moved."""

    version: int
    txn_id: str | None
    keys: dict[str, str | None]
    def_changed: bool


def now_ms() -> int:
    """Wall-clock epoch milliseconds (transaction begin/expiry stamps)."""
    return int(time.time() * 1000)
