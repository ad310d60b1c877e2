"""Control table: txn_seq allocation, audit rows (Delta via delta-rs) and `tlake show` history.

Engine-agnostic: imports neither Spark nor the CLI nor the lakehouse layer.
"""

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
