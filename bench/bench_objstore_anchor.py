"""Object store with latency: tlake against s5cmd, in the same run, on the same store.

A lakehouse of N tables and V versions, the acceptance checks' shape (``../shared/acceptance/lib/mklh.py``:
order 16, 16 KiB nodes, 5 namespaces, the tables created 500 to a transaction, then V
single-table alters), is built on local disk and served by s3s-fs (both listing patches)
behind the Go delaying proxy (latproxy; the Python proxy when asked, or when no Go tools can be
found or built). At each delay (20 and 100 ms by default), each step on a fresh copy of the
lakehouse: the anchors, s5cmd ``ls 's3://bench/lh/*'``, ``cp 's3://bench/lh/*'
s3://bench/s5copy/`` (server-side copies) and ``run`` of one ``cp s3://... LOCAL`` line per
``.arrow`` file (the root and node files a walk reads); then ours, ``tlake walk``, ``tlake export
--full`` to another prefix of the same bucket and the walk again after that export, and ``tlake
orphans`` of M planted orphans against s5cmd ``ls`` of the same keys plus ``run`` of one ``rm``
line per planted key; each tlake job with ``--execution auto`` and ``local`` (``distributed``
only when named: on 2 cores it mostly measures Spark's start).

A row's wall time is the whole process (tlake or s5cmd, as a user waits for it), its client CPU
the process's user + system seconds (its waited children included), per request too. Requests
by kind: counted by the Python proxy when it runs (``--proxy python``); behind latproxy, which
counts nothing, tlake's from its ``--json`` result and s5cmd's from :func:`s5cmd_requests` (the
requests s5cmd makes for N objects, as the Python proxy counted them). The cost of one run is
priced at S3's list prices (:data:`PRICES`). Every ratio compares two rows of the same run
(``same_run_ratio``; with ``--repeat N``, the medians of N rounds), and the targets of issue 42
are printed PASS or MISS (:func:`targets`).

    python -m bench.bench_objstore_anchor [--scale small|large] [--delays 20,100]
        [--executions auto,local[,distributed]] [--tables N --versions V --orphans M]
        [--proxy auto|go|python] [--lakehouse-cache DIR] [--tlake-flags '--threads 128'] [--repeat N]

``--scale small`` is 8,000 tables / 100 versions (15,000 orphans), ``large`` 100,000 / 2,000.
Needs s3s-fs (``make objstore``) and s5cmd + latproxy (``make gotools``);
``make bench-objstore-anchor`` runs this.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.bench_objstore import (
    BUCKET,
    LH_KEY,
    MASTER,
    MixedRunsError,
    Timing,
    _check_listing,
    _count_files,
    _job_env,
    _reset_bucket,
    _restore_lakehouse,
    _tlake,
    plant_orphans,
    print_table,
    same_run_ratio,
    size_and_delays,
)
from bench.common import RESULTS_DIR, parse_args, scratch_dir, write_result

SIZES = {
    "small": {"tables": 8000, "versions": 100, "orphans": 15_000},
    "large": {"tables": 100_000, "versions": 2000, "orphans": 15_000},
}
DELAYS = (20.0, 100.0)
EXECUTIONS = ("auto", "local")
ALL_EXECUTIONS = ("auto", "local", "distributed")
COPY_PREFIX = "s5copy"

# S3 Standard, us-east-1, dollars per 1,000 requests (list prices). DELETE is free; so is
# DeleteObjects here (counted with the deletes: a POST, but a delete).
PRICES = {"put": 0.005, "copy": 0.005, "list": 0.005, "get": 0.0004, "head": 0.0004, "other": 0.0004,
          "delete": 0.0}
REQUEST_COLUMNS = ("get", "put", "copy", "list", "head", "delete", "other")
# Other names of request kinds (the proxy's, upper-cased; a job's) -> the columns above.
_KIND_ALIASES = {"mpu": "put", "post": "put", "head_bucket": "head", "delete_batch": "delete", "bucket": "other"}
_BYTE_KINDS = ("bytes_read", "bytes_written")


# ---- requests and their price ------------------------------------------------------------------
def normalize_requests(counts: Mapping[str, Any] | None) -> dict[str, int]:
    """Counts of requests by kind, from a job's ``requests`` or the proxy's ``requests_by_kind``,
    in :data:`REQUEST_COLUMNS` (a kind not known is ``other``; byte counts are left out)."""
    out = dict.fromkeys(REQUEST_COLUMNS, 0)
    for kind, n in (counts or {}).items():
        k = str(kind).lower()
        if k in _BYTE_KINDS or not isinstance(n, int | float):
            continue
        k = _KIND_ALIASES.get(k, k)
        out[k if k in out else "other"] += int(n)
    return out


def request_cost(requests: Mapping[str, int]) -> float:
    """Dollars for these requests (:func:`normalize_requests` columns) at :data:`PRICES`."""
    return sum(PRICES[k] * requests.get(k, 0) for k in REQUEST_COLUMNS) / 1000.0


def s5cmd_requests(op: str, objects: int) -> dict[str, int]:
    """The requests s5cmd 2.3 sends to handle `objects` objects: ``ls`` lists (1,000 keys a
    page), ``cp`` (S3 to S3) lists then copies each object server-side, ``download`` (a ``run``
    of single-object ``cp`` lines) HEADs then GETs each, ``rm`` (a ``run`` of single-key ``rm``
    lines) sends one DeleteObjects each. As the Python proxy counted them (``--proxy python``,
    2026-11-28)."""
    pages = max(1, math.ceil(objects / 1000))
    out = dict.fromkeys(REQUEST_COLUMNS, 0)
    if op == "ls":
        out["list"] = pages
    elif op == "cp":
        out["list"], out["copy"] = pages, objects
    elif op == "download":
        out["get"] = out["head"] = objects
    elif op == "rm":
        out["delete"] = objects
    else:
        raise ValueError(f"unknown s5cmd operation {op!r}")
    return out


# ---- the targets of issue 42 ---------------------------------------------------------------------
def same_run_sum(label: str, *timings: Timing, extra_s: float = 0.0) -> Timing:
    """One timing made of several of the same run (plus `extra_s`): an anchor of two steps."""
    runs = {t.run_id for t in timings}
    if len(runs) != 1:
        raise MixedRunsError(f"refusing to add {', '.join(f'{t.label} (run {t.run_id})' for t in timings)}")
    return Timing(timings[0].run_id, label, sum(t.seconds for t in timings) + extra_s)


def target_limit(check: str, scale: str, delay_ms: float) -> float | None:
    """The most a check's ratio may be (issue 42), None where the issue sets none: full export
    <= 1.5x s5cmd cp at 20 and 100 ms (at 100k tables, 20 ms: <= 2x; 100 ms there: none); walk
    <= 1.5x (download of its files + a round trip a level); walk after an export <= 1.1x the
    walk before; orphans <= 1.0x s5cmd ls + rm."""
    if check == "export":
        if scale == "large":
            return 2.0 if delay_ms == 20 else None
        return 1.5
    return {"walk": 1.5, "walk_after_export": 1.1, "orphans": 1.0}[check]


def _timing(rows: list[dict[str, Any]] | None) -> Timing | None:
    """The median wall time of one step's repeats, None unless every repeat succeeded; repeats
    of different runs are refused."""
    if not rows or not all(r.get("ok") and r.get("wall_s") for r in rows):
        return None
    r = rows[0]
    name = f"{r['tool']} {r['job']}" + (f" ({r['execution']})" if r.get("execution") else "")
    label = f"{r['delay_ms']:g} ms {name}" + (f" (median of {len(rows)})" if len(rows) > 1 else "")
    runs = sorted({x["run_id"] for x in rows})
    if len(runs) > 1:
        raise MixedRunsError(f"refusing the median of {label} over runs {', '.join(runs)}")
    return Timing(r["run_id"], label, statistics.median(float(x["wall_s"]) for x in rows))


def _anchor_of(check: str, delay: float, s5: Mapping[str, list[dict[str, Any]]],
               ours: Mapping[str, list[dict[str, Any]]]) -> Timing | None:
    """The anchor timing of one check (None when a side is missing); refuses mixed runs."""
    if check == "export":
        return _timing(s5["cp"])
    if check == "walk":
        download = _timing(s5["download"])
        levels = next((r["levels"] for r in ours["walk"] if r.get("levels")), None)
        if not (download and levels):
            return None
        return same_run_sum("s5cmd download + levels", download, extra_s=levels * delay / 1000)
    if check == "walk_after_export":
        return _timing(ours["walk"])
    ls, rm = _timing(s5["ls_orphans"]), _timing(s5["rm"])
    return same_run_sum("s5cmd ls + rm", ls, rm) if ls and rm else None


CHECKS = (("export", "s5cmd cp"), ("walk", "s5cmd download + a round trip a level"),
          ("walk_after_export", "the walk before"), ("orphans", "s5cmd ls + rm"))


def targets(rows: list[dict[str, Any]], scale: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Each target of issue 42 checked on the rows: ours / the anchor, both of the same run
    (with ``--repeat``, the median of each step's repeats). Returns the checks (ratio, limit,
    verdict PASS / MISS, or ``n/a`` where a side failed or the issue sets no limit) and the
    comparisons refused because their rows come from different runs (verdict ``refused``)."""
    by: dict[tuple[float, str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["delay_ms"], r["tool"], r["job"], r.get("execution") or ""), []).append(r)
    checks: list[dict[str, Any]] = []
    refused: list[str] = []
    for delay in sorted({r["delay_ms"] for r in rows}):
        s5 = {job: by.get((delay, "s5cmd", job, ""), []) for job in ("cp", "download", "ls_orphans", "rm")}
        executions = sorted({r["execution"] for r in rows if r["tool"] == "tlake" and r["delay_ms"] == delay})
        for execution in executions:
            ours = {job: by.get((delay, "tlake", job, execution), [])
                    for job in ("walk", "export", "walk_after_export", "orphans")}
            for check, anchor_name in CHECKS:
                limit = target_limit(check, scale, delay)
                out = {"delay_ms": delay, "execution": execution, "check": check, "anchor": anchor_name,
                       "ours_s": None, "anchor_s": None, "ratio": None, "limit": limit, "verdict": "n/a"}
                try:
                    mine, anchor = _timing(ours[check]), _anchor_of(check, delay, s5, ours)
                    if mine and anchor:
                        ratio = same_run_ratio(mine, anchor)
                        out.update(run_id=mine.run_id, ours_s=mine.seconds, anchor_s=round(anchor.seconds, 3),
                                   ratio=round(ratio, 3))
                        if limit is not None:
                            out["verdict"] = "PASS" if ratio <= limit else "MISS"
                except MixedRunsError as e:
                    refused.append(f"{delay:g} ms, {check} ({execution}) / {anchor_name}: {e}")
                    out["verdict"] = "refused"
                checks.append(out)
    return checks, refused


