"""Benchmark figures come from one run: every row carries its run id and commit, and the scale
bench prints a ratio, a crossover or a fit only from rows of one run of a clean tree (issue
"Evidence at HEAD": BENCHMARKS.md once paired rows of different days, by the minute)."""

from __future__ import annotations

import json

import pytest

from bench import common, run_all
from bench.bench_scale import analysis_run, crossover, extrapolate, refusal_notes, same_run, scale_ratios
from bench.common import MixedRunsError, one_run, write_result


def _row(tool: str, run: str | None, commit: str | None = "abc1234", **kw) -> dict:
    row = {"tool": tool, "run_id": run, "commit": commit, "tables": 20000, "versions": 200, "seconds": 1.0}
    return {**row, **kw}


def _walks(run: str | None, files: int, local_s: float, dist_s: float, peer_s: float = 1.0) -> list[dict]:
    """The walk rows of one size, as bench_scale measures them."""

    def walk(tool: str, seconds: float) -> dict:
        return _row(tool, run, files=files, job="walk", seconds=seconds, ok=True, spark_s=5.0, phases={})

    return [
        walk("peer: tlwalk.py (serial pyarrow)", peer_s),
        walk("tlake local", local_s),
        walk("tlake distributed", dist_s),
    ]


def test_rows_of_one_clean_run_pair():
    refused: list[str] = []
    assert same_run(_row("tlake local", "r1"), _row("tlake distributed", "r1"), refused, "x")
    assert refused == []


def test_rows_of_different_runs_are_refused_with_the_command_to_remeasure():
    refused: list[str] = []
    assert not same_run(_row("tlake distributed", "r1"), _row("tlake local", "r2"), refused, "walk ratio")
    assert len(refused) == 1 and "different runs" in refused[0] and "--sizes 20000:200" in refused[0]


def test_rows_of_a_dirty_tree_are_refused():
    refused: list[str] = []
    assert not same_run(_row("a", "r1", "abc1234+dirty"), _row("b", "r1", "abc1234+dirty"), refused, "y")
    assert "uncommitted changes" in refused[0]


def test_old_rows_without_a_run_id_pair_with_nothing_even_of_the_same_minute():
    a, b = _row("a", None, None, date="2026-11-26 05:39"), _row("b", None, None, date="2026-11-26 05:39")
    refused: list[str] = []
    assert not same_run(a, b, refused, "z")
    assert "before rows carried a run id" in refused[0]
    assert refusal_notes(refused) == ["Not printed, their rows carrying no run id: 1 ratio at z."]


def test_scale_ratios_of_two_runs_are_refused_and_of_one_run_printed():
    rows = _walks("r1", 1000, local_s=2.0, dist_s=40.0)
    rows += [
        {**r, "run_id": "r2"} if r["tool"] == "tlake distributed" else {**r, "run_id": "r1"}
        for r in _walks(None, 20000, local_s=4.0, dist_s=30.0)
    ]
    ratios, runs, refused = scale_ratios(rows)
    assert ratios == {
        "walk seconds, tlake local / tlwalk.py, 1,000 files": 2.0,
        "walk seconds, tlake distributed / tlwalk.py, 1,000 files": 40.0,
        "walk seconds, tlake distributed / tlake local, 1,000 files": 20.0,
        "walk seconds, tlake local / tlwalk.py, 20,000 files": 4.0,
    }
    assert set(runs.values()) == {"r1"} and set(runs) == set(ratios)
    assert sorted(x.split(":")[0] for x in refused) == [
        "walk seconds, tlake distributed / tlake local, 20,000 files",
        "walk seconds, tlake distributed / tlwalk.py, 20,000 files",
    ]
    assert all("different runs" in x and "r1" in x and "r2" in x for x in refused)


def test_crossover_and_fits_refuse_rows_of_two_runs():
    rows = _walks("r1", 20_000, 2.0, 40.0) + _walks("r2", 200_000, 10.0, 60.0)
    with pytest.raises(MixedRunsError, match="crossover.*r1, r2"):
        crossover(rows)
    with pytest.raises(MixedRunsError, match="fit"):
        extrapolate(rows)
    with pytest.raises(MixedRunsError, match="no run id"):
        extrapolate(_walks(None, 20_000, 2.0, 40.0) + _walks(None, 200_000, 10.0, 60.0))
    one = _walks("r1", 20_000, 2.0, 40.0) + _walks("r1", 200_000, 11.0, 58.0)
    cross = crossover(one)
    assert cross["run_id"] == "r1" and cross["job_ratio_distributed_over_local"] == [(20_000, 20.0), (200_000, 5.273)]
    assert extrapolate(one)["walk / tlake local"]["largest_ok_files"] == 200_000


def test_the_analysis_run_covers_the_most_sizes_of_a_clean_commit():
    rows = (
        _walks("r1", 1000, 1.0, 9.0)
        + _walks("r1", 20_000, 2.0, 9.0)  # two sizes
        + _walks("r2", 200_000, 10.0, 60.0)  # one size, later
        + [
            {**r, "commit": "abc1234+dirty"}
            for r in _walks("r3", 1000, 1.0, 9.0) + _walks("r3", 9, 1, 2) + _walks("r3", 99, 1, 2)
        ]  # three sizes, but a dirty tree
        + _walks(None, 1_000_000, 40.0, 80.0)
    )  # no run id
    assert analysis_run(rows) == "r1"
    assert analysis_run(_walks(None, 1000, 1.0, 2.0)) is None


def test_one_run():
    assert one_run([_row("a", "r1"), _row("b", "r1")], "x") == "r1"
    with pytest.raises(MixedRunsError, match="refusing x: its rows come from r1, r2"):
        one_run([_row("a", "r1"), _row("b", "r2")], "x")


def test_every_row_written_carries_its_run_and_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    path = write_result("demo", "Demo", [{"n": 1}, {"n": 2, "run_id": "earlier", "commit": None}], {})
    doc = json.loads(path.read_text())
    assert doc["rows"][0]["run_id"] == common.RUN_ID == doc["run_id"]
    assert doc["rows"][0]["commit"] == common.commit() == doc["machine"]["git"]
    assert doc["rows"][1]["run_id"] == "earlier" and doc["rows"][1]["commit"] is None  # a kept row keeps its own


def test_the_writer_refuses_ratios_of_rows_of_several_runs_without_their_run(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    rows = [{"n": 1, "run_id": "r1"}, {"n": 2, "run_id": "r2"}]
    with pytest.raises(MixedRunsError, match="demo: rows of 2 runs"):
        write_result("demo", "Demo", rows, {"n=2 / n=1": 2.0})
    with pytest.raises(MixedRunsError):  # a run the rows do not have
        write_result("demo", "Demo", rows, {"n=2 / n=1": 2.0}, ratio_runs={"n=2 / n=1": "r9"})
    doc = json.loads(write_result("demo", "Demo", rows, {"a": 2.0}, ratio_runs={"a": "r2"}).read_text())
    md = run_all.render_markdown([doc], {})
    assert "| comparison | ratio | run |" in md and "| a | 2.00× | r2 |" in md
    assert "| n | run_id | commit |" in md and "Rows of 2 runs" in md
