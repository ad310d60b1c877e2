"""`tlake report`: one self-contained HTML page about a lakehouse (versions over time, job
runs and their metrics, files and bytes reachable per version), charts as inline SVG.

    >>> from trinitylake.report import generate_report
    >>> summary = generate_report(lh, "report.html")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from trinitylake.json_data import JsonObject
from trinitylake.report.data import JobRun, ReportData, Snapshot, VersionPoint, collect
from trinitylake.report.html import render
from trinitylake.report.tree import IcebergTable, Reach

if TYPE_CHECKING:
    from trinitylake.lakehouse.lakehouse import Lakehouse


def generate_report(lakehouse: Lakehouse, out_path: str | os.PathLike, max_versions: int = 200) -> JsonObject:
    """Write the report page for `lakehouse` to the local file `out_path`; return its summary
    numbers (latest version, counts, files and bytes at the latest version, ...)."""
    data = collect(lakehouse, max_versions=max_versions)
    page = render(data)
    out = os.fspath(out_path)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, out)
    summary = data.summary()
    summary["path"] = os.path.abspath(out)
    summary["html_bytes"] = len(page.encode("utf-8"))
    return summary


__all__ = ["IcebergTable", "JobRun", "Reach", "ReportData", "Snapshot", "VersionPoint", "collect", "generate_report", "render"]
