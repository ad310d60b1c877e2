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
    assert len(lines) == 1 and lines[0].startswith("delete: delete 10 orphans: 10 of 10 items in ")
    assert lines[0].endswith("items/s) on the driver")


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
    assert len(lines) == 1 and lines[0].startswith("boom: 2 of 5 items")


def test_rich_display_shows_done_of_total():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with progress.RichProgress(console, "tlake walk r1") as bars:
        bars.status("starting Spark")
        p = progress.start_phase("walk.read_nodes", "read nodes", 40, "local")
        progress.advance(40)
        progress.end_phase(p)
    assert "40/40" in buf.getvalue() and "read nodes" in buf.getvalue()


def test_log_lines_while_a_long_phase_advances():
    """Without a terminal a long phase says where it is every `interval` seconds, not only
    when it ends (an export's copy was silent for minutes)."""
    lines: list[str] = []
    clock = [100.0]
    remove = progress.add_listener(progress.LogProgress(lines.append, interval=10))
    real = progress.time.perf_counter
    progress.time.perf_counter = lambda: clock[0]  # type: ignore[attr-defined]
    try:
        p = progress.start_phase("export.copy", "export p1: copy 100 files", 100, "local")
        progress.advance(10)
        clock[0] += 11
        progress.advance(30)  # 11 s in: one "so far" line
        clock[0] += 2
        progress.advance(10)  # 2 s later: too soon for another
        clock[0] += 10
        progress.end_phase(p)
    finally:
        progress.time.perf_counter = real  # type: ignore[attr-defined]
        remove()
    assert lines[0] == "export.copy: export p1: copy 100 files: 40 of 100 items so far (40%), 11 s, 3.6 items/s"
    assert len(lines) == 2 and lines[1].startswith("export.copy: export p1: copy 100 files: 100 of 100 items in 23.0 s")


def test_rich_display_fits_the_terminal_and_drops_empty_and_stale_rows():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=80)
    with progress.RichProgress(console, "tlake walk walk-20261126T133324Z-d667fc1a") as bars:
        bars.status("starting Spark")
        p = progress.start_phase("walk.read_nodes", "read 123456 node files at depth 3 " + "x" * 80, 123456, "local")
        progress.advance(123456)
        progress.end_phase(p)
        e = progress.start_phase("walk.size_definitions", "size 0 definition files", 0, "local")
        progress.end_phase(e)
    out = buf.getvalue()
    last = [ln for ln in out.split("\x1b[2K") if ln.strip()][-1]  # the final frame of the live display
    assert "123,456/123,456" in last or "123456/123456" in last  # the counts survive a long description
    assert "size 0 definition files" not in out  # an empty phase gets no row
    assert "starting Spark" not in last  # the status row is hidden once a phase ran