def target_label(c: Mapping[str, Any]) -> str:
    limit = f"target <= {c['limit']:g}x" if c.get("limit") is not None else "no target"
    return f"{c['delay_ms']:g} ms, {c['check']} ({c['execution']}) / {c['anchor']} ({limit})"


# ---- parsing what the tools print ---------------------------------------------------------------
def parse_job_result(text: str) -> dict[str, Any]:
    """A tlake job's ``--json`` result (empty when it printed none). Progress lines may come
    before it: the JSON object is the last thing printed."""
    text = text.strip()
    if not text:
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        i = text.find("\n{")
        while i >= 0:
            try:
                return json.loads(text[i + 1:])
            except json.JSONDecodeError:
                i = text.find("\n{", i + 1)
        return {}


def walk_levels(result: Mapping[str, Any]) -> int | None:
    """Levels of the tree a walk read, one round trip each (its ``reachable_walk`` details)."""
    walk = ((result.get("details") or {}).get("reachable_walk") or {})
    levels = walk.get("levels")
    return len(levels) if isinstance(levels, list) and levels else None


def count_listed(text: str) -> int:
    """Objects in an ``s5cmd ls`` output (one line each; ``DIR`` lines are prefixes)."""
    return sum(1 for ln in text.splitlines() if ln.strip() and ln.split()[0] != "DIR")


