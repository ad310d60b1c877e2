"""The tables' maintenance benchmark at its quick scale (20 tables x 5 snapshots): both tools
run on copies of the same build and agree on what they did, and the result names each side."""

from __future__ import annotations

import json

from bench import bench_tables_maintenance as bench
from bench import common


def test_quick_benchmark_runs_both_tools_on_the_same_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(bench, "TMP_DIR", tmp_path / "tmp")
    assert bench.main(["--quick"]) == 0
    doc = json.loads((tmp_path / "results" / "tables_maintenance.json").read_text())
    rows = {r["tool"]: r for r in doc["rows"]}
    ours, theirs = rows[bench.EXPIRE_TOOLS[0]], rows[bench.EXPIRE_TOOLS[1]]
    assert ours["snapshots_expired"] == theirs["snapshots_expired"] == 20 * 4  # all but the current one
    assert ours["files_deleted"] >= 80 and "tables.manifests local" in ours["where"] and "commit" in ours["phases"]
    assert rows[bench.ORPHAN_TOOLS[0]]["files_deleted"] == rows[bench.ORPHAN_TOOLS[1]]["files_deleted"] == 20
    assert len(doc["ratios"]) == 2 and all(v and v > 0 for v in doc["ratios"].values())
    assert {r["run_id"] for r in doc["rows"]} == {doc["run_id"]}
