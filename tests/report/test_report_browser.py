"""The report of a busy lakehouse rendered by a real headless browser (Debian's `chromium`,
installed by .ci/run): ordinary commits are a density, not job runs; jobs are marks with honest
states; no two labels of the versions chart overlap; per-run metrics are collapsed and long run
lists paged, so the page stays a few screens tall; it renders to a PNG.

Layout facts are measured in the browser: a copy of the page gets a script (the report itself
has none) that writes the page height and the boxes of the chart labels into the DOM, which
``chromium --dump-dom`` prints.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from trinitylake.control import AuditRecord
from trinitylake.report import generate_report

COMMITS = 60
WALKS = 90

MEASURE = """<script>
window.addEventListener('load', () => {
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const out = {
    height: document.documentElement.scrollHeight,
    labels: [...document.querySelectorAll('#timeline svg text.note, #timeline svg text.vlabel')]
      .map((e) => ({text: e.textContent, box: box(e)})),
    open_metric_rows: [...document.querySelectorAll('details.metrics[open]')].length,
    visible_job_rows: [...document.querySelectorAll('#jobs tr[data-job]')].filter((e) => e.checkVisibility()).length,
    job_marks: document.querySelectorAll('#timeline [data-job-run]').length,
    commit_bars: [...document.querySelectorAll('#timeline rect[data-commits]')]
      .reduce((n, e) => n + Number(e.dataset.commits), 0),
  };
  const pre = document.createElement('pre'); pre.id = 'measure'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return exe


def _browser(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--disable-dev-shm-usage", *args], capture_output=True, text=True,
                          timeout=180, check=False)


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """60 ordinary audited commits (named like the demo's), a rollback, then job runs: a dry and
    a deleting orphans run, an expire that deleted files, a failed export and 90 walks."""
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.lakehouse.context import AuditContext

    base = tmp_path_factory.mktemp("busy")
    lh = Lakehouse.create(str(base / "lh"), order=4, node_max_bytes=4096, context=AuditContext("demo: create tables"))
    lh.create_namespace("sales")
    for i in range(COMMITS - 3):
        lh.create_table("sales", f"t{i:03d}")
    lh.rollback(lh.latest_version() - 5)
    control = lh.auditor.control
    now = datetime.now(UTC)

    def run(job, state, metrics, i, args=None, error=None):
        txn = f"{job}-{i}"
        seq = control.seq.allocate(txn)
        t = now + timedelta(minutes=i)
        control.append([AuditRecord(seq, "begin", txn, job, arguments=args or {}, started_at=t)])
        control.append([AuditRecord(seq, state, txn, job, arguments=args or {}, started_at=t,
                                    ended_at=t + timedelta(seconds=3), metrics=metrics, error_class=error and "E",
                                    error_message=error)])
        return seq

    many = {f"seconds_phase_{k:02d}": 0.5 for k in range(30)}
    run("orphans", "read", {**many, "status_dry_run": 1.0, "files_candidates": 4.0}, 1, {"dry_run": True})
    run("orphans", "read", {**many, "status_succeeded": 1.0, "files_deleted": 4.0, "bytes_deleted": 4096.0}, 2)
    run("expire", "read", {**many, "status_succeeded": 1.0, "files_deleted": 12.0}, 3)
    run("export", "failed", {"status_failed": 1.0}, 4, error="copy failed")
    for i in range(WALKS):
        run("walk", "read", {**many, "status_succeeded": 1.0, "files_reachable": 100.0 + i}, 10 + i)
    out = base / "report.html"
    summary = generate_report(lh, out)
    return out, summary


@pytest.fixture(scope="module")
def measured(busy, tmp_path_factory):
    out, _ = busy
    probe = tmp_path_factory.mktemp("probe") / "probe.html"
    probe.write_text(out.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    res = _browser("--virtual-time-budget=5000", "--window-size=1280,900", "--dump-dom", probe.as_uri())
    m = re.search(r'<pre id="measure">(.*?)</pre>', res.stdout, re.S)
    assert m, f"chromium printed no measurement (rc {res.returncode}): {res.stderr[-2000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_commits_are_a_density_and_jobs_are_marks(busy, measured):
    _, summary = busy
    assert summary["job_runs"] == 4 + WALKS  # the 60 "demo: ..." commits are not job runs
    assert measured["job_marks"] == 4 + WALKS
    assert measured["commit_bars"] >= COMMITS  # every ordinary commit counted in the density strip


def test_job_states_are_honest(busy):
    out, _ = busy
    page = out.read_text(encoding="utf-8")
    states = re.findall(r'<tr data-job="(orphans|expire|export)" data-state="([a-z_]+)"', page)
    assert sorted(states) == [("expire", "deleted"), ("export", "failed"), ("orphans", "deleted"),
                              ("orphans", "dry_run")]


def test_no_two_chart_labels_overlap(measured):
    boxes = [lab["box"] for lab in measured["labels"]]
    assert boxes, "the versions chart has no labels to check"
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap = a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5
            assert not overlap, f"labels overlap: {measured['labels']}"


def test_metrics_collapsed_and_long_lists_paged(measured):
    assert measured["open_metric_rows"] == 0
    assert measured["visible_job_rows"] == 20  # the newest 20; older runs in collapsed pages
    # ~94 runs with 30+ metrics each: a few screens, not a 22,000-pixel wall.
    assert measured["height"] < 6000, measured["height"]


def test_renders_to_png(busy, tmp_path):
    out, _ = busy
    png = tmp_path / "report.png"
    res = _browser(f"--screenshot={png}", "--window-size=1280,2400", out.as_uri())
    assert png.exists(), res.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 2400)