# ---- the lakehouse -------------------------------------------------------------------------------
def build_lakehouse(path: Path, tables: int, versions: int, *, batch: int = 500, log: Any = print) -> dict[str, Any]:
    """The acceptance checks' shape (``../shared/acceptance/lib/mklh.py``) through the project's API: order
    16, 16 KiB nodes, 5 namespaces, `tables` created `batch` to a transaction, then `versions`
    single-table alters (seeded). Prints progress about every 10%."""
    from bench.generator import fill_acceptance_shape
    from trinitylake.lakehouse import Lakehouse

    t0 = time.perf_counter()
    subprocess.run([_tlake(), "--lakehouse", str(path), "--no-audit", "init", "--order", "16",
                    "--node-max-bytes", "16384"], check=True, capture_output=True)
    lh = Lakehouse.open(str(path), audit=False)
    steps = math.ceil(tables / batch) + versions
    done, shown = 0, 0.0

    def step() -> None:
        nonlocal done, shown
        done += 1
        if steps >= 20 and done / steps >= shown + 0.1:
            shown = done / steps
            log(f"  building the lakehouse: {done}/{steps} commits, {time.perf_counter() - t0:.0f} s", flush=True)

    fill_acceptance_shape(lh, tables, versions, batch, step)
    return {"tables": tables, "versions": versions, "latest_version": lh.latest_version(), "batch": batch,
            "seconds": round(time.perf_counter() - t0, 1)}


