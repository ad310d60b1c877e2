"""The anchored object-store benchmark's arithmetic (bench/bench_objstore_anchor.py): requests by
kind, their price, s5cmd's requests, the targets of issue 42 on rows of one run only, and the
parsing of what the tools print. No servers."""

from __future__ import annotations

import json

import pytest

from bench.bench_objstore import MixedRunsError, Timing
from bench.bench_objstore_anchor import (
    count_listed,
    normalize_requests,
    parse_job_result,
    request_cost,
    s5cmd_requests,
    same_run_sum,
    target_limit,
    targets,
    walk_levels,
)


def test_requests_of_the_proxy_and_of_a_job_land_in_the_same_columns() -> None:
    proxy = {"GET": 27, "HEAD": 8, "HEAD_BUCKET": 1, "LIST": 5, "PUT": 3, "MPU": 2, "COPY": 4, "DELETE_BATCH": 1,
             "DELETE": 2, "BUCKET": 1, "OTHER": 1}
    assert normalize_requests(proxy) == {"get": 27, "put": 5, "copy": 4, "list": 5, "head": 9, "delete": 3,
                                         "other": 2}
    job = {"get": 24, "put": 3, "list": 4, "head": 2, "delete": 1, "other": 0, "bytes_read": 186172,
           "bytes_written": 15285, "post": 1, "select": 2}
    assert normalize_requests(job) == {"get": 24, "put": 4, "copy": 0, "list": 4, "head": 2, "delete": 1, "other": 2}
    assert normalize_requests(None) == dict.fromkeys(("get", "put", "copy", "list", "head", "delete", "other"), 0)


def test_cost_at_s3_list_prices() -> None:
    # $0.005 a 1,000 PUT, COPY, POST, LIST; $0.0004 a 1,000 GET, HEAD, others; DELETE free.
    assert request_cost({"put": 1000, "get": 1000, "delete": 1_000_000}) == pytest.approx(0.0054)
    assert request_cost({"copy": 2000, "list": 1000, "head": 500, "other": 500}) == pytest.approx(0.0154)
    # s5cmd cp of the 9,086-file lakehouse: 10 LIST pages + 9,086 server-side copies.
    assert request_cost(s5cmd_requests("cp", 9086)) == pytest.approx(9096 * 0.005 / 1000)
    assert request_cost(s5cmd_requests("rm", 15_000)) == 0.0


def test_s5cmd_requests_as_the_proxy_counted_them() -> None:
    assert s5cmd_requests("ls", 9086)["list"] == 10
    assert s5cmd_requests("ls", 0)["list"] == 1
    assert s5cmd_requests("cp", 233) == {"get": 0, "put": 0, "copy": 233, "list": 1, "head": 0, "delete": 0,
                                         "other": 0}
    assert s5cmd_requests("download", 21) == {"get": 21, "put": 0, "copy": 0, "list": 0, "head": 21, "delete": 0,
                                              "other": 0}
    assert sum(s5cmd_requests("rm", 100).values()) == s5cmd_requests("rm", 100)["delete"] == 100
    with pytest.raises(ValueError, match="sync"):
        s5cmd_requests("sync", 1)


def _row(tool: str, job: str, wall: float, execution: str = "", run_id: str = "r1", delay: float = 20.0,
         ok: bool = True, **extra: object) -> dict:
    return {"run_id": run_id, "delay_ms": delay, "tool": tool, "job": job, "execution": execution, "ok": ok,
            "wall_s": wall, **extra}


def _one_run(run_id: str = "r1") -> list[dict]:
    return [
        _row("s5cmd", "ls", 1.0, run_id=run_id),
        _row("s5cmd", "cp", 10.0, run_id=run_id),
        _row("s5cmd", "download", 4.0, run_id=run_id),
        _row("s5cmd", "ls_orphans", 3.0, run_id=run_id),
        _row("s5cmd", "rm", 2.0, run_id=run_id),
        _row("tlake", "walk", 6.0, "local", run_id=run_id, levels=5),
        _row("tlake", "export", 16.0, "local", run_id=run_id),
        _row("tlake", "walk_after_export", 6.5, "local", run_id=run_id, levels=5),
        _row("tlake", "orphans", 5.0, "local", run_id=run_id, levels=5),
    ]


