"""The demo's Iceberg tables (`make demo`, issue 31): written with pyarrow through the catalog,
a second snapshot on one, read back equal (the Spark part of the demo is not run here)."""

from __future__ import annotations

import pytest

from trinitylake import demo
from trinitylake.lakehouse import Lakehouse


def test_demo_writes_and_reads_back_its_iceberg_tables(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    rows = demo.add_iceberg_tables(lh.uri)
    assert rows == {"shop.customers": 40, "shop.orders": 250, "shop.lines": 600}
    assert demo.show_iceberg_tables(lh.uri, rows, "t") == 0
    cat = demo.iceberg_catalog(lh.uri)
    assert len(cat.load_table("shop.orders").metadata.snapshots) == 2
    assert cat.load_table("shop.lines").metadata_location.startswith(lh.uri + "/warehouse/")
    assert demo.show_iceberg_tables(lh.uri, {**rows, "shop.lines": 1}, "t") == 1  # a mismatch is a failure


@pytest.mark.spark  # the demo's distributed walk starts Spark (in the command's own process)
def test_every_command_the_demo_prints_runs(tmp_path):
    # `make demo` runs its jobs in process and heads each with the `tlake` command that does the
    # same (issue 54: it printed `tlake tables_expire`, which does not exist, and `--target
    # --with-tables` without the target). Each printed command runs here as printed, in the
    # demo's order, on a small demo lakehouse; then its `tlake show` and the commands it
    # suggests at its end.
    import shlex
    import subprocess
    import sys
    import time
    from pathlib import Path

    tlake = str(Path(sys.executable).with_name("tlake"))
    lh_dir, export_dir = str(tmp_path / "lakehouse"), str(tmp_path / "export-full")
    demo.build(lh_dir, tables=12)
    demo.add_iceberg_tables(lh_dir)
    demo.plant_orphans(Path(lh_dir), young=False)
    time.sleep((demo.DEMO_TTL_MS + 3000) / 1000)  # as the demo waits: versions old enough to expire
    printed = [demo.command_line(job, args) for job, args in demo.demo_jobs(lh_dir, export_dir, "local[2]")]
    assert [p.split()[3:5] for p in printed][5:7] == [["tables", "expire-snapshots"], ["tables", "remove-orphans"]]
    assert shlex.split(printed[-1])[-3:] == ["--target", export_dir, "--with-tables"]
    shown = shlex.join(["tlake", *demo.show_args(lh_dir)])
    for line in [*printed, shown, *demo.follow_ups(lh_dir, export_dir)]:
        argv = shlex.split(line)
        assert argv[0] == "tlake", line
        p = subprocess.run([tlake, *argv[1:]], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"{line}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        assert "Traceback" not in p.stderr, line
    assert (Path(export_dir) / "warehouse").is_dir()  # the export carried the tables
