"""What both table jobs share: which tables they maintain, where a run keeps its plan, and
batched deletes on the job's engine (`trinitylake.spark.delete.delete_keys`: bulk batches on
the driver's threads, or on the executors when the engine places them there)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trinitylake.errors import ValidationError
from trinitylake.spark.delete import delete_keys
from trinitylake.storage import Storage
from trinitylake.tables_maintenance.files import TableFiles
from trinitylake.tables_maintenance.live import TableRef

log = logging.getLogger(__name__)

#: The jobs' names (`trinitylake.jobs.registry`; their runs' plans go to ``_maintenance/<job>/<run_id>/``).
EXPIRE_JOB = "tables_expire"
ORPHANS_JOB = "tables_orphans"
#: The command names of the audit rows (`tlake show` lists them as their own kind).
EXPIRE_COMMAND = "tables expire-snapshots"
ORPHANS_COMMAND = "tables remove-orphans"
#: Files per bulk delete request (S3's DeleteObjects limit), and retries of a failed batch.
DELETE_BATCH = 1000
DELETE_RETRIES = 5
#: The phase of the deletes in ``details["execution"]``.
DELETE_PHASE = "tables.delete"


def table_names(value: str | None) -> list[str]:
    """The jobs' ``tables`` option: comma-separated names (see `select_tables`), none for every table."""
    return [n.strip() for n in (value or "").split(",") if n.strip()]


def select_tables(tables: Sequence[TableRef], wanted: Iterable[str] | None) -> list[TableRef]:
    """The tables `wanted` names: ``NS`` (every table of the namespace) or ``NS.TABLE``; all of
    them when `wanted` is empty.

    Raises:
        ValidationError: a name matches no Iceberg table of the latest version.
    """
    names = [w.strip() for item in (wanted or ()) for w in item.split(",") if w.strip()]
    if not names:
        return list(tables)
    out: dict[str, TableRef] = {}
    for w in names:
        hit = [t for t in tables if t.name == w or (t.key[0] if t.key else t.name.split(".", 1)[0]) == w]
        if not hit:
            raise ValidationError(
                f"--tables {w!r}: no Iceberg table or namespace of that name in the latest version "
                f"(tables: {', '.join(t.name for t in tables[:10]) or 'none'})"
            )
        out.update((t.name, t) for t in hit)
    return [out[k] for k in sorted(out)]


def readable(files: TableFiles, tables: list[TableRef]) -> tuple[list[TableRef], list[str]]:
    """The tables whose current metadata file exists and reads (read now), and the names of
    those whose file is missing: a placeholder has nothing to maintain, a table whose file was
    lost is damaged (`trinitylake.tables_maintenance.damage` tells them apart).

    Raises:
        TableFileError: a metadata file exists but cannot be read or parsed (unless
            `TableFiles.tolerant`: then it is in `TableFiles.broken`, and its table left out).
    """
    files.load_metadata([t.metadata for t in tables], missing_ok=True)
    ok = [t for t in tables if t.metadata in files.metadata]
    return ok, [f"{t.name} ({t.metadata})" for t in tables if t.metadata in files.missing]


#: Iceberg's switch: a table with ``gc.enabled=false`` may share its files with another system
#: (a table registered twice, a snapshot of another table); neither job deletes its files.
GC_ENABLED = "gc.enabled"


def gc_disabled(files: TableFiles, tables: list[TableRef]) -> tuple[list[TableRef], list[str]]:
    """The tables (metadata read) whose files may be deleted, and the names of those whose
    ``gc.enabled`` property is false (Iceberg's actions refuse them too)."""
    off = {
        t.name
        for t in tables
        if str((files.metadata[t.metadata].get("properties") or {}).get(GC_ENABLED, "true")).lower() == "false"
    }
    return [t for t in tables if t.name not in off], sorted(off)


@dataclass
class DeleteOutcome:
    deleted: dict[str, str] = field(default_factory=dict)  # URI -> kind: every file of a store whose deletes all succeeded
    failed: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # a sample: (URI, error)


def delete_files(
    files: TableFiles, uris: dict[str, str], batch: int = DELETE_BATCH, max_retries: int = DELETE_RETRIES
) -> DeleteOutcome:
    """Delete `uris` (URI -> kind), store by store, in bulk requests of `batch` files, each
    retried, where the job's engine (`files.ex`) places them; a missing file counts as deleted.
    A store with a failed delete has none of its files in `DeleteOutcome.deleted` (the engine
    reports a sample of the failures, not each file): they stay pending, and a re-run deletes
    what is left."""
    out = DeleteOutcome()
    by_store: dict[str, list[tuple[str, str]]] = {}
    stores: dict[str, Storage] = {}
    for u in sorted(uris):
        st, rel = files.store(u)
        stores[st.root] = st
        by_store.setdefault(st.root, []).append((u, rel))
    for root, items in by_store.items():
        st = stores[root]
        got = delete_keys(
            files.ex,
            st,
            [rel for _, rel in items],
            len(items),
            batch_size=batch,
            max_retries=max_retries,
            what="table files",
            phase=DELETE_PHASE,
        )
        if got.failed:
            out.failed += got.failed
            out.failures.extend((st.uri(p), e) for p, e in got.failures)
        else:
            out.deleted.update((u, uris[u]) for u, _ in items)
    return out
