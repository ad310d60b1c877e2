"""Progress with counts: phases of a real Execution and a real driver-side delete report
done/total; without a terminal each phase gives one line; the rich display shows the counts."""

from __future__ import annotations

import io

from rich.console import Console

from trinitylake import progress
from trinitylake.spark.delete import delete_keys
from trinitylake.spark.execution import Execution, Limits
from trinitylake.storage import Storage


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, str, int, int]] = []

    def started(self, p):
        self.events.append(("started", p.name, p.done, p.total))

    def advanced(self, p):
        self.events.append(("advanced", p.name, p.done, p.total))

    def ended(self, p):
        self.events.append(("ended", p.name, p.done, p.total))


def test_delete_phase_counts_every_batch(tmp_path):
    keys = []
    for i in range(10):
        (tmp_path / f"f{i}").write_text("x")
        keys.append(f"f{i}")
    rec, lines = Recorder(), []
    remove = progress.add_listener(rec)
    remove_log = progress.add_listener(progress.LogProgress(lines.append))
    try:
        ex = Execution("local", limits=Limits(threads=1))
        out = delete_keys(ex, Storage(str(tmp_path)), keys, len(keys), batch_size=3, max_retries=0, what="orphans")
    finally:
        remove()
        remove_log()
    assert out.deleted == 10 and not list(tmp_path.iterdir())
    assert rec.events[0] == ("started", "delete", 0, 10)
    assert [e[2] for e in rec.events if e[0] == "advanced"] == [3, 6, 9, 10]
    assert rec.events[-1] == ("ended", "delete", 10, 10)
    assert len(lines) == 1 and lines[0].startswith("phase delete: 10 of 10 items in ")
    assert "items/s) on the driver - delete 10 orphans" in lines[0]


def test_failed_phase_keeps_its_count_and_empty_phase_is_silent():
    lines = []
    remove = progress.add_listener(progress.LogProgress(lines.append))
    ex = Execution("local")
    try:
        with ex.phase("empty", "local", 0):
            pass
        try:
            with ex.phase("boom", "local", 5):
                progress.advance(2)
                raise RuntimeError("x")
        except RuntimeError:
            pass
    finally:
        remove()
    assert len(lines) == 1 and lines[0].startswith("phase boom: 2 of 5 items")


def test_rich_display_shows_done_of_total():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with progress.RichProgress(console, "tlake walk r1") as bars:
        bars.status("starting Spark")
        p = progress.start_phase("walk.read_nodes", "read nodes", 40, "local")
        progress.advance(40)
        progress.end_phase(p)
    assert "40/40" in buf.getvalue() and "read nodes" in buf.getvalue()
