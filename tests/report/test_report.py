"""`tlake report`: the page is valid, self-contained HTML with the numbers it promises."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner

from tests.format.oracle import root_name
from tests.oracle import expect as E
from tests.report.conftest import EVIL
from trinitylake.cli import cli
from trinitylake.report import collect, generate_report
from trinitylake.report.svg import TimeScale, byte_ticks, fmt_bytes, nice_ticks, time_ticks

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class StrictParser(HTMLParser):
    """html.parser plus the checks it does not do: every element closed, properly nested."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, tuple[int, int]]] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.doctype = False
        self.text: list[str] = []

    def handle_decl(self, decl):
        self.doctype = self.doctype or decl.lower() == "doctype html"

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack:
            self.errors.append(f"</{tag}> at {self.getpos()} closes nothing")
            return
        top, pos = self.stack.pop()
        if top != tag:
            self.errors.append(f"</{tag}> at {self.getpos()} closes <{top}> opened at {pos}")

    def handle_data(self, data):
        self.text.append(data)

    def close(self):
        super().close()
        if self.stack:
            self.errors.append(f"unclosed: {self.stack}")


def parse(page: str) -> StrictParser:
    p = StrictParser()
    p.feed(page)
    p.close()
    return p


def _files_of(lh, version: int) -> tuple[set[str], set[str]]:
    """The oracle's walk of a version (`tests.oracle.expect`, sharing no code with the library):
    its node files (root included) and its definition files (the lakehouse definition included)."""
    o = E.oracle_of(lh)
    w = E.walk(o, [(version, f"{o.root}/{root_name(version)}")], sizes=False, tolerate_missing=False)
    return w.paths("root") | w.paths("node"), w.paths("definition") | w.paths("lakehouse_def")


