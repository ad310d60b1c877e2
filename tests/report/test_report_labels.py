"""What the report prints must read whole: the job lanes' row labels fit the margin they sit in,
and a duration option's stored milliseconds show with their unit (the CLI's own spelling)."""

from __future__ import annotations

import re

from click.testing import CliRunner

from trinitylake.cli import cli
from trinitylake.report.html import _ms_text


def _tl(lh: str, *args: str) -> str:
    r = CliRunner().invoke(cli, ["--lakehouse", lh, *args], catch_exceptions=False)
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return r.stdout


def test_lane_labels_fit_and_durations_have_units(tmp_path):
    lh = str(tmp_path / "lh")
    _tl(lh, "init")
    _tl(lh, "namespace", "create", "sales")
    _tl(lh, "table", "create", "sales.orders")
    _tl(lh, "export", "--name", "weekly", "--target", str(tmp_path / "exp"))
    _tl(lh, "export", "drop", "weekly")
    _tl(lh, "expire", "--max-version-age", "1s", "--dry-run")
    _tl(lh, "expire", "--max-version-age", "7d", "--dry-run")
    out = tmp_path / "r.html"
    _tl(lh, "report", "--out", str(out))
    page = out.read_text()

    # Every lane label is right-aligned at the plot's left edge minus 8px: it fits when that x
    # leaves room for its characters (12px text, at most ~7px a character).
    labels = re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="end" class="rowlabel">([^<]+)</text>', page)
    names = {name for _x, name in labels}
    assert "export drop" in names, names
    for x, name in labels:
        assert float(x) >= 7 * len(name), f"lane label {name!r} at x={x} is clipped by the margin"

    args = re.findall(r'<div class="args mono"[^>]*>([^<]+)</div>', page)
    assert any("max_version_age=1s" in a for a in args), args
    assert any("max_version_age=7d" in a for a in args), args
    assert not any(re.search(r"max_version_age=\d+(\s|$)", a) for a in args), args


def test_ms_text_keeps_the_exact_value():
    assert [_ms_text(ms) for ms in (1000, 604800000, 1500, 90000, 3600000)] == ["1s", "7d", "1500ms", "90s", "1h"]