def source_lakehouse(work: Path, cache: Path | None, tables: int, versions: int, rebuild: bool) -> tuple[Path, dict]:
    """The lakehouse to serve: built under `work`, or kept in `cache` across runs."""
    if cache is None:
        src = work / "lh-src"
        return src, build_lakehouse(src, tables, versions)
    src = cache / f"mklh-{tables}x{versions}"
    marker = cache / f"mklh-{tables}x{versions}.built.json"
    if src.is_dir() and marker.is_file() and not rebuild:
        print(f"lakehouse: reusing {src}", flush=True)
        return src, {**json.loads(marker.read_text()), "reused": True}
    shutil.rmtree(src, ignore_errors=True)
    src.parent.mkdir(parents=True, exist_ok=True)
    info = build_lakehouse(src, tables, versions)
    marker.write_text(json.dumps(info) + "\n")
    return src, info


# ---- one measured process ------------------------------------------------------------------------
@dataclass
class Measured:
    rc: int
    out: str
    err: str
    wall_s: float
    cpu_s: float  # the process's user + system CPU, its waited children included
    server_cpu_s: float | None  # s3s-fs's meanwhile
    proxy_cpu_s: float | None  # latproxy's meanwhile (None: the Python proxy, in this process)
    proxy: dict[str, Any]


def run_measured(cmd: list[str], env: Mapping[str, str], store: Any, timeout: float, logs: Path) -> Measured:
    """Run `cmd` to its end; its wall time, CPU (``RUSAGE_CHILDREN`` delta: this harness waits
    for nothing else meanwhile) and the server's and proxy's CPU (/proc). Its output goes to
    files under `logs` (a pipe would put this process's reads on the cores under test)."""
    from bench.objstore import process_cpu_seconds

    logs.parent.mkdir(parents=True, exist_ok=True)
    out_path, err_path = logs.with_suffix(".out"), logs.with_suffix(".err")
    store.proxy.reset_stats()
    s0, p0 = process_cpu_seconds(store.server_pid), process_cpu_seconds(store.proxy.pid)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, env=dict(env), stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = 124
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s1, p1 = process_cpu_seconds(store.server_pid), process_cpu_seconds(store.proxy.pid)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return Measured(rc, out_path.read_text(), err_path.read_text() + (f"\ntimed out after {timeout} s" if rc == 124
                                                                       else ""),
                    wall, cpu, None if s0 is None or s1 is None else s1 - s0,
                    None if p0 is None or p1 is None else p1 - p0, store.proxy.stats())


def make_row(run_id: str, delay: float, tool: str, job: str, execution: str, m: Measured, *, files: int | None,
             requests: dict[str, int], source: str, ok: bool, error: str | None, **extra: Any) -> dict[str, Any]:
    total = sum(requests.values())
    proxied = m.proxy.get("requests")
    return {
        "run_id": run_id, "delay_ms": delay, "tool": tool, "job": job, "execution": execution, "ok": ok,
        "wall_s": round(m.wall_s, 3), "files": files, "requests": total, **requests, "requests_from": source,
        "proxy_requests": proxied, "client_cpu_s": round(m.cpu_s, 3),
        "cpu_ms_per_req": round(1000 * m.cpu_s / total, 4) if total else None,
        "server_cpu_s": round(m.server_cpu_s, 3) if m.server_cpu_s is not None else None,
        "proxy_cpu_s": round(m.proxy_cpu_s, 3) if m.proxy_cpu_s is not None else None,
        "cost_usd": round(request_cost(requests), 6), **extra, "error": error,
    }


def _error_of(m: Measured, result: Mapping[str, Any] | None = None) -> str:
    lines = [ln for ln in m.err.strip().splitlines() if ln.strip() and not ln.startswith(" ")]
    return (result or {}).get("error") or (lines[-1] if lines else f"exit {m.rc}")


