"""`tlake tables remove-orphans`: delete the files under each Iceberg table's location that no
live metadata reaches, as Iceberg's ``remove_orphan_files`` does, with the lakehouse's retained
versions counted as live.

* **Listed**: every file under each selected table's ``location`` (its current metadata's),
  recursively; hidden paths (a folder or file whose name starts with ``_`` or ``.``, unless it
  is a partition folder ``k=v``) are skipped, as Iceberg skips them, and so is every folder that
  is another table's location (a table nested in another's, iceberg #4265). A table whose
  location holds the lakehouse root is refused: its listing would hold the lakehouse's own files.
* **Live**: what every table of the latest version keeps (all snapshots of its current
  metadata, their statistics, the metadata file and its log) and what every retained lakehouse
  version and pinned export reaches (`trinitylake.tables_maintenance.live`).
* **Old enough**: modified before ``now - older_than``; the default and the floor is 3 days
  (Iceberg's); a shorter age needs ``unsafe_min_age`` (``--unsafe-min-age``, the flag the
  lakehouse's ``orphans`` job takes): a writer's files exist before its commit names them.
* **Scheme and authority**: both sides compare as canonical URIs (``s3a://`` and ``s3n://``
  are ``s3://``; `equal_schemes` and `equal_authorities` add more). A live file naming the same
  path through another scheme or authority is a *prefix mismatch*: by default the run stops
  (``error``), or it keeps (``ignore``) or deletes (``delete``) such files (Iceberg's
  ``prefix_mismatch_mode``).

The plan (``_maintenance/tables_orphans/<run_id>/plan.json``, the files to delete) is
written before any delete; a dry run stops there. Deletes are bulk batches through `Storage`,
a missing file counting as deleted, so a killed run is finished by running it again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trinitylake.errors import StorageError, UnsafeOperationError, ValidationError
from trinitylake.runs.folder import now_ms, run_dir, write_json
from trinitylake.storage import parse_uri
from trinitylake.tables_maintenance import common, damage
from trinitylake.tables_maintenance.files import TableFiles
from trinitylake.tables_maintenance.live import TablePointers, TableRef, table_live, version_live

if TYPE_CHECKING:
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution

log = logging.getLogger(__name__)

#: Iceberg's default and our floor for the orphan age.
MIN_AGE_MS = 3 * 24 * 3600 * 1000
MISMATCH_MODES = ("error", "ignore", "delete")


@dataclass
class OrphanOptions:
    older_than_ms: int = MIN_AGE_MS
    unsafe_min_age: bool = False
    tables: list[str] = field(default_factory=list)
    dry_run: bool = False
    prefix_mismatch_mode: str = "error"
    equal_schemes: dict[str, str] = field(default_factory=dict)  # scheme -> the scheme it equals
    equal_authorities: dict[str, str] = field(default_factory=dict)  # authority -> the one it equals
    reference_ms: int | None = None
    delete_batch: int = common.DELETE_BATCH


def check_options(opts: OrphanOptions) -> None:
    """Raises ValidationError for an age below the floor without the unsafe flag, or an unknown mode."""
    if opts.older_than_ms < MIN_AGE_MS and not opts.unsafe_min_age:
        raise ValidationError(
            f"--older-than {opts.older_than_ms} ms is below the floor of 3 days ({MIN_AGE_MS} ms): a writer's files "
            "exist before its commit names them; pass --unsafe-min-age (unsafe_min_age: true) to go below it"
        )
    if opts.older_than_ms < 0:
        raise ValidationError(f"--older-than must not be negative, got {opts.older_than_ms} ms")
    if opts.prefix_mismatch_mode not in MISMATCH_MODES:
        raise ValidationError(
            f"--prefix-mismatch-mode must be one of {', '.join(MISMATCH_MODES)}, got {opts.prefix_mismatch_mode!r}"
        )


class _Equivalence:
    """(scheme, authority, path) of a URI with the configured equivalences applied."""

    def __init__(self, schemes: dict[str, str], authorities: dict[str, str]):
        self.schemes, self.authorities = schemes, authorities

    def key(self, uri: str) -> tuple[str, str, str]:
        p = parse_uri(uri)
        return (self.schemes.get(p.scheme, p.scheme), self.authorities.get(p.authority, p.authority), p.path.strip("/"))


def _hidden(rel: str) -> bool:
    """Iceberg's hidden-path rule: a name starting with ``_`` or ``.`` (a partition folder
    ``k=v`` is not hidden)."""
    return any(part[:1] in ("_", ".") and "=" not in part for part in rel.split("/"))


def remove_orphans(
    lakehouse: Lakehouse, opts: OrphanOptions, result: JobResult, ex: Execution | None = None
) -> JobResult:
    """One run (see the module doc); fills and returns `result`. `ex` places the manifest
    reads and the deletes (driver-only without one)."""
    check_options(opts)
    now = opts.reference_ms if opts.reference_ms is not None else now_ms()
    cutoff_s = (now - opts.older_than_ms) / 1000.0
    started = time.monotonic()
    files = TableFiles(lakehouse.storage, ex=ex)
    files.tolerant = True  # a table file that cannot be read damages its table, not the run
    pointers = TablePointers(lakehouse, files)
    latest = lakehouse.latest_version()
    all_tables = common.latest_tables(lakehouse, pointers, latest)
    every, unreadable = common.readable(files, all_tables)
    chosen = [t for t in common.select_tables(all_tables, opts.tables) if t.metadata in files.metadata]
    chosen, no_gc = common.gc_disabled(files, chosen)

    locations = {
        t.name: files.canon(files.metadata[t.metadata]["location"])
        for t in every
        if files.metadata[t.metadata].get("location")
    }
    _refuse_lakehouse_inside(lakehouse, chosen, locations)

    live: dict[str, str] = {}
    files.prefetch([(files.metadata[t.metadata], None) for t in every])
    for t in every:  # every table: a nested table's files are listed under its parent's location
        live.update(table_live(files, t.metadata, files.metadata[t.metadata]))
    vl = version_live(lakehouse, files, pointers, latest)
    live.update(vl.files)
    dmg = damage.assess(lakehouse, files, pointers, all_tables, vl, latest)
    if dmg:
        live.update(damage.salvage(files, dmg))  # what a damaged table's readable files share
    held_prefixes = dmg.prefixes()
    per_table: dict[str, dict[str, Any]] = {}
    for name in dmg.tables:  # its live set is unknown: nothing under its locations is listed
        per_table[name] = {"location": locations.get(name), "skipped": "damaged", "files_deleted": 0}
    chosen = [t for t in chosen if t.name not in dmg.tables]
    result.seconds["live_set"] = round(time.monotonic() - started, 3)

    eq = _Equivalence(opts.equal_schemes, opts.equal_authorities)
    live_keys = {eq.key(u) for u in live}
    live_paths: dict[str, set[tuple[str, str]]] = {}
    for s, a, p in live_keys:
        live_paths.setdefault(p, set()).add((s, a))

    t0 = time.monotonic()
    orphans: dict[str, str] = {}
    mismatches: list[str] = []
    listed_total = 0
    for t in chosen:
        loc = locations.get(t.name)
        if loc is None:
            continue
        # A retained version points at a metadata file under this location that is gone: what
        # it reached is held under its table's folder (a damaged table's or a placeholder's);
        # one no folder holds leaves nothing here listed as an orphan.
        lost = [m for m in vl.missing if m.startswith(loc.rstrip("/") + "/") and not dmg.holds(m, held_prefixes)]
        if lost:
            per_table[t.name] = {
                "location": loc,
                "skipped": f"{len(lost)} pointed-at metadata files missing, e.g. {lost[0]} ({vl.missing[lost[0]]})",
            }
            continue
        others = [
            o.rstrip("/") + "/" for n, o in locations.items() if n != t.name and o.startswith(loc.rstrip("/") + "/")
        ]
        st = lakehouse.storage.for_uri(loc)
        row: dict[str, Any] = {
            "location": loc,
            "files_listed": 0,
            "files_young": 0,
            "files_live": 0,
            "files_hidden": 0,
            "files_nested": 0,
            "files_mismatched": 0,
            "files_held": 0,
            "orphans": 0,
        }
        for f in st.list(""):
            uri = st.uri(f.path)
            row["files_listed"] += 1
            if _hidden(f.path):
                row["files_hidden"] += 1
                continue
            if any(uri.startswith(o) for o in others):
                row["files_nested"] += 1
                continue
            k = eq.key(uri)
            if k in live_keys:
                row["files_live"] += 1
                continue
            if not (f.mtime and 0 < f.mtime < cutoff_s):
                row["files_young"] += 1
                continue
            if held_prefixes and dmg.holds(uri, held_prefixes):
                row["files_held"] += 1  # under a damaged table's (or a placeholder's) location
                continue
            if live_paths.get(k[2]):
                row["files_mismatched"] += 1
                mismatches.append(f"{uri} (live as {', '.join(f'{s}://{a}' for s, a in sorted(live_paths[k[2]]))})")
                if opts.prefix_mismatch_mode != "delete":
                    continue
            row["orphans"] += 1
            orphans[uri] = t.name
        listed_total += row["files_listed"]
        per_table[t.name] = row
    result.seconds["list"] = round(time.monotonic() - t0, 3)
    if mismatches and opts.prefix_mismatch_mode == "error":
        raise UnsafeOperationError(
            f"{len(mismatches)} listed files have the path of a live file under another scheme or authority "
            f"(first: {mismatches[0]}); they may be live files named another way (iceberg #4194). Add the "
            "equivalence (--equal-scheme / --equal-authority) or choose --prefix-mismatch-mode ignore|delete"
        )

    result.details.update(
        {
            "older_than_ms": opts.older_than_ms,
            "reference_ms": now,
            "cutoff_s": cutoff_s,
            "tables": per_table,
            "lakehouse_roots": len(vl.roots),
            "prefix_mismatch_mode": opts.prefix_mismatch_mode,
            "tables_without_metadata": unreadable[:20],
            "tables_gc_disabled": no_gc[:20],
            "mismatched_first": mismatches[:20],
        }
    )
    damage.report(dmg, result)
    result.counts.update(
        {
            "tables": len(chosen),
            "listed": listed_total,
            "live": len(live),
            "candidates": len(orphans),
            "mismatched": len(mismatches),
            "files_read": files.reads,
        }
    )
    result.plan_location = write_json(
        lakehouse.storage,
        f"{run_dir(common.ORPHANS_JOB, result.run_id)}/plan.json",
        {
            "run_id": result.run_id,
            "dry_run": opts.dry_run,
            "reference_ms": now,
            "cutoff_s": cutoff_s,
            "tables": per_table,
            "damaged_tables": dmg.to_dict(),
            "delete": sorted(orphans),
        },
    )
    if opts.dry_run:
        return result

    t0 = time.monotonic()
    out = common.delete_files(files, dict.fromkeys(orphans, "orphan"), opts.delete_batch)
    result.seconds["delete"] = round(time.monotonic() - t0, 3)
    result.counts["deleted"] = len(out.deleted)
    result.counts["failed"] = out.failed
    for name, row in per_table.items():
        row["files_deleted"] = sum(1 for u, n in orphans.items() if n == name and u in out.deleted)
    if out.failed:
        result.details["failures"] = [f"{u}: {e}" for u, e in out.failures[:20]]
        first = f" (first: {out.failures[0][0]}: {out.failures[0][1]})" if out.failures else ""
        raise StorageError(f"{out.failed} orphan files could not be deleted{first}; run again")
    return result


def _refuse_lakehouse_inside(lakehouse: Lakehouse, chosen: list[TableRef], locations: dict[str, str]) -> None:
    root = lakehouse.storage.root.rstrip("/") + "/"
    for t in chosen:
        loc = locations.get(t.name)
        if loc is not None and root.startswith(loc.rstrip("/") + "/"):
            raise UnsafeOperationError(
                f"table {t.name}: its location {loc} holds the lakehouse root {lakehouse.storage.root}; listing it "
                "would list the lakehouse's own files. Leave it out (--tables) or move the table"
            )
