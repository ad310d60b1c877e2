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

The phases (``_select``, ``_live_set``, ``_list_phase``, then the plan and the deletes) are
functions of one `trinitylake.tables_maintenance.run.TablesRun`; each listed file's verdict is
`trinitylake.tables_maintenance.orphans_rules.Sieve`'s.

The plan (``_maintenance/tables_orphans/<run_id>/plan.json``, the files to delete) is
written before any delete; a dry run stops there. Deletes are bulk batches through `Storage`,
a missing file counting as deleted, so a killed run is finished by running it again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trinitylake.errors import StorageError, UnsafeOperationError
from trinitylake.runs.folder import now_ms
from trinitylake.tables_maintenance import common, damage
from trinitylake.tables_maintenance import orphans_rules as rules
from trinitylake.tables_maintenance.live import table_live
from trinitylake.tables_maintenance.orphans_rules import MIN_AGE_MS, MISMATCH_MODES
from trinitylake.tables_maintenance.run import TablesRun

if TYPE_CHECKING:
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution
    from trinitylake.tables_maintenance.live import TableRef, VersionLive

log = logging.getLogger(__name__)

__all__ = ["MIN_AGE_MS", "MISMATCH_MODES", "OrphanOptions", "check_options", "remove_orphans"]


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
    rules.check_age_and_mode(opts.older_than_ms, opts.unsafe_min_age, opts.prefix_mismatch_mode)


def remove_orphans(
    lakehouse: Lakehouse, opts: OrphanOptions, result: JobResult, ex: Execution | None = None
) -> JobResult:
    """One run (see the module doc); fills and returns `result`. `ex` places the manifest
    reads and the deletes (driver-only without one)."""
    check_options(opts)
    run = TablesRun(lakehouse, result, opts.reference_ms if opts.reference_ms is not None else now_ms(), ex)
    cutoff_s = (run.now - opts.older_than_ms) / 1000.0
    with run.timed("live_set", since=run.started):
        sel = _select(run, opts)
        live = _live_set(run, sel)
        sel.chosen = [t for t in sel.chosen if t.name not in live.dmg.tables]
    with run.timed("list"):
        found = _list_phase(run, sel, live, rules.Sieve(rules.Equivalence(opts.equal_schemes, opts.equal_authorities),
                                                         live.files, cutoff_s, live.held), opts)
    if found.mismatches and opts.prefix_mismatch_mode == "error":
        raise UnsafeOperationError(
            f"{len(found.mismatches)} listed files have the path of a live file under another scheme or authority "
            f"(first: {found.mismatches[0]}); they may be live files named another way (iceberg #4194). Add the "
            "equivalence (--equal-scheme / --equal-authority) or choose --prefix-mismatch-mode ignore|delete"
        )
    result.details.update(
        {
            "older_than_ms": opts.older_than_ms,
            "reference_ms": run.now,
            "cutoff_s": cutoff_s,
            "tables": found.per_table,
            "lakehouse_roots": len(live.vl.roots),
            "prefix_mismatch_mode": opts.prefix_mismatch_mode,
            "tables_without_metadata": sel.unreadable[:20],
            "tables_gc_disabled": sel.no_gc[:20],
            "mismatched_first": found.mismatches[:20],
        }
    )
    damage.report(live.dmg, result)
    result.counts.update(
        {
            "tables": len(sel.chosen),
            "listed": found.listed,
            "live": len(live.files),
            "candidates": len(found.orphans),
            "mismatched": len(found.mismatches),
            "files_read": run.files.reads,
        }
    )
    run.write_plan(
        common.ORPHANS_JOB,
        {
            "run_id": result.run_id,
            "dry_run": opts.dry_run,
            "reference_ms": run.now,
            "cutoff_s": cutoff_s,
            "tables": found.per_table,
            "damaged_tables": live.dmg.to_dict(),
            "delete": sorted(found.orphans),
        },
    )
    if opts.dry_run:
        return result

    with run.timed("delete"):
        out = run.delete(dict.fromkeys(found.orphans, "orphan"), opts.delete_batch)
    result.counts["deleted"] = len(out.deleted)
    result.counts["failed"] = out.failed
    for name, row in found.per_table.items():
        row["files_deleted"] = sum(1 for u, n in found.orphans.items() if n == name and u in out.deleted)
    if out.failed:
        result.details["failures"] = [f"{u}: {e}" for u, e in out.failures[:20]]
        first = f" (first: {out.failures[0][0]}: {out.failures[0][1]})" if out.failures else ""
        raise StorageError(f"{out.failed} orphan files could not be deleted{first}; run again")
    return result


# ---- the tables ------------------------------------------------------------------------------
@dataclass
class _Selected:
    """**select**: every table of the latest version whose metadata reads (`every`: a nested
    table's files are listed under its parent's location), those to list (`chosen`), and where
    each has its files (`locations`)."""

    every: list[TableRef]
    chosen: list[TableRef]
    locations: dict[str, str]
    unreadable: list[str]
    no_gc: list[str]