def test_targets_of_one_run() -> None:
    checks, refused = targets(_one_run(), "small")
    assert refused == []
    got = {c["check"]: (c["ratio"], c["limit"], c["verdict"], c["anchor_s"]) for c in checks}
    assert got == {
        "export": (1.6, 1.5, "MISS", 10.0),  # 16 / 10
        "walk": (1.463, 1.5, "PASS", 4.1),  # 6 / (4 s download + 5 levels x 20 ms)
        "walk_after_export": (1.083, 1.1, "PASS", 6.0),
        "orphans": (1.0, 1.0, "PASS", 5.0),  # 5 / (3 s ls + 2 s rm)
    }
    assert {c["run_id"] for c in checks} == {"r1"}


def test_targets_refuse_rows_of_two_runs() -> None:
    rows = [r for r in _one_run("new") if r["job"] != "cp"] + [_row("s5cmd", "cp", 10.0, run_id="old")]
    checks, refused = targets(rows, "small")
    assert len(refused) == 1 and "old" in refused[0] and "new" in refused[0]
    by = {c["check"]: c for c in checks}
    assert by["export"]["verdict"] == "refused" and by["export"]["ratio"] is None
    assert by["walk"]["verdict"] == "PASS"


def test_a_failed_side_gives_no_verdict() -> None:
    rows = [r if r["job"] != "download" else {**r, "ok": False} for r in _one_run()]
    by = {c["check"]: c for c in targets(rows, "small")[0]}
    assert by["walk"]["verdict"] == "n/a" and by["walk"]["ratio"] is None
    assert by["export"]["verdict"] == "MISS"


def test_limits_by_scale_and_delay() -> None:
    assert target_limit("export", "small", 20) == target_limit("export", "small", 100) == 1.5
    assert target_limit("export", "large", 20) == 2.0
    assert target_limit("export", "large", 100) is None
    assert [target_limit(c, "large", 100) for c in ("walk", "walk_after_export", "orphans")] == [1.5, 1.1, 1.0]
    checks, _ = targets([{**r, "delay_ms": 100.0} for r in _one_run()], "large")
    export = next(c for c in checks if c["check"] == "export")
    assert export["ratio"] == 1.6 and export["verdict"] == "n/a"


def test_same_run_sum() -> None:
    assert same_run_sum("x", Timing("r", "a", 1.0), Timing("r", "b", 2.0), extra_s=0.5).seconds == 3.5
    with pytest.raises(MixedRunsError, match="r1.*r2"):
        same_run_sum("x", Timing("r1", "a", 1.0), Timing("r2", "b", 2.0))


def test_parsing_what_the_tools_print() -> None:
    result = {"status": "succeeded", "details": {"reachable_walk": {"levels": [{"depth": 0}, {"depth": 1}]}}}
    text = "a progress line\n{not json\n" + json.dumps(result, indent=2) + "\n"
    assert parse_job_result(text) == result
    assert parse_job_result(json.dumps(result)) == result
    assert parse_job_result("") == {} and parse_job_result("Traceback ...") == {}
    assert walk_levels(result) == 2 and walk_levels({}) is None
    ls = ("2026/11/28 03:27:20              1234 0010/1100/1110/00000100-node-x.arrow\n"
          "2026/11/28 03:27:20                55 _lakehouse_def_x.binpb\n"
          "                                  DIR  _maintenance/\n")
    assert count_listed(ls) == 2


def test_targets_compare_the_medians_of_repeats() -> None:
    rows = _one_run() + [{**r, "wall_s": r["wall_s"] * 3} for r in _one_run()] + [
        {**r, "wall_s": r["wall_s"] * 2} for r in _one_run()]
    by = {c["check"]: c for c in targets(rows, "small")[0]}
    assert by["export"]["ours_s"] == 32.0 and by["export"]["anchor_s"] == 20.0 and by["export"]["ratio"] == 1.6
    failed = [*rows[:-1], {**rows[-1], "ok": False}]  # one repeat of the orphans failed: no verdict
    assert {c["check"]: c["verdict"] for c in targets(failed, "small")[0]}["orphans"] == "n/a"
    mixed = [*rows, {**_one_run("other")[1]}]  # a repeat of s5cmd cp from another run
    checks, refused = targets(mixed, "small")
    assert len(refused) == 1 and "median" in refused[0] and "other" in refused[0]