# ---- the bench --------------------------------------------------------------------------------------
class Bench:
    """One run: the store at one delay at a time, the source lakehouse, the rows."""

    def __init__(self, args: Any, run_id: str, source: Path, work: Path, tools: dict[str, Path]) -> None:
        self.args, self.run_id, self.source, self.work, self.tools = args, run_id, source, work, tools
        self.rows: list[dict[str, Any]] = []
        self.details: list[dict[str, Any]] = []
        self.rep = 0
        self.keys = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
        self.arrow_keys = [k for k in self.keys if k.endswith(".arrow") and not k.startswith("_maintenance/")]

    # -- s5cmd
    def s5cmd(self, store: Any, delay: float, job: str, args: list[str], objects: int,
              check: Callable[[Measured], str | None]) -> dict[str, Any]:
        env = {**os.environ, **store.env, "AWS_REGION": store.region}
        cmd = [str(self.tools["s5cmd"]), "--endpoint-url", store.endpoint_url, *args]
        m = run_measured(cmd, env, store, self.args.timeout, self.work / f"{int(delay)}ms-{self.rep}-s5cmd-{job}")
        op = "ls" if job.startswith("ls") else job
        if store.proxy.counts:
            requests, source = normalize_requests(m.proxy.get("requests_by_kind")), "proxy"
        else:
            requests, source = s5cmd_requests(op, objects), "model"
        error = _error_of(m) if m.rc else check(m)
        row = make_row(self.run_id, delay, "s5cmd", job, "", m, files=objects, requests=requests, source=source,
                       ok=error is None, error=error)
        if store.proxy.counts:
            row["model_requests"] = sum(s5cmd_requests(op, objects).values())
        return self._add(row, {"cmd": cmd, "proxy": m.proxy, "stderr_tail": m.err[-2000:]})

    # -- tlake
    def tlake(self, store: Any, delay: float, job: str, execution: str, flags: list[str],
              expect: int | None = None) -> dict[str, Any]:
        command = "walk" if job == "walk_after_export" else job
        cmd = [_tlake(), "--lakehouse", f"s3://{BUCKET}/{LH_KEY}", *store.tlake_args(), "--no-audit", command, *flags,
               "--master", self.args.master, "--execution", execution, "--json", *shlex.split(self.args.tlake_flags)]
        m = run_measured(cmd, _job_env(store), store, self.args.timeout,
                         self.work / f"{int(delay)}ms-{self.rep}-{job}-{execution}")
        result = parse_job_result(m.out)
        counts = result.get("counts") or {}
        files = {"walk": counts.get("reachable"), "walk_after_export": counts.get("reachable"),
                 "export": counts.get("copied"), "orphans": counts.get("deleted")}[job]
        ok = m.rc == 0 and result.get("status") == "succeeded" and (expect is None or files == expect)
        error = None
        if not ok:
            error = _error_of(m, result)
            if m.rc == 0 and expect is not None and files != expect:
                error = f"{job} handled {files} files, expected {expect}"
        job_requests = normalize_requests(result.get("requests"))
        if store.proxy.counts:  # the whole process's, the opening of the lakehouse included
            requests, source = normalize_requests(m.proxy.get("requests_by_kind")), "proxy"
        else:
            requests, source = job_requests, "job"
        details = result.get("details") or {}
        placed = ",".join(f"{k.split('.')[-1]}:{(v or {}).get('where', '?')[0]}"
                          for k, v in (details.get("execution") or {}).items())
        phases = " ".join(f"{k} {v:.3g}" for k, v in (result.get("seconds") or {}).items()
                          if isinstance(v, int | float) and k != "total")
        row = make_row(self.run_id, delay, "tlake", job, execution, m, files=files, requests=requests, source=source,
                       ok=ok, error=error, job_requests=sum(job_requests.values()), phases=phases, placed=placed,
                       levels=walk_levels(result),
                       node_reads=counts.get("node_reads"),
                       spark_start_s=(details.get("spark") or {}).get("session_seconds"))
        return self._add(row, {"cmd": cmd, "proxy": m.proxy, "result": result, "stderr_tail": m.err[-4000:]})

    def _add(self, row: dict[str, Any], detail: dict[str, Any]) -> dict[str, Any]:
        row = {**row, "rep": self.rep}
        self.rows.append(row)
        self.details.append({"row": row, **detail})
        name = f"{row['tool']} {row['job']}" + (f" ({row['execution']})" if row["execution"] else "")
        cpu = f", {row['cpu_ms_per_req']:.3g} CPU-ms/req" if row["cpu_ms_per_req"] else ""
        print(f"  {row['delay_ms']:g} ms {name}: {row['wall_s']:.2f} s, {row['requests']} requests "
              f"({row['requests_from']}){cpu}, ${row['cost_usd']:.6f}"
              + ("" if row["ok"] else f"  FAILED: {row['error']}"), flush=True)
        return row

    # -- one delay
    def at_delay(self, store: Any, delay: float) -> None:
        """Every step at this delay, ``--repeat`` times over (the anchors, ours, the orphans)."""
        for rep in range(self.args.repeat):
            self.rep = rep
            if self.args.repeat > 1:
                print(f"  round {rep + 1} of {self.args.repeat}", flush=True)
            self._round(store, delay)

    def _round(self, store: Any, delay: float) -> None:
        a, lh = self.args, f"s3://{BUCKET}/{LH_KEY}"
        bucket = store.root / BUCKET

        # The anchors on a fresh copy: list, server-side copy, download of the .arrow files.
        _restore_lakehouse(store, self.source)
        n = len(self.keys)
        self.s5cmd(store, delay, "ls", ["ls", f"{lh}/*"], n,
                   lambda m: None if count_listed(m.out) == n else f"listed {count_listed(m.out)} of {n} objects")
        shutil.rmtree(bucket / COPY_PREFIX, ignore_errors=True)
        self.s5cmd(store, delay, "cp", ["cp", f"{lh}/*", f"s3://{BUCKET}/{COPY_PREFIX}/"], n,
                   lambda m: None if (c := _count_files(bucket / COPY_PREFIX)[0]) == n else f"copied {c} of {n}")
        shutil.rmtree(bucket / COPY_PREFIX, ignore_errors=True)
        local = self.work / "download"
        shutil.rmtree(local, ignore_errors=True)
        run_file = self.work / "download.txt"
        run_file.write_text("".join(f"cp {lh}/{k} {local}/{k}\n" for k in self.arrow_keys))
        na = len(self.arrow_keys)
        self.s5cmd(store, delay, "download", ["run", str(run_file)], na,
                   lambda m: None if (c := _count_files(local)[0]) == na else f"downloaded {c} of {na}")
        shutil.rmtree(local, ignore_errors=True)

        # Ours: walk, full export to another prefix of the bucket, the walk again.
        for e in a.executions:
            _restore_lakehouse(store, self.source)
            self.tlake(store, delay, "walk", e, [])
            target = f"xp-{int(delay)}-{e}"
            shutil.rmtree(bucket / target, ignore_errors=True)
            self.tlake(store, delay, "export", e, ["--name", f"x{int(delay)}{e}", "--target", f"s3://{BUCKET}/{target}",
                                                   "--full"])
            self.tlake(store, delay, "walk_after_export", e, [])
            shutil.rmtree(bucket / target, ignore_errors=True)

        # Orphans: s5cmd ls + rm of the planted keys, against tlake orphans, each on a fresh copy.
        planted = plant_orphans(_restore_lakehouse(store, self.source), a.orphans)
        n_all = n + len(planted)
        self.s5cmd(store, delay, "ls_orphans", ["ls", f"{lh}/*"], n_all,
                   lambda m: None if count_listed(m.out) == n_all else f"listed {count_listed(m.out)} of {n_all}")
        rm_file = self.work / "rm.txt"
        rm_file.write_text("".join(f"rm {lh}/{k}\n" for k in planted))
        lh_dir = bucket / LH_KEY

        def gone(m: Measured) -> str | None:
            left = sum((lh_dir / k).exists() for k in planted)
            return None if not left else f"{left} of {len(planted)} planted keys left"

        self.s5cmd(store, delay, "rm", ["run", str(rm_file)], len(planted), gone)
        for e in a.executions:
            plant_orphans(_restore_lakehouse(store, self.source), a.orphans)
            self.tlake(store, delay, "orphans", e, ["--older-than", "1d", "--unsafe-min-age"], expect=a.orphans)
        _reset_bucket(store, BUCKET)


