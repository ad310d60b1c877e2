"""Retention of the jobs' own bookkeeping: ``<lakehouse>/_maintenance/<job>/<run_id>/``.

Every walk, expire and orphans run leaves a folder there (plan, candidate listing, result,
walk output). Nothing in the format reads them after the run, so without pruning they only
grow. :func:`prune_runs` removes the folders of old runs of one job, at the end of a run of
that job, keeping:

* the newest ``keep_runs`` runs and every run younger than ``max_age_ms`` (a run goes only
  when it is both beyond the newest N and older than the age);
* always, whatever the policy: the current run; every unfinished run (in progress, or
  stopped by a crash) newer than the newest successful run, since its plan is what an
  operator or a resume needs to see what it had decided; and the newest failed run.

A run's state comes from the control table when the caller knows it (``states``: run id ->
``succeeded``/``failed``/``running``), else from the folder: a ``result.json`` or ``_SUCCESS``
means it finished, anything else counts as unfinished (kept). A run's time is the newest
modification time of its files. A failure to delete is reported, never raised: pruning must
not turn a successful job into a failed one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trinitylake.runs.folder import MAINTENANCE_DIR
from trinitylake.storage import Storage

if TYPE_CHECKING:
    from trinitylake.control import AuditRecord

log = logging.getLogger("trinitylake.maintenance")

DEFAULT_KEEP_RUNS = 20
DEFAULT_MAX_AGE_MS = 30 * 24 * 3600 * 1000

_FINISHED_MARKERS = ("result.json", "_SUCCESS")


@dataclass
class RunFolder:
    run_id: str
    path: str  # relative to the lakehouse root
    files: list[str]
    mtime_ms: int
    state: str  # succeeded | failed | running (unfinished)


@dataclass
class PruneOutcome:
    kept: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)  # kept whatever the policy says
    files_deleted: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"kept": len(self.kept), "pruned": sorted(self.pruned), "protected": sorted(self.protected),
                "files_deleted": self.files_deleted, "failures": [list(f) for f in self.failures[:10]]}


def run_states(records: Iterable[AuditRecord], job: str) -> dict[str, str]:
    """run id -> ``succeeded``/``failed``/``running`` of `job`'s runs, from control-table rows
    (`trinitylake.control.AuditRecord`: a job run's ``txn_id`` is its run id)."""
    final: dict[str, str] = {}
    for r in records:
        if r.command != job:
            continue
        if r.record_type == "begin":
            final.setdefault(r.txn_id, "running")
        elif r.record_type == "failed":
            final[r.txn_id] = "failed"
        elif r.record_type in ("read", "completed", "committed"):
            if final.get(r.txn_id) != "failed":
                final[r.txn_id] = "succeeded"
    return final


def list_runs(storage: Storage, job: str, states: Mapping[str, str] | None = None) -> list[RunFolder]:
    """The run folders of `job`, oldest first."""
    dirs, _files = storage.list_dirs(f"{MAINTENANCE_DIR}/{job}")
    runs = []
    for d in dirs:
        run_id = d.rsplit("/", 1)[-1]
        infos = list(storage.list(d))
        names = {f.path.rsplit("/", 1)[-1] for f in infos if f.path.count("/") == d.count("/") + 1}
        state = (states or {}).get(run_id)
        if state is None:
            state = "succeeded" if names.intersection(_FINISHED_MARKERS) else "running"
        mtime = max((f.mtime for f in infos), default=0.0)
        runs.append(RunFolder(run_id, d, [f.path for f in infos], int(mtime * 1000), state))
    runs.sort(key=lambda r: (r.mtime_ms, r.run_id))
    return runs


def choose(runs: list[RunFolder], *, current_run_id: str | None, keep_runs: int, max_age_ms: int,
           now_ms: int) -> tuple[list[RunFolder], set[str]]:
    """(runs to prune, protected run ids) by the rules of the module docstring; pure."""
    last_success = max((r.mtime_ms for r in runs if r.state == "succeeded"), default=-1)
    failed = [r for r in runs if r.state == "failed"]
    protected = {r.run_id for r in runs if r.state not in ("succeeded", "failed") and r.mtime_ms >= last_success}
    if failed:
        protected.add(failed[-1].run_id)
    if current_run_id is not None:
        protected.add(current_run_id)
    newest = {r.run_id for r in runs[-keep_runs:]} if keep_runs > 0 else set()
    prune = [r for r in runs
             if r.run_id not in protected and r.run_id not in newest and now_ms - r.mtime_ms > max_age_ms]
    return prune, protected


def prune_runs(storage: Storage, job: str, *, current_run_id: str | None, keep_runs: int = DEFAULT_KEEP_RUNS,
               max_age_ms: int = DEFAULT_MAX_AGE_MS, now_ms: int,
               states: Mapping[str, str] | Callable[[], Mapping[str, str]] | None = None) -> PruneOutcome:
    """Remove the folders of `job`'s old runs (see the module docstring); returns what it did.

    `states` may be a function: it is called only when there are more run folders than
    `keep_runs` (reading the control table is then worth it; usually there is nothing to prune)."""
    if callable(states):
        dirs, _files = storage.list_dirs(f"{MAINTENANCE_DIR}/{job}")
        if len(dirs) <= keep_runs:
            return PruneOutcome(kept=[d.rsplit("/", 1)[-1] for d in dirs])
        states = states()
    runs = list_runs(storage, job, states)
    prune, protected = choose(runs, current_run_id=current_run_id, keep_runs=keep_runs, max_age_ms=max_age_ms,
                              now_ms=now_ms)
    out = PruneOutcome(protected=sorted(protected & {r.run_id for r in runs}))
    gone = {r.run_id for r in prune}
    out.kept = [r.run_id for r in runs if r.run_id not in gone]
    for r in prune:
        failures = storage.delete(r.files)
        out.failures.extend(failures)
        out.files_deleted += len(r.files) - len(failures)
        if not failures:
            out.pruned.append(r.run_id)
            _remove_empty_dirs(storage, r)
    if out.pruned or out.failures:
        log.info("%s bookkeeping: pruned %d run folders (%d files), kept %d, %d files could not be deleted",
                 job, len(out.pruned), out.files_deleted, len(out.kept), len(out.failures))
    return out


def _remove_empty_dirs(storage: Storage, run: RunFolder) -> None:
    """Local filesystems keep empty directories after their files are deleted (object stores
    have none): remove the run's now-empty directories, deepest first, so that it no longer
    lists as a run. rmdir refuses a directory that is not empty, so a file that appeared
    meanwhile stays."""
    dirs = {run.path}
    for f in run.files:
        parent = f.rsplit("/", 1)[0]
        while parent.startswith(run.path + "/"):
            dirs.add(parent)
            parent = parent.rsplit("/", 1)[0]
    storage.remove_empty_dirs(dirs)
