"""Object store with latency: walk, full export (S3 to S3) and orphans, by placement.

A lakehouse of N tables and V versions (`bench.generator`, order 16, 16 KiB nodes) is built on
local disk and served by s3s-fs behind the delaying proxy (`bench.objstore`: every request
pays DELAY ms, the driver's and every executor's alike). At each delay (20 and 100 ms by
default) ``tlake walk``, ``tlake export --full`` (to another bucket of the same store) and
``tlake orphans`` (M planted orphans, 30 days old) run as a user runs them, each with
``--execution local``, ``distributed`` and ``auto`` on ``--master 'local-cluster[4,1,1024]'``
(4 executor JVMs). Every job starts from a fresh copy of the lakehouse (the orphans job from a
fresh set of orphans). A row's time is the whole ``tlake`` process (Spark's start included, as a
user waits for it); its phases, placements and Spark start come from the job's ``--json``
result, its requests by kind and the server's share from the proxy, which times every request
from its last byte forwarded to the server to the last byte of the answer.

Beside it, ``objstore_server`` measures the server alone at no added delay: N HEAD, GET and
LIST requests from one boto3 client (a process of its own), straight to s3s-fs and through the
proxy, and through the proxy at each delay.

Every timing carries the run id of the bench invocation that measured it, and a ratio is only
ever computed from two timings of the same run (:func:`same_run_ratio` refuses otherwise);
``--merge`` keeps the rows of an earlier result for the cases not run now, and the ratios
between such rows and new ones are refused, not printed.

    python -m bench.bench_objstore [--scale small|large] [--delays 20,100] [--jobs walk,export,orphans]
        [--executions local,distributed,auto] [--tables N --versions V --orphans M] [--merge]

Needs s3s-fs (``make objstore`` builds it with cargo; ``make bench-objstore`` runs this).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, MixedRunsError, parse_args, scratch_dir, write_result

SIZES = {
    "small": {"tables": 2000, "versions": 50, "orphans": 10_000},
    "large": {"tables": 20_000, "versions": 200, "orphans": 10_000},
}
DELAYS = (20.0, 100.0)
JOBS = ("walk", "export", "orphans")
EXECUTIONS = ("local", "distributed", "auto")
MASTER = "local-cluster[4,1,1024]"
BUCKET = "bench"
LH_KEY = "lh"
OLD = time.time() - 30 * 86_400


@dataclass(frozen=True)
class Timing:
    run_id: str
    label: str
    seconds: float


def same_run_ratio(a: Timing, b: Timing) -> float:
    """a / b, only when both were measured in the same run (the machines are noisy)."""
    if a.run_id != b.run_id:
        raise MixedRunsError(f"refusing to compare {a.label} (run {a.run_id}) with {b.label} (run {b.run_id})")
    if b.seconds <= 0:
        raise ValueError(f"{b.label}: no time to divide by")
    return a.seconds / b.seconds


def faster(a: Timing, b: Timing) -> Timing:
    """The faster of two timings of the same run."""
    if a.run_id != b.run_id:
        raise MixedRunsError(f"refusing to compare {a.label} (run {a.run_id}) with {b.label} (run {b.run_id})")
    return a if a.seconds <= b.seconds else b


def _timing(row: dict[str, Any]) -> Timing | None:
    if not row.get("ok") or not row.get("wall_s"):
        return None
    return Timing(row["run_id"], f"{row['delay_ms']:g} ms {row['job']} {row['execution']}", float(row["wall_s"]))


def placement_ratios(
    rows: list[dict[str, Any]], runs: dict[str, str] | None = None
) -> tuple[dict[str, float | None], list[str]]:
    """The headline ratios of job rows, per delay and job: local / distributed and auto / the
    faster of the two. Pairs whose sides come from different runs are refused (listed in the
    second value), never printed; `runs`, when given, gets the run of each ratio."""
    by = {(r["delay_ms"], r["job"], r["execution"]): r for r in rows if "job" in r}
    ratios: dict[str, float | None] = {}
    refused: list[str] = []
    for delay, job in sorted({(d, j) for d, j, _ in by}):
        loc, dis, aut = (by.get((delay, job, e)) for e in EXECUTIONS)
        tl, td, ta = (_timing(r) if r else None for r in (loc, dis, aut))
        head = f"{delay:g} ms, {job}"
        try:
            if tl and td:
                label = f"{head}: wall time local / distributed (>1: executors faster)"
                ratios[label] = round(same_run_ratio(tl, td), 3)
                if runs is not None:
                    runs[label] = tl.run_id
                if ta:
                    best = faster(tl, td)
                    label = f"{head}: wall time auto / faster placement ({best.label.split()[-1]})"
                    ratios[label] = round(same_run_ratio(ta, best), 3)
                    if runs is not None:
                        runs[label] = ta.run_id
        except MixedRunsError as e:
            refused.append(f"{head}: {e}")
    return ratios, refused


# ---- the store and the lakehouse --------------------------------------------------------------
def _reset_bucket(store: Any, bucket: str) -> Path:
    """Empty `bucket` (its folder and s3s-fs's per-object files) and return its folder."""
    d = store.root / bucket
    shutil.rmtree(d, ignore_errors=True)
    b64 = base64.urlsafe_b64encode(bucket.encode()).decode().rstrip("=")  # s3s-fs's names for them
    for p in store.root.glob(f".bucket-{b64}.object-*.json"):
        p.unlink(missing_ok=True)
    return store.bucket_dir(bucket)


def _restore_lakehouse(store: Any, source: Path) -> Path:
    """A fresh copy of the lakehouse at s3://bench/lh (new mtimes: nothing in it is an orphan)."""
    dst = _reset_bucket(store, BUCKET) / LH_KEY
    subprocess.run(["cp", "-r", str(source), str(dst)], check=True)
    return dst


def plant_orphans(lh_dir: Path, n: int) -> list[str]:
    """`n` old, format-owned, unreferenced files spread over the hash prefixes; their paths
    relative to `lh_dir` (the keys under the lakehouse's prefix)."""
    from trinitylake.format.paths import hashed_path

    keys = []
    for i in range(n):
        name = f"node-{uuid.uuid4()}.arrow" if i % 2 else f"ns-t{i}-{uuid.uuid4()}.binpb"
        key = hashed_path(name)
        p = lh_dir / key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"orphan")
        os.utime(p, (OLD, OLD))
        keys.append(key)
    return keys


