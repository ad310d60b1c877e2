"""Control table: txn_seq allocation, audit rows (Delta via delta-rs) and `tlake show` history.

Engine-agnostic: imports neither Spark nor the CLI nor the lakehouse layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trinitylake.control.history import HistoryEntry, VersionInfo, build_history
    from trinitylake.control.reconcile import reconcile
    from trinitylake.control.records import (
        RECORD_TYPES,
        SCHEMA,
        AuditRecord,
        default_host,
        default_user,
        new_txn_id,
        utcnow,
    )
    from trinitylake.control.seq import SeqAllocator
    from trinitylake.control.table import ControlTable

#: Where each name lives. A name loads its module when first read (PEP 562): the control table's
#: module imports delta-rs and pyarrow, which a command that writes no audit row (`tlake --help`,
#: a read) never needs.
_WHERE = {
    "HistoryEntry": "history", "VersionInfo": "history", "build_history": "history", "reconcile": "reconcile",
    "RECORD_TYPES": "records", "SCHEMA": "records", "AuditRecord": "records", "default_host": "records",
    "default_user": "records", "new_txn_id": "records", "utcnow": "records", "SeqAllocator": "seq",
    "ControlTable": "table",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "RECORD_TYPES",
    "SCHEMA",
    "AuditRecord",
    "ControlTable",
    "HistoryEntry",
    "SeqAllocator",
    "VersionInfo",
    "build_history",
    "default_host",
    "default_user",
    "new_txn_id",
    "reconcile",
    "utcnow",
]
