"""`tlake report` lists the Iceberg tables of the latest version with their snapshot counts and
current snapshot, read from each table's metadata JSON; a table whose metadata cannot be read
gets a one-line error and the report still completes (issue 31)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.iceberg.conftest import SCHEMA, open_catalog, rows
from tests.report.test_report import parse
from trinitylake.cli import cli
from trinitylake.lakehouse import Lakehouse
from trinitylake.report import collect, generate_report


def build(tmp_path) -> Lakehouse:
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    cat = open_catalog(lh.uri)
    cat.create_namespace("s")
    a = cat.create_table("s.a", schema=SCHEMA)
    a.append(rows([1, 2]))
    cat.load_table("s.a").append(rows([3]))
    cat.create_table("s.b", schema=SCHEMA).append(rows([4]))
    cat.create_table("s.empty", schema=SCHEMA)  # metadata, no snapshot yet
    lh.create_table("s", "gone", metadata_location=f"file://{tmp_path}/nowhere/v1.metadata.json")
    bad = tmp_path / "bad" / "v1.metadata.json"
    bad.parent.mkdir()
    bad.write_text("{not json")
    lh.create_table("s", "broken", metadata_location=f"file://{bad}")
    lh.create_table("s", "bare")  # a table without metadata yet
    return lh


def test_report_lists_iceberg_tables_with_snapshot_counts(tmp_path):
    lh = build(tmp_path)
    cat = open_catalog(lh.uri)
    data = collect(lh)
    by = {t.name: t for t in data.iceberg_tables}
    assert sorted(by) == ["s.a", "s.b", "s.bare", "s.broken", "s.empty", "s.gone"]
    a = cat.load_table("s.a")
    assert (by["s.a"].snapshots, by["s.a"].current_snapshot_id, by["s.a"].total_records) == (
        2, a.metadata.current_snapshot_id, 3)
    assert by["s.a"].metadata_location == a.metadata_location and by["s.a"].error is None
    assert (by["s.b"].snapshots, by["s.b"].total_records) == (1, 1)
    assert (by["s.empty"].snapshots, by["s.empty"].current_snapshot_id, by["s.empty"].error) == (0, None, None)
    assert "missing" in (by["s.gone"].error or "") and by["s.gone"].snapshots is None
    assert "JSONDecodeError" in (by["s.broken"].error or "")
    assert "no metadata_location" in (by["s.bare"].error or "")
    for t in data.iceberg_tables:
        assert t.error is None or "\n" not in t.error
    assert any("3 of 6 Iceberg table(s)" in n for n in data.notes)

    out = tmp_path / "r.html"
    s = generate_report(lh, out)
    assert (s["iceberg_tables"], s["iceberg_tables_unreadable"], s["iceberg_snapshots"]) == (6, 3, 3)
    page = out.read_text()
    assert parse(page).errors == []
    sec = page[page.index('id="iceberg-tables"'):page.index('id="snapshots"')]
    assert f'<td class="num mono">{a.metadata.current_snapshot_id}</td>' in sec
    assert "<b>s.a</b></td><td class=\"num\">2</td>" in sec
    assert sec.count('class="table-error"') == 3 and "s.broken" in sec and "JSONDecodeError" in sec


def test_report_cli_never_fails_on_table_metadata(tmp_path):
    lh = build(tmp_path)
    for p in (tmp_path / "lh" / "warehouse").rglob("*.metadata.json"):
        p.write_bytes(b"\x00garbage")  # every table's metadata unreadable now
    out = tmp_path / "r.html"
    r = CliRunner().invoke(cli, ["--lakehouse", lh.uri, "report", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    # One line per reason: the three tables with garbage metadata share theirs.
    assert page.count('class="table-error"') == 4
    assert "3 tables (s.a, s.b, s.empty)" in page


def test_many_tables_whose_metadata_is_missing_make_one_line(tmp_path):
    """The demo's placeholder tables (metadata pointers that name no file): one line saying
    why, not a row per table."""
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    lh.create_namespace("p")
    txn = lh.begin()
    for i in range(40):
        txn.create_table("p", f"t{i:02d}", metadata_location=f"file:///warehouse/p/t{i:02d}/metadata/v1.metadata.json")
    txn.commit()
    out = tmp_path / "r.html"
    generate_report(lh, out)
    page = out.read_text()
    sec = page[page.index('id="iceberg-tables"'):page.index('id="snapshots"')]
    assert sec.count('class="table-error"') == 1
    assert "40 tables (p.t00, p.t01, p.t02, …)" in sec and "metadata file &lt;metadata_location&gt; is missing" in sec


def test_report_without_tables_says_so(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    data = collect(lh)
    assert data.iceberg_tables == [] and data.other_format_tables == 0
    out = tmp_path / "r.html"
    generate_report(lh, out)
    assert "No Iceberg tables at the latest version." in out.read_text()
    json.dumps(data.summary())