def _plant_orphans(lh_dir: Path, n: int) -> int:
    return len(plant_orphans(lh_dir, n))


def _check_listing(store: Any, source: Path) -> None:
    """The server lists the lakehouse as it is on disk (an s3s-fs without our patches does not:
    an empty delimiter made recursive listings stop at the first level)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=store.direct_url,
        aws_access_key_id=store.key,
        aws_secret_access_key=store.secret,
        region_name=store.region,
    )
    want = sorted(f"{LH_KEY}/{p.relative_to(source).as_posix()}" for p in source.rglob("*") if p.is_file())
    for prefix in (f"{LH_KEY}/", f"{LH_KEY}/{want[-1].split('/')[1]}/"):
        got = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix, Delimiter=""):
            got += [o["Key"] for o in page.get("Contents", [])]
        if sorted(got) != [k for k in want if k.startswith(prefix)]:
            raise RuntimeError(
                f"s3s-fs lists {len(got)} keys under {prefix}, the folder holds "
                f"{sum(k.startswith(prefix) for k in want)}: is it built with bench.objstore.PATCHES?"
            )


def _count_files(d: Path) -> tuple[int, int]:
    n = size = 0
    for root, _, files in os.walk(d):
        for f in files:
            n += 1
            size += os.stat(os.path.join(root, f)).st_size
    return n, size


def _job_env(store: Any) -> dict[str, str]:
    import pyspark

    py = sys.executable
    env = {
        **os.environ,
        **store.env,
        "SPARK_HOME": os.path.dirname(pyspark.__file__),
        "PYSPARK_PYTHON": py,
        "PYSPARK_DRIVER_PYTHON": py,
    }
    for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "SPARK_REMOTE"):
        env.pop(k, None)
    return env


def _tlake() -> str:
    exe = Path(sys.executable).with_name("tlake")
    return str(exe) if exe.exists() else (shutil.which("tlake") or "tlake")


# ---- one job run -----------------------------------------------------------------------------------
def _run_job(
    store: Any, run_id: str, delay: float, job: str, execution: str, args: Any, source: Path, work: Path
) -> dict[str, Any]:
    lh_dir = _restore_lakehouse(store, source)
    planted = _plant_orphans(lh_dir, args.orphans) if job == "orphans" else 0
    target_bucket = f"x{int(delay)}-{execution}"
    cmd = [_tlake(), "--lakehouse", f"s3://{BUCKET}/{LH_KEY}", *store.tlake_args(), "--no-audit", job]
    if job == "export":
        _reset_bucket(store, target_bucket)
        cmd += ["--name", f"x{int(delay)}{execution}", "--target", f"s3://{target_bucket}/x", "--full"]
    elif job == "orphans":
        cmd += ["--older-than", "1d", "--unsafe-min-age"]
    cmd += ["--master", args.master, "--execution", execution, "--json"]
    store.proxy.delay_ms = delay
    store.proxy.reset_stats()
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=_job_env(store), capture_output=True, text=True, timeout=args.timeout)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, "", f"timed out after {args.timeout} s: {e}"
    wall = time.perf_counter() - t0
    stats = store.proxy.stats()
    tag = f"{job}-{int(delay)}ms-{execution}"
    (work / f"{tag}.json").write_text(out)
    (work / f"{tag}.err").write_text(err)
    try:
        result = json.loads(out) if out.strip() else {}
    except json.JSONDecodeError:
        result = {}
    counts = result.get("counts") or {}
    details = result.get("details") or {}
    execution_details = details.get("execution") or {}
    kinds = stats["requests_by_kind"]
    files, expect = {
        "walk": (counts.get("reachable"), None),
        "export": (counts.get("copied"), None),
        "orphans": (counts.get("deleted"), planted),
    }[job]
    ok = rc == 0 and result.get("status") == "succeeded" and (expect is None or files == expect)
    error = None
    if not ok:
        lines = [ln for ln in (err.strip().splitlines() or [""]) if ln.strip() and not ln.startswith(" ")]
        error = result.get("error") or (lines[-1] if lines else f"exit {rc}")
        if rc == 0 and expect is not None and files != expect:
            error = f"{job} handled {files} files, expected {expect}"
    if job == "export":
        _reset_bucket(store, target_bucket)
        shutil.rmtree(store.root / target_bucket, ignore_errors=True)
    timed = sum(v["timed"] for v in stats["kinds"].values())
    row = {
        "run_id": run_id,
        "delay_ms": delay,
        "job": job,
        "execution": execution,
        "ok": ok,
        "wall_s": round(wall, 3),
        "phases": " ".join(
            f"{k} {v:.3g}"
            for k, v in (result.get("seconds") or {}).items()
            if isinstance(v, int | float) and k != "total"
        ),
        "spark_start_s": (details.get("spark") or {}).get("session_seconds"),
        "placed": ",".join(
            f"{k.split('.')[-1]}:{(v or {}).get('where', '?')[0]}" for k, v in execution_details.items()
        ),
        "files": files,
        "requests": stats["requests"],
        "get": kinds.get("GET", 0),
        "put": kinds.get("PUT", 0) + kinds.get("COPY", 0) + kinds.get("MPU", 0),
        "list": kinds.get("LIST", 0),
        "head": kinds.get("HEAD", 0) + kinds.get("HEAD_BUCKET", 0),
        "delete": kinds.get("DELETE", 0) + kinds.get("DELETE_BATCH", 0),
        "errors": sum(v["errors"] for v in stats["kinds"].values()),
        "server_s": round(stats["server_s"], 3),
        "server_ms_per_req": round(1000 * stats["server_s"] / timed, 3) if timed else None,
        "proxy_lag_ms": round(stats["loop_lag_ms"], 2) if stats["loop_lag_ms"] is not None else None,
        "load_1m": round(load, 2),
        "error": error,
    }
    detail = {
        "row": row,
        "cmd": cmd,
        "phases": result.get("seconds"),
        "execution": execution_details,
        "spark": details.get("spark"),
        "requests_reported_by_job": result.get("requests"),
        "proxy": stats,
        "counts": counts,
    }
    return {"row": row, "detail": detail}


# ---- the server alone -------------------------------------------------------------------------------
_CLIENT = r"""
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
import boto3
from botocore.config import Config
url, bucket, prefix, n, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
c = boto3.client("s3", endpoint_url=url, config=Config(max_pool_connections=max(10, threads)))
keys = []
for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
    keys += [o["Key"] for o in page.get("Contents", []) if o["Key"].endswith(".arrow") and "-node-" in o["Key"]]