def _select(run: TablesRun, opts: OrphanOptions) -> _Selected:
    files = run.files
    every, unreadable = common.readable(files, run.tables)
    chosen = [t for t in common.select_tables(run.tables, opts.tables) if t.metadata in files.metadata]
    chosen, no_gc = common.gc_disabled(files, chosen)
    locations = {
        t.name: files.canon(files.metadata[t.metadata]["location"])
        for t in every
        if files.metadata[t.metadata].get("location")
    }
    _refuse_lakehouse_inside(run, chosen, locations)
    return _Selected(every, chosen, locations, unreadable, no_gc)


def _refuse_lakehouse_inside(run: TablesRun, chosen: list[TableRef], locations: dict[str, str]) -> None:
    root = run.storage.root.rstrip("/") + "/"
    for t in chosen:
        loc = locations.get(t.name)
        if loc is not None and root.startswith(loc.rstrip("/") + "/"):
            raise UnsafeOperationError(
                f"table {t.name}: its location {loc} holds the lakehouse root {run.storage.root}; listing it "
                "would list the lakehouse's own files. Leave it out (--tables) or move the table"
            )


# ---- the live set ----------------------------------------------------------------------------
@dataclass
class _Live:
    """**live_set**: every file a table of the latest version or a retained root keeps (with
    what a damaged table's readable files share), and the damage."""

    files: dict[str, str]
    vl: VersionLive
    dmg: damage.Damage
    prefixes: list[str]

    def held(self, uri: str) -> bool:
        """Under a location a damaged table has or had."""
        return bool(self.prefixes) and bool(self.dmg.holds(uri, self.prefixes))


def _live_set(run: TablesRun, sel: _Selected) -> _Live:
    files = run.files
    live: dict[str, str] = {}
    files.prefetch([(files.metadata[t.metadata], None) for t in sel.every])
    for t in sel.every:  # every table: a nested table's files are listed under its parent's location
        live.update(table_live(files, t.metadata, files.metadata[t.metadata]))
    vl = run.version_live(run.latest)
    live.update(vl.files)
    dmg = run.assess(run.tables, vl, run.latest)
    if dmg:
        live.update(damage.salvage(files, dmg))  # what a damaged table's readable files share
    return _Live(live, vl, dmg, dmg.prefixes())


# ---- the listing -----------------------------------------------------------------------------
@dataclass
class _Found:
    orphans: dict[str, str] = field(default_factory=dict)  # URI -> its table
    mismatches: list[str] = field(default_factory=list)
    per_table: dict[str, dict[str, Any]] = field(default_factory=dict)
    listed: int = 0


def _list_phase(run: TablesRun, sel: _Selected, live: _Live, sieve: rules.Sieve, opts: OrphanOptions) -> _Found:
    """**list**: every file under each chosen table's location, judged by `sieve`."""
    out = _Found()
    for name in live.dmg.tables:  # its live set is unknown: nothing under its locations is listed
        out.per_table[name] = {"location": sel.locations.get(name), "skipped": "damaged", "files_deleted": 0}
    for t in sel.chosen:
        loc = sel.locations.get(t.name)
        if loc is None:
            continue
        # A retained version points at a metadata file under this location that is gone: what
        # it reached is held under its table's folder (a damaged table's or a placeholder's);
        # one no folder holds leaves nothing here listed as an orphan.
        lost = [m for m in live.vl.missing if m.startswith(loc.rstrip("/") + "/") and not live.held(m)]
        if lost:
            out.per_table[t.name] = {
                "location": loc,
                "skipped": f"{len(lost)} pointed-at metadata files missing, e.g. {lost[0]} ({live.vl.missing[lost[0]]})",
            }
            continue
        others = [
            o.rstrip("/") + "/" for n, o in sel.locations.items() if n != t.name and o.startswith(loc.rstrip("/") + "/")
        ]
        row: dict[str, Any] = {"location": loc, "files_listed": 0, **{f"files_{v}": 0 for v in _COUNTED}, "orphans": 0}
        st = run.storage.for_uri(loc)
        for f in st.list(""):
            uri = st.uri(f.path)
            row["files_listed"] += 1
            v = sieve.verdict(f.path, uri, f.mtime, others)
            if v == rules.MISMATCHED:
                row["files_mismatched"] += 1
                out.mismatches.append(f"{uri} (live as {sieve.live_as(uri)})")
                if opts.prefix_mismatch_mode != "delete":
                    continue
            elif v != rules.ORPHAN:
                row[f"files_{v}"] += 1
                continue
            row["orphans"] += 1
            out.orphans[uri] = t.name
        out.listed += row["files_listed"]
        out.per_table[t.name] = row
    return out


#: The verdicts a table's row counts (``files_<verdict>``), in the row's order.
_COUNTED = (rules.YOUNG, rules.LIVE, rules.HIDDEN, rules.NESTED, rules.MISMATCHED, rules.HELD)
