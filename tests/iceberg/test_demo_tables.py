"""The demo's Iceberg tables (`make demo`, issue 31): written with pyarrow through the catalog,
a second snapshot on one, read back equal (the Spark part of the demo is not run here)."""

from __future__ import annotations

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