keys = (keys * (n // max(1, len(keys)) + 1))[:n]
c.head_object(Bucket=bucket, Key=keys[0])
out = {}
def timed(name, fn, items):
    t0 = time.perf_counter()
    if threads == 1:
        for k in items: fn(k)
    else:
        with ThreadPoolExecutor(threads) as pool: list(pool.map(fn, items))
    out[name] = {"requests": len(items), "seconds": time.perf_counter() - t0}
timed("HEAD", lambda k: c.head_object(Bucket=bucket, Key=k), keys)
timed("GET", lambda k: c.get_object(Bucket=bucket, Key=k)["Body"].read(), keys)
pages = max(1, n // 20)
timed("LIST", lambda _: c.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1000), range(pages))
print(json.dumps(out))
"""


def _client_run(url: str, store: Any, n: int, threads: int) -> dict[str, Any]:
    env = {**os.environ, **store.env}
    out = subprocess.run(
        [sys.executable, "-c", _CLIENT, url, BUCKET, f"{LH_KEY}/", str(n), str(threads)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode:
        raise RuntimeError(f"request client failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def server_rows(store: Any, run_id: str, n: int, delays: list[float]) -> list[dict[str, Any]]:
    """Requests straight to s3s-fs and through the proxy, one client process."""
    rows = []
    cases = [
        ("s3s-fs direct", store.direct_url, 0.0, 1),
        ("proxy", store.endpoint_url, 0.0, 1),
        ("s3s-fs direct", store.direct_url, 0.0, 16),
        ("proxy", store.endpoint_url, 0.0, 16),
    ]
    cases += [("proxy", store.endpoint_url, d, 1) for d in delays]
    for target, url, delay, threads in cases:
        store.proxy.delay_ms = delay
        store.proxy.reset_stats()
        res = _client_run(url, store, n if delay == 0 else max(20, n // 10), threads)
        snap = store.proxy.stats() if target == "proxy" else {}
        stats = snap.get("kinds") or {}
        for op, r in res.items():
            k = stats.get(op) or {}
            rows.append(
                {
                    "run_id": run_id,
                    "target": target,
                    "delay_ms": delay,
                    "threads": threads,
                    "op": op,
                    "requests": r["requests"],
                    "ms_per_request": round(1000 * r["seconds"] / r["requests"], 3) if threads == 1 else None,
                    "requests_per_s": round(r["requests"] / r["seconds"], 1),
                    "server_ms": round(1000 * k["server_s"] / k["timed"], 3) if k.get("timed") else None,
                    "proxy_lag_ms": round(snap["loop_lag_ms"], 2) if snap.get("loop_lag_ms") is not None else None,
                }
            )
    return rows


# ---- output ----------------------------------------------------------------------------------------
JOB_COLUMNS = [
    "delay_ms",
    "job",
    "execution",
    "ok",
    "wall_s",
    "spark_start_s",
    "phases",
    "placed",
    "files",
    "requests",
    "get",
    "put",
    "list",
    "head",
    "delete",
    "errors",
    "server_ms_per_req",
    "server_s",
    "proxy_lag_ms",
    "load_1m",
]
SERVER_COLUMNS = [
    "target",
    "delay_ms",
    "threads",
    "op",
    "requests",
    "ms_per_request",
    "requests_per_s",
    "server_ms",
    "proxy_lag_ms",
]


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    def cell(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, bool):
            return "yes" if v else "NO"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    cells = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for x in cells:
        print("  ".join(v.rjust(w) for v, w in zip(x, widths, strict=True)))


def _extra(p: Any) -> None:
    p.add_argument("--tables", type=int, default=None)
    p.add_argument("--versions", type=int, default=None)
    p.add_argument("--orphans", type=int, default=None, help="planted orphans of the orphans job (default 10,000)")
    p.add_argument("--delays", default=",".join(f"{d:g}" for d in DELAYS), help="ms a request, comma-separated")
    p.add_argument("--jobs", default=",".join(JOBS))
    p.add_argument("--executions", default=",".join(EXECUTIONS))
    p.add_argument("--master", default=MASTER)
    p.add_argument("--requests", type=int, default=400, help="requests of each kind in the server measurement")
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed to one tlake run")
    p.add_argument(
        "--merge",
        action="store_true",
        help="keep the earlier result's rows of the cases not run now (their ratios with new rows are refused)",
    )


def size_and_delays(args: Any, sizes: dict[str, dict[str, int]]) -> tuple[dict[str, int], list[float]]:
    """The lakehouse size of ``--scale`` with ``--tables/--versions/--orphans`` over it (also
    set back as ``args.orphans``), and the ``--delays`` in ms."""
    size = dict(sizes[args.scale])
    for k in ("tables", "versions", "orphans"):
        if getattr(args, k) is not None:
            size[k] = getattr(args, k)
    args.orphans = size["orphans"]
    return size, [float(x) for x in args.delays.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    args = parse_args("objstore", argv, _extra)
    size, delays = size_and_delays(args, SIZES)
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    executions = [e.strip() for e in args.executions.split(",") if e.strip()]
    for j in jobs:
        if j not in JOBS:
            raise SystemExit(f"unknown job {j!r} (choose from {', '.join(JOBS)})")
    for e in executions:
        if e not in EXECUTIONS:
            raise SystemExit(f"unknown execution {e!r} (choose from {', '.join(EXECUTIONS)})")

    from bench.generator import generate
    from bench.objstore import ensure_s3s, latency_store

    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    binary = ensure_s3s()
    t_all = time.perf_counter()
    print(
        f"run {run_id}: {size['tables']} tables, {size['versions']} versions, {size['orphans']} orphans; "
        f"delays {delays} ms; s3s-fs {binary}",
        flush=True,
    )
    job_rows: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    with scratch_dir("objstore", keep=args.keep) as d:
        source = d / "lh-src"
        gen = generate(
            str(source), tables=size["tables"], versions=size["versions"], order=16, node_max_bytes=16 * 1024, seed=7
        )
        files, nbytes = _count_files(source)
        print(f"lakehouse: {files} files, {nbytes / 1e6:.1f} MB, built in {gen['seconds']:.1f} s", flush=True)
        work = d / "runs"
        work.mkdir()
        with latency_store(d / "s3", 0.0, binary=binary, log_path=d / "s3s.log") as store:
            _restore_lakehouse(store, source)
            _check_listing(store, source)
            srv_rows = server_rows(store, run_id, args.requests, delays)
            print_table(srv_rows, SERVER_COLUMNS)
            for delay in delays:
                for job in jobs:
                    for execution in executions:
                        r = _run_job(store, run_id, delay, job, execution, args, source, work)
                        job_rows.append(r["row"])
                        details.append(r["detail"])
                        x = r["row"]
                        print(
                            f"{delay:g} ms {job} {execution}: {x['wall_s']:.1f} s, {x['requests']} requests"
                            + ("" if x["ok"] else f"  FAILED: {x['error']}"),
                            flush=True,
                        )
        if args.keep:
            print(f"kept {d}")

    suffix = "" if args.scale == "small" else f"_{args.scale}"
    if args.merge:
        job_rows = _merged(job_rows, RESULTS_DIR / f"objstore{suffix}.json")
    ratio_runs: dict[str, str] = {}
    ratios, refused = placement_ratios(job_rows, ratio_runs)
    server_ratios = _server_ratios(srv_rows)
    print()
    print_table(job_rows, ["run_id", *JOB_COLUMNS] if args.merge else JOB_COLUMNS)
    print()
    for k, v in {**ratios, **server_ratios}.items():
        print(f"{k}: {v}")
    for r in refused:
        print(f"REFUSED {r}")
    params = {
        **size,
        "files": files,
        "bytes": nbytes,
        "delays_ms": delays,
        "master": args.master,
        "run_id": run_id,
        "s3s_fs": str(binary),
        "generator": {k: gen[k] for k in ("tables", "versions", "nodes", "tree_height")},
    }
    notes = [
        "wall_s: the whole tlake process, Spark's start included (spark_start_s of it when a phase ran on Spark). "
        "phases: the job's own seconds by phase (some overlap: the orphans listing runs beside the walk). "
        "placed: where each phase ran (l: driver, d: executors). requests, get..delete, errors: counted by the "
        "proxy for the driver and the executors together. server_ms_per_req: mean time the server took per "
        "request (last byte forwarded to last byte of the answer), the added delay excluded; it includes the time "
        "the server waits for a CPU, as the executors' JVMs and Python workers share the same cores. "
        "proxy_lag_ms: how late the proxy's own loop ran on average (its measurements are that much inflated).",
        "Every ratio compares two rows of the same run (run_id); ratios across runs are refused.",
        f"load_1m: the machine's load average when the run started ({os.cpu_count()} cores); other work on the "
        "machine slows Spark's start above all.",
        *[f"refused: {r}" for r in refused],
    ]
    write_result(
        "objstore",
        "Object store with latency: walk, export, orphans by placement",
        job_rows,
        ratios,
        scale=args.scale,
        description=__doc__.split("\n\n")[1],
        params=params,
        columns=JOB_COLUMNS,
        notes=notes,
        seconds=time.perf_counter() - t_all,
        ratio_runs=ratio_runs,
    )
    write_result(
        "objstore_server",
        "Object store with latency: the server's own share",
        srv_rows,
        server_ratios,
        scale=args.scale,
        module="objstore",
        description=__doc__.split("\n\n")[2],
        params={"run_id": run_id},
        columns=SERVER_COLUMNS,
        notes=[
            "ms_per_request: one client thread, boto3 (its own CPU included). server_ms: measured by "
            "the proxy (request forwarded -> answer received), so the proxy rows say what the server "
            "itself costs. s3s-fs answers a LIST page by walking the whole bucket folder."
        ],
    )
    detail_path = RESULTS_DIR / f"objstore{suffix}_runs.json"
    detail_path.write_text(json.dumps({"run_id": run_id, "runs": details}, indent=1, default=str) + "\n")
    return 0 if all(r["ok"] for r in job_rows if r["run_id"] == run_id) else 1


def _server_ratios(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Per op, one thread: ms a request through the proxy at 0 ms / straight to s3s-fs, and the
    server's share of a request through the proxy at each delay."""

    def t(row: dict[str, Any]) -> Timing:
        return Timing(row["run_id"], f"{row['target']} {row['delay_ms']:g} ms {row['op']}", row["ms_per_request"])

    seq = [r for r in rows if r["threads"] == 1]
    out: dict[str, float | None] = {}
    for op in ("HEAD", "GET", "LIST"):
        direct = next((r for r in seq if r["target"] != "proxy" and r["op"] == op), None)
        zero = next((r for r in seq if r["target"] == "proxy" and r["delay_ms"] == 0 and r["op"] == op), None)
        if direct and zero:
            out[f"{op}, one thread: ms a request via the proxy at 0 ms / straight to s3s-fs"] = round(
                same_run_ratio(t(zero), t(direct)), 3
            )
        for r in seq:
            if r["target"] == "proxy" and r["delay_ms"] > 0 and r["op"] == op and r["server_ms"] is not None:
                server = Timing(r["run_id"], f"server {op}", r["server_ms"])
                out[f"{op} at {r['delay_ms']:g} ms, one thread: server's time / the client's whole request"] = round(
                    same_run_ratio(server, t(r)), 3
                )
    return out


def _merged(new_rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """New rows plus the earlier result's rows of the cases not measured now."""
    try:
        old = json.loads(path.read_text()).get("rows") or []
    except (OSError, json.JSONDecodeError):
        return new_rows
    have = {(r["delay_ms"], r["job"], r["execution"]) for r in new_rows}
    # A kept row keeps its own run; its commit is unknown when it was written before rows had one.
    kept = [{"commit": None, **r} for r in old if (r.get("delay_ms"), r.get("job"), r.get("execution")) not in have]
    return kept + new_rows


if __name__ == "__main__":
    raise SystemExit(main())