@pytest.fixture(scope="module")
def page(built, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "report.html"
    res = CliRunner().invoke(cli, ["--lakehouse", built.uri, "report", "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert str(out) in res.output
    return out.read_text(encoding="utf-8")


def test_page_is_valid_self_contained_html(page, built):
    p = parse(page)
    assert p.errors == []
    assert p.doctype
    names = [t for t, _ in p.tags]
    assert names.count("svg") >= 4  # timeline, durations, counts, files, bytes
    assert "script" not in names and "link" not in names and "img" not in names and "iframe" not in names
    for _tag, attrs in p.tags:
        for a in ("src", "href", "xlink:href"):
            assert a not in attrs, attrs
    assert "http" not in page.lower()
    assert "url(" not in page and "@import" not in page
    assert built.uri in page


def test_header_numbers(page, built):
    lh = built.lh
    text = " ".join(parse(page).text)
    assert f"v{lh.oldest_version()} … v{lh.latest_version()}" in text
    assert "oldest retained" in text.lower()
    d = lh.definition()
    assert d.oldest_retained_version == 2
    assert "nightly" in text and d.exported_snapshots["nightly"] in text


def test_every_version_is_in_the_chart_data(page, built):
    lh = built.lh
    timeline = page[page.index('id="timeline"'):page.index('id="jobs"')]
    charted = {int(v) for v in re.findall(r'data-version="(\d+)"', timeline)}
    available = {r["version"] for r in lh.versions()}
    assert available <= charted
    assert {0, 1} <= charted  # expired versions, known from the control table
    assert re.search(r'data-version="0" data-kind="expired"', timeline)
    for v in available:
        assert f"<title>v{v} · " in timeline
    reach = page[page.index('id="reach"'):page.index('id="versions"')]
    assert {int(v) for v in re.findall(r'data-version="(\d+)"', reach)} == available


def test_rollback_expire_and_export_marks(page, built):
    timeline = page[page.index('id="timeline"'):page.index('id="jobs"')]
    assert f'data-version="{built.rollback_version}" data-kind="rollback"' in timeline
    assert f"↺ v{built.rollback_to}" in timeline
    assert f"rollback to v{built.rollback_to} (from v{built.rollback_version - 1})" in timeline
    assert 'data-kind="expire"' in timeline and 'data-kind="export"' in timeline
    assert f"expire #{built.expire_seq}" in timeline and f"export #{built.export_seq}" in timeline
    assert f'data-snapshot-version="{built.rollback_version}"' in timeline
    assert "expired: below oldest retained version 2" in timeline
    legend = timeline[timeline.index('class="legend"'):]
    for label in ("rollback", "expire run", "export run", "expired version", "exported snapshot"):
        assert label in legend


def test_job_runs_and_metrics(page, built):
    jobs = page[page.index('id="jobs"'):page.index('id="reach"')]
    assert jobs.count('<tr data-job="export"') == 2 and jobs.count('<tr data-job="expire"') == 1
    for s in ("files_deleted <b>17</b>", "bytes_deleted <b>51.1 KiB</b>", "files_copied <b>42</b>",
              "bytes_copied <b>1.2 MiB</b>", "seconds_walk <b>3.2 s</b>", "files_copied <b>3</b>"):
        assert s in jobs, s
    assert ">failed<" in jobs and ">committed<" in jobs and ">deleted<" in jobs  # export, expire (17 files)
    assert '<tr data-job="expire" data-state="deleted">' in jobs
    assert jobs.count('<details class="metrics">') == 3  # every run's metrics collapsed
    assert ">41 s<" in jobs and ">12 s<" in jobs  # durations from started/ended
    assert f">{built.expire_seq}<" in jobs and f">{built.failed_seq}<" in jobs
    assert "job run durations" in jobs and "files deleted and copied per job run" in jobs


def test_user_strings_are_escaped(page):
    assert EVIL not in page
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "bad snapshot name &lt;script&gt;" in page
    assert all(t != "script" for t, _ in parse(page).tags)


def test_reach_matches_an_independent_walk(built):
    lh = built.lh
    data = collect(lh)
    assert not data.reach_capped and [r.version for r in data.reach] == [r["version"] for r in lh.versions()]
    base = lh.uri[len("file://"):]
    prev: set[str] = set()
    for r in data.reach:
        nodes, defs = _files_of(lh, r.version)
        assert (r.node_files, r.def_files, r.missing) == (len(nodes), len(defs), 0)
        assert r.node_bytes == sum(os.path.getsize(os.path.join(base, p)) for p in nodes)
        assert r.def_bytes == sum(os.path.getsize(os.path.join(base, p)) for p in defs)
        here = nodes | defs
        assert r.new_files == (len(here - prev) if prev else len(here))
        prev = here
    last = data.reach[-1]
    assert last.def_files >= data.namespaces + data.tables + 1
    assert (data.namespaces, data.tables) == (3, 11)


def test_shared_nodes_are_read_once(built):
    from trinitylake.lakehouse import Lakehouse

    lh = Lakehouse.open(built.uri)  # cold caches
    data = collect(lh)
    distinct = set()
    for r in data.reach:
        nodes, _ = _files_of(lh, r.version)
        distinct |= nodes - {root_name(r.version)}
    assert data.node_reads == len(distinct)
    assert data.node_reads < sum(r.node_files - 1 for r in data.reach)  # sharing happened


def test_max_versions_caps_the_walk_and_says_so(built, tmp_path):
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["--lakehouse", built.uri, "report", "--out", str(out), "--max-versions", "3", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    assert s["reach_capped"] is True and s["reach_versions"] == 3
    page = out.read_text()
    assert parse(page).errors == []
    latest = built.lh.latest_version()
    assert f"the newest 3 of {s['available_versions']} available versions" in page
    reach = page[page.index('id="reach"'):page.index('id="versions"')]
    assert {int(v) for v in re.findall(r'data-version="(\d+)"', reach)} == {latest - 2, latest - 1, latest}


def test_generate_report_returns_summary(built, tmp_path):
    out = tmp_path / "sub" / "demo.html"
    s = generate_report(built.lh, out, max_versions=200)
    assert out.exists() and s["path"] == str(out)
    lh = built.lh
    assert s["latest_version"] == lh.latest_version()
    assert s["oldest_version"] == 2 and s["oldest_retained_version"] == 2
    assert s["job_runs"] == 3 and s["failed_job_runs"] == 1 and s["rollbacks"] == 1
    assert s["exported_snapshots"] == 1 and s["expired_versions_known"] == 2
    assert s["files_latest"] > 0 and s["bytes_latest"] > 0 and s["html_bytes"] == len(out.read_bytes())


def test_report_without_control_table(tmp_path):
    from trinitylake.lakehouse import Lakehouse

    lh = Lakehouse.create(str(tmp_path / "plain"), order=4, node_max_bytes=4096, audit=False)
    lh.create_namespace("a")
    lh.create_table("a", "t")
    out = tmp_path / "plain.html"
    res = CliRunner().invoke(cli, ["--lakehouse", lh.uri, "--no-audit", "report", "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert parse(page).errors == []
    assert "Auditing is off" in page and "No job runs recorded" in page
    for v in (0, 1, 2):
        assert f'data-version="{v}"' in page

    lh2 = Lakehouse.open(lh.uri)  # audit on, but there is no control table
    s = generate_report(lh2, tmp_path / "plain2.html")
    assert s["audit"] == "missing" and s["job_runs"] == 0 and s["latest_version"] == 2
    assert "No control table at" in (tmp_path / "plain2.html").read_text()
    assert not os.path.exists(os.path.join(str(tmp_path / "plain"), "_control"))  # the report wrote nothing


def test_report_needs_a_lakehouse(tmp_path):
    res = CliRunner().invoke(cli, ["--lakehouse", str(tmp_path / "nothing"), "report", "--out", str(tmp_path / "x.html")])
    assert res.exit_code == 1
    assert not (tmp_path / "x.html").exists()


# ---- chart helpers -------------------------------------------------------------------------
def test_nice_and_byte_ticks():
    assert nice_ticks(0, 18, 6, integer=True) == [0, 5, 10, 15]
    assert nice_ticks(3, 3, integer=True) == [3, 4]
    assert nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert [label for _, label in byte_ticks(11_000, 5)] == ["0 KiB", "2.5 KiB", "5 KiB", "7.5 KiB", "10 KiB"]
    assert fmt_bytes(1_234_567) == "1.2 MiB" and fmt_bytes(12) == "12 B"


def test_time_ticks_and_gap_cutting():
    t0 = 1_700_000_000_000
    ticks, caption = time_ticks(t0, t0 + 3_600_000, n=6)
    assert caption == "time (UTC), 2023-11-14" and all(":" in label for _, label in ticks) and len(ticks) <= 7
    burst = [t0 + i * 100 for i in range(20)]
    times = burst + [t0 + 86_400_000, t0 + 2 * 86_400_000]
    sc = TimeScale(times, 0, 900)
    assert len(sc.gaps) == 2 and len(sc.segments) == 3
    xs = [sc(t) for t in times]
    assert xs == sorted(xs) and 0 <= xs[0] and xs[-1] <= 900
    assert xs[19] - xs[0] > 300  # the burst gets most of the width instead of a few pixels
    even = TimeScale([t0 + i * 60_000 for i in range(10)], 0, 900)
    assert even.gaps == []


def test_single_version_lakehouse(tmp_path):
    from trinitylake.lakehouse import Lakehouse

    lh = Lakehouse.create(str(tmp_path / "one"))
    out = tmp_path / "one.html"
    s = generate_report(lh, out)
    page = out.read_text()
    assert parse(page).errors == []
    assert s["latest_version"] == 0 and s["files_latest"] == 2  # root + lakehouse definition
    timeline = page[page.index('id="timeline"'):page.index('id="jobs"')]
    assert 'data-version="0" data-kind="init"' in timeline
    assert re.search(r'class="tick">\d\d:\d\d:\d\d<', timeline)  # the lone point still gets a time tick


def test_object_store_sizes_come_from_one_listing():
    import uuid

    from trinitylake.lakehouse import Lakehouse
    from trinitylake.report.tree import ReachWalker

    lh = Lakehouse.create(f"memory://report-{uuid.uuid4().hex}", order=4, node_max_bytes=4096, audit=False)
    for i in range(8):
        lh.create_namespace(f"n{i}")
    listed = collect(lh).reach
    w = ReachWalker(lh)
    w._prefill = False  # one Storage.info per file
    assert listed == [w.version(r.version) for r in listed]
    assert listed[-1].def_files == 9 and listed[-1].missing == 0