# ---- output ----------------------------------------------------------------------------------------
COLUMNS = ["delay_ms", "tool", "job", "execution", "rep", "ok", "wall_s", "files", "requests", "get", "put", "copy",
           "list", "head", "delete", "other", "requests_from", "client_cpu_s", "cpu_ms_per_req", "server_cpu_s", "cost_usd",
           "levels", "phases", "placed"]
TARGET_COLUMNS = ["delay_ms", "execution", "check", "anchor", "ours_s", "anchor_s", "ratio", "limit", "verdict"]


def _extra(p: Any) -> None:
    p.add_argument("--tables", type=int, default=None)
    p.add_argument("--versions", type=int, default=None)
    p.add_argument("--orphans", type=int, default=None, help="planted orphans (default 15,000)")
    p.add_argument("--delays", default=",".join(f"{d:g}" for d in DELAYS), help="ms a request, comma-separated")
    p.add_argument("--executions", default=",".join(EXECUTIONS),
                   help="tlake placements, comma-separated: auto, local, distributed (default auto,local)")
    p.add_argument("--master", default=MASTER, help="Spark master of the distributed runs")
    p.add_argument("--proxy", choices=("auto", "go", "python"), default="auto",
                   help="delaying proxy: go (latproxy), python (counts every request; its CPU shares the cores), "
                        "auto (go when found or buildable)")
    p.add_argument("--lakehouse-cache", default=None,
                   help="keep the built lakehouse in this folder and reuse it (e.g. .cache/objstore-anchor)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the lakehouse kept in --lakehouse-cache")
    p.add_argument("--tlake-flags", default="", help="more flags for every tlake job, e.g. '--threads 128'")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of every step at each delay; the targets compare the medians (default 1)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed to one process")


