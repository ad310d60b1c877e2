"""Deletions that wait: table files an expiry made unreachable from the table's own metadata
but that a retained lakehouse version (or a pinned export) still reaches, and the files a run
is about to delete.

Kept in ``<lakehouse>/_maintenance/tables-state/pending.json`` (a folder the format does not
own and no run-folder pruning touches), table name -> {file URI: kind}. Each expiry run adds
its candidates *before* it commits, and removes what it deleted or found live in the table
after its deletes: so a file an expiry took out of a table's metadata is always in this file
until it is gone, whether the run was killed before its commit, between commit and delete or
mid-delete. Every run re-checks each pending file against the whole live set before deleting
it, so a stale entry (a commit that failed, a table changed since) is harmless.

One expiry run at a time per lakehouse (as the lakehouse's own expire): two concurrent runs
would each rewrite the file.
"""

from __future__ import annotations

import json

from trinitylake.runs.folder import MAINTENANCE_DIR, write_json
from trinitylake.storage import Storage

STATE_PATH = f"{MAINTENANCE_DIR}/tables-state/pending.json"


class Pending:
    """table name -> {file URI: kind}."""

    def __init__(self, tables: dict[str, dict[str, str]] | None = None):
        self.tables: dict[str, dict[str, str]] = tables or {}

    @classmethod
    def load(cls, storage: Storage) -> Pending:
        try:
            doc = json.loads(storage.read(STATE_PATH))
        except FileNotFoundError:
            return cls()
        return cls({k: dict(v) for k, v in (doc.get("tables") or {}).items()})

    def save(self, storage: Storage) -> None:
        write_json(storage, STATE_PATH, {"tables": {k: v for k, v in sorted(self.tables.items()) if v}})

    def add(self, table: str, files: dict[str, str]) -> None:
        if files:
            self.tables.setdefault(table, {}).update(files)

    def all(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for files in self.tables.values():
            out.update(files)
        return out

    def keep_only(self, keep: set[str]) -> None:
        """Forget every pending file not in `keep`."""
        self.tables = {t: {u: k for u, k in files.items() if u in keep} for t, files in self.tables.items()}
        self.tables = {t: f for t, f in self.tables.items() if f}
