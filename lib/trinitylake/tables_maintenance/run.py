"""What every phase of a table job reads: `TablesRun`.

The lakehouse is read once, at the top of a run: its latest version and the Iceberg tables that
version names. The phases then take the run, never the lakehouse and its parts one by one, so
that what a run has read (the table files, the definitions, the roots) lives in one place, as
the lakehouse's own jobs keep theirs in one ``_Job`` (`trinitylake.jobs.expire.job`). The only
second read is `TablesRun.reread_latest`: the live set of an expiry is read after its commits,
which made versions of their own, and anyone else's commits may have landed meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trinitylake.runs.folder import run_dir, write_json
from trinitylake.tables_maintenance import common, damage
from trinitylake.tables_maintenance.files import TableFiles
from trinitylake.tables_maintenance.live import TablePointers, TableRef, VersionLive, version_live

if TYPE_CHECKING:
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution
    from trinitylake.storage import Storage


@dataclass
class TablesRun:
    """One run of a table job: its lakehouse, result and clock (`now`, ms: the age rules'
    "now"), the table files it reads (`files`, tolerant: a file that cannot be read damages its
    table, not the run), the tables roots name (`pointers`), and the latest version with its
    Iceberg tables by name (`latest`, `tables`), read when the run is made. `ex` places the
    manifest reads and the deletes (driver-only without one)."""

    lakehouse: Lakehouse
    result: JobResult
    now: int
    ex: Execution | None = None
    files: TableFiles = field(init=False)
    pointers: TablePointers = field(init=False)
    latest: int = field(init=False)
    tables: list[TableRef] = field(init=False)
    started: float = field(init=False, default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.files = TableFiles(self.lakehouse.storage, ex=self.ex)
        self.files.tolerant = True
        self.pointers = TablePointers(self.lakehouse, self.files)
        self.latest = self.lakehouse.latest_version()
        self.tables = self._tables_of(self.latest)

    @property
    def storage(self) -> Storage:
        """The lakehouse's storage: the run's plan and the pending file go there."""
        return self.lakehouse.storage

    def _tables_of(self, version: int) -> list[TableRef]:
        return sorted(self.pointers.tables(self.lakehouse.load_root(version)), key=lambda t: t.name)

    def reread_latest(self) -> tuple[int, list[TableRef]]:
        """The latest version and its tables, read again (see the module doc)."""
        latest = self.lakehouse.latest_version()
        return latest, self._tables_of(latest)

    def version_live(self, latest: int, contents: bool = True) -> VersionLive:
        """What every retained lakehouse root keeps (`trinitylake.tables_maintenance.live.version_live`)."""
        return version_live(self.lakehouse, self.files, self.pointers, latest, contents)

    def assess(self, current: list[TableRef], vl: VersionLive, latest: int) -> damage.Damage:
        """The damaged tables among everything the run read (`trinitylake.tables_maintenance.damage.assess`)."""
        return damage.assess(self.lakehouse, self.files, self.pointers, current, vl, latest)

    @contextmanager
    def timed(self, phase: str, since: float | None = None) -> Iterator[None]:
        """Records the phase's seconds in the result (from `since` when given)."""
        t0 = time.monotonic() if since is None else since
        try:
            yield
        finally:
            self.result.seconds[phase] = round(time.monotonic() - t0, 3)

    def write_plan(self, job: str, doc: dict[str, Any]) -> None:
        """The run's ``plan.json`` (``_maintenance/<job>/<run_id>/``), written before any delete."""
        self.result.plan_location = write_json(self.storage, f"{run_dir(job, self.result.run_id)}/plan.json", doc)

    def delete(self, uris: dict[str, str], batch: int) -> common.DeleteOutcome:
        """Delete `uris` (URI -> kind) in bulk batches where the run's engine places them."""
        return common.delete_files(self.files, uris, batch)