def _go_tools(proxy: str) -> tuple[dict[str, Path], str]:
    """s5cmd and latproxy (built when go is there), and the proxy kind to use."""
    from bench.objstore import ensure_gotools, find_gotools

    found = find_gotools()
    if found is None and (proxy != "python" or shutil.which("go")):
        found = ensure_gotools()
    if found is None:
        raise SystemExit("s5cmd is needed: make gotools (Go), or put it in .cache/gotools/bin")
    return found, ("python" if proxy == "python" else "go")


def _phase_seconds(phases: str | None, name: str) -> float | None:
    """Seconds of phase `name` in a row's ``phases`` text (``"plan 1.6 copy 25.8 ..."``)."""
    words = (phases or "").split()
    for k, v in zip(words[::2], words[1::2], strict=False):
        if k == name:
            return float(v)
    return None


def _slots_of(master: str) -> int:
    hit = re.fullmatch(r"local\[(\d+)\]", master.strip()) or re.fullmatch(
        r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", master.strip())
    if hit is None:
        return 0
    return int(hit.group(1)) * (int(hit.group(2)) if hit.lastindex and hit.lastindex > 1 else 1)


def cluster_projection(rows: list[dict[str, Any]], master: str) -> list[str]:
    """Notes projecting a cluster from this run's measured figures (issue 42, placement): the
    driver's copy rate (the local export's copy phase), one executor slot's (the distributed
    export's copy phase over the master's slots) and Spark's fixed cost (a distributed walk's
    wall time minus the local walk's). These 2 cores cannot show executors beating a driver
    that uses them well; a cluster adds cores, which this projects."""
    out: list[str] = []
    slots = _slots_of(master)
    for delay in sorted({r["delay_ms"] for r in rows if r.get("tool") == "tlake"}):
        def row(job: str, execution: str, delay: float = delay) -> dict[str, Any] | None:
            return next((r for r in rows if r.get("delay_ms") == delay and r.get("job") == job
                         and r.get("execution") == execution and r.get("ok")), None)

        lx, dx, lw, dw = row("export", "local"), row("export", "distributed"), row("walk", "local"), row("walk", "distributed")
        if not (lx and dx and lw and dw and slots):
            continue
        lc, dc = _phase_seconds(lx.get("phases"), "copy"), _phase_seconds(dx.get("phases"), "copy")
        files = lx.get("files") or dx.get("files")
        if not (lc and dc and files):
            continue
        driver_rate, slot_rate = files / lc, files / dc / slots
        fixed = max(0.0, float(dw["wall_s"]) - float(lw["wall_s"]))
        line = (f"projection at {delay:g} ms (measured here: the driver copies {driver_rate:.0f} files/s, one executor "
                f"slot {slot_rate:.0f} files/s with {slots} slots on these same 2 cores and the store's server, Spark's "
                f"fixed cost {fixed:.0f} s): a full export of F files takes F/{driver_rate:.0f} s on the driver and "
                f"{fixed:.0f} + F/({slot_rate:.0f} x S) s on S executor slots")
        for f in (100_000, 1_000_000):
            drv = f / driver_rate
            wins = [s for s in (8, 16, 32, 64, 128, 256) if fixed + f / (slot_rate * s) * 1.25 < drv]
            line += (f"; {f:,} files: driver {drv:.0f} s, executors first win at "
                     f"{wins[0] if wins else 'more than 256'} slots")
        out.append(line + " (a real store serves the copies itself and does not share the client's cores: "
                   "both rates are lower bounds there).")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args("objstore_anchor", argv, _extra)
    size, delays = size_and_delays(args, SIZES)
    args.executions = [e.strip() for e in args.executions.split(",") if e.strip()]
    for e in args.executions:
        if e not in ALL_EXECUTIONS:
            raise SystemExit(f"unknown execution {e!r} (choose from {', '.join(ALL_EXECUTIONS)})")

    from bench.objstore import S5CMD_VERSION, ensure_s3s, latency_store

    tools, proxy_kind = _go_tools(args.proxy)
    s3s = ensure_s3s()
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    t_all = time.perf_counter()
    print(f"run {run_id}: {size['tables']} tables, {size['versions']} versions, {size['orphans']} orphans; delays "
          f"{delays} ms; tlake --execution {','.join(args.executions)}; proxy {proxy_kind}; s3s-fs {s3s}; "
          f"s5cmd {tools['s5cmd']}", flush=True)
    with scratch_dir("objstore-anchor", keep=args.keep) as d:
        cache = Path(args.lakehouse_cache).resolve() if args.lakehouse_cache else None
        source, built = source_lakehouse(d, cache, size["tables"], size["versions"], args.rebuild)
        files, nbytes = _count_files(source)
        work = d / "runs"
        work.mkdir()
        bench = Bench(args, run_id, source, work, tools)
        print(f"lakehouse: {files} files ({len(bench.arrow_keys)} .arrow), {nbytes / 1e6:.1f} MB"
              + ("" if built.get("reused") else f", built in {built['seconds']:.1f} s"), flush=True)
        for delay in delays:
            with latency_store(d / "s3", delay, binary=s3s, log_path=d / "s3s.log", proxy_kind=proxy_kind) as store:
                _restore_lakehouse(store, source)
                _check_listing(store, source)
                print(f"{delay:g} ms a request ({type(store.proxy).__name__}):", flush=True)
                bench.at_delay(store, delay)
        if args.keep:
            print(f"kept {d}")

    rows = bench.rows
    checks, refused = targets(rows, args.scale)
    ratios = {target_label(c): c["ratio"] for c in checks if c["ratio"] is not None}
    print()
    print_table(rows, COLUMNS)
    print()
    print_table(checks, TARGET_COLUMNS)
    for c in checks:
        if c["verdict"] in ("PASS", "MISS"):
            print(f"{c['verdict']}  {target_label(c)}: {c['ratio']:.3g}x")
    for r in refused:
        print(f"REFUSED {r}")
    mismatch = sorted({r["node_reads"] for r in rows if r["job"] == "walk" and r.get("node_reads") is not None}
                      - {len(bench.arrow_keys)})
    params = {**size, "files": files, "bytes": nbytes, "arrow_files": len(bench.arrow_keys), "delays_ms": delays,
              "executions": args.executions, "master": args.master, "proxy": proxy_kind, "run_id": run_id,
              "s3s_fs": str(s3s), "s5cmd": f"{tools['s5cmd']} ({S5CMD_VERSION})", "tlake_flags": args.tlake_flags,
              "prices_per_1000": PRICES, "lakehouse": built, "repeat": args.repeat}
    notes = [
        *cluster_projection(rows, args.master),
        "wall_s: the whole process (tlake: Spark's start included when a phase ran on Spark). client_cpu_s: its "
        "user + system CPU, children included; cpu_ms_per_req: that over its requests. server_cpu_s: s3s-fs's CPU "
        "meanwhile (the server shares the machine's cores with the client).",
        "requests by kind: counted by the proxy when it counts (requests_from proxy: the Python proxy, every "
        "request of the process). Behind latproxy, which counts nothing: tlake's from its --json result "
        "(requests_from job: the job's own, driver and executors; the opening of the lakehouse before the job "
        "starts, about 10 requests, is not in it; job_requests is that count in every mode), s5cmd's from the "
        "model of its requests (requests_from model: ls 1 LIST a 1,000 keys; cp those LISTs + 1 COPY an object; "
        "download 1 HEAD + 1 GET an object; rm 1 DeleteObjects a line; as the Python proxy counted them). put "
        "includes POSTs and multipart steps; delete includes DeleteObjects.",
        "cost_usd: one run at S3 Standard us-east-1 list prices: PUT, COPY, POST, LIST $0.005 a 1,000; GET, HEAD "
        "and others $0.0004 a 1,000; DELETE free.",
        "Every ratio and target compares rows of the same run (run_id); the walk's anchor is s5cmd's download of "
        "the .arrow files (the roots and nodes it reads) plus one round trip per level of the tree (levels).",
        *[f"the walk read {x} root and node files, the download took {len(bench.arrow_keys)} .arrow files"
          for x in mismatch],
        *[f"{c['verdict']}: {target_label(c)}: {c['ratio']}x" for c in checks if c["verdict"] in ("PASS", "MISS")],
        *[f"refused: {r}" for r in refused],
    ]
    write_result("objstore_anchor", "Object store with latency: tlake against s5cmd, same run, same store", rows,
                 ratios, scale=args.scale, module="objstore_anchor", description=__doc__.split("\n\n")[1],
                 params=params, columns=COLUMNS, notes=notes, seconds=time.perf_counter() - t_all)
    suffix = "" if args.scale == "small" else f"_{args.scale}"
    detail_path = RESULTS_DIR / f"objstore_anchor{suffix}_runs.json"
    detail_path.write_text(json.dumps({"run_id": run_id, "targets": checks, "refused": refused, "runs": bench.details},
                                      indent=1, default=str) + "\n")
    print(f"ran {time.perf_counter() - t_all:.0f} s; every run's command and output: "
          f"{detail_path.relative_to(RESULTS_DIR.parent.parent)}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
