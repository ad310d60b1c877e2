"""The scale bench prints a ratio only when both its sides were measured in one run of a clean
tree (issue "Tests that cannot lie": BENCHMARKS.md once paired rows of different days)."""

from __future__ import annotations

from bench.bench_scale import same_run


def _row(tool: str, run: str, git: str = "abc1234") -> dict:
    return {"tool": tool, "run": run, "git": git, "tables": 20000, "versions": 200, "seconds": 1.0}


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


def test_old_rows_without_a_run_pair_by_their_date():
    a, b = _row("a", ""), _row("b", "")
    a["date"], b["date"] = "2026-11-24 00:13", "2026-11-26 05:39"
    refused: list[str] = []
    assert not same_run(a, b, refused, "z")
