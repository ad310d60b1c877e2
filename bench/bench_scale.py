"""Maintenance jobs at scale, end to end as processes: walk, orphans and export of lakehouses of
~1k to ~1M files, in every execution mode, against single-process peers.

Each lakehouse of the ladder (T tables, V versions) is built once through the public Python API
(``../shared/acceptance/lib/mklh.py``: T tables in transactions of 500 creates, then V
single-table alters; cached under ``bench/results/tmp/scale/``) and then measured as a user runs
the tools: the wall time of one process each, Spark start included:

* **walk**: ``tlake --no-audit walk --json`` with ``--execution auto``, ``local``,
  ``distributed`` (classic Spark, ``local[2]``) and ``distributed`` under Spark Connect
  (``--spark-conf spark.api.mode=connect``, a local Connect server), against ``../shared/acceptance/lib/tlwalk.py``, an
  independent serial pyarrow walk of every version written from the spec;
* **orphans**: ``tlake --no-audit orphans --older-than 1d --unsafe-min-age --json`` with N old,
  format-owned orphan files planted under the hash prefixes (N = 10% of the lakehouse's files),
  against delta-rs ``vacuum(full=True)`` of N untracked files in a Delta table (``../shared/acceptance/lib/peer_vacuum.py``);
* **export**: ``tlake --no-audit export --name x --target DIR --full`` of the latest version
  against ``cp -r`` of the whole lakehouse folder (bytes/s of each).

Memory: ``driver_mb`` is the peak RSS (``VmHWM``) of the tlake Python process itself,
``jvm_mb`` the peak RSS of the Spark JVM (the driver's child; under Spark Connect the local
Connect server), ``workers_mb`` the largest sum of Spark's Python workers seen at once, all
sampled from ``/proc`` every 0.25 s; ``tree_max_mb`` is ``wait4``'s ``ru_maxrss`` (the largest
single process of the tree). Per-phase seconds come from each job's own JSON result
(``seconds``, ``details.execution``, ``details.reachable_walk.levels``).

    python -m bench.bench_scale [--scale small|large] [--sizes 1000:100,20000:200] [--merge]
        [--walk-modes auto,local,distributed,connect] [--jobs walk,orphans,export] [--keep]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    REPO_ROOT,
    RESULTS_DIR,
    RUN_ID,
    TMP_DIR,
    commit,
    one_run,
    parse_args,
    ratio,
    run_of,
    write_result,
)

PEERS = Path(os.environ.get("TLAKE_PEERS_DIR", "/work/shared/acceptance/lib"))
PY = sys.executable
TLAKE = str(Path(PY).with_name("tlake"))
NAME = "scale"

# (tables, versions): mklh's file count is about tables + 2.2 x versions + nodes.
LADDERS = {
    "small": [(1000, 100), (20_000, 200)],
    "large": [(1000, 100), (20_000, 200), (200_000, 2000), (1_000_000, 10_000)],
}
WALK_MODES = {
    "auto": ["--execution", "auto"],
    "local": ["--execution", "local"],
    "distributed": ["--execution", "distributed"],
    "connect": ["--execution", "distributed", "--spark-conf", "spark.api.mode=connect"],
}
OLD = time.time() - 40 * 86_400


def _extra(p: Any) -> None:
    p.add_argument("--sizes", default=None, help="ladder as TABLES:VERSIONS,... (default: by --scale)")
    p.add_argument("--jobs", default="walk,orphans,export")
    p.add_argument("--walk-modes", default="auto,local,distributed,connect")
    p.add_argument("--orphan-modes", default="auto", help="execution modes of the orphans job")
    p.add_argument("--export-modes", default="auto", help="execution modes of the export job")
    p.add_argument("--orphans-fraction", type=float, default=0.1, help="planted orphans / lakehouse files")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per measured process")
    p.add_argument("--export-timeout", type=float, default=None, help="seconds per export process (default --timeout)")
    p.add_argument("--lakehouses", default=str(TMP_DIR / "scale"), help="cache of the generated lakehouses")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="drop the rows of the existing result file (default: keep those of the (size, job, tool) not re-measured)",
    )
    p.add_argument("--report-only", action="store_true", help="recompute the analysis of the stored rows only")
    p.add_argument("--merge", action="store_true", help=argparse.SUPPRESS)  # the default; kept for old commands


# ---- process measurement ------------------------------------------------------------------------
def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            pass
    return out


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def measure(
    cmd: list[str], timeout: float, env: dict[str, str] | None = None, cwd: str | None = None
) -> dict[str, Any]:
    """Run `cmd` to completion: wall seconds, exit status, stdout, stderr tail and peak memory
    (MiB) of the process itself, its JVM descendants and its other descendants."""
    out_f = tempfile.TemporaryFile()
    err_f = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=env, cwd=cwd)
    driver_kb = jvm_kb = workers_kb = 0
    jvm_hwm: dict[int, int] = {}
    rusage = None
    status = None
    timed_out = False
    while True:
        pid, st, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            status, rusage = st, ru
            break
        if time.perf_counter() - t0 > timeout:
            p.kill()  # the tlake process only: its JVM exits with it
            timed_out = True
            _, status, rusage = os.wait4(p.pid, 0)
            break
        driver_kb = max(driver_kb, _status_kb(p.pid, "VmHWM"))
        stack, others = _children(p.pid), 0
        while stack:
            c = stack.pop()
            stack += _children(c)
            if _comm(c) == "java":
                jvm_hwm[c] = max(jvm_hwm.get(c, 0), _status_kb(c, "VmHWM"))
            else:
                others += _status_kb(c, "VmRSS")
        jvm_kb = max(jvm_kb, sum(jvm_hwm.values()))
        workers_kb = max(workers_kb, others)
        time.sleep(0.25)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status) if status is not None else -9
    out_f.seek(0)
    err_f.seek(0)
    stdout = out_f.read().decode(errors="replace")
    stderr = err_f.read().decode(errors="replace")
    return {
        "seconds": wall,
        "rc": p.returncode,
        "timed_out": timed_out,
        "stdout": stdout,
        "stderr_tail": stderr[-3000:],
        "driver_mb": round(driver_kb / 1024, 1) if driver_kb else None,
        "jvm_mb": round(jvm_kb / 1024, 1) if jvm_kb else None,
        "workers_mb": round(workers_kb / 1024, 1) if workers_kb else None,
        "tree_max_mb": round(rusage.ru_maxrss / 1024, 1) if rusage else None,
    }


def job_json(stdout: str) -> dict[str, Any] | None:
    """The job's JSON result from the CLI's stdout (anything before the first ``{`` ignored)."""
    i = stdout.find("{")
    while i >= 0:
        try:
            doc, _ = json.JSONDecoder().raw_decode(stdout[i:])
            if isinstance(doc, dict) and "job" in doc:
                return doc
        except json.JSONDecodeError:
            pass
        i = stdout.find("{", i + 1)
    return None


# ---- lakehouses ---------------------------------------------------------------------------------
def tree_size(root: Path) -> tuple[int, int]:
    n = b = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            n += 1
            try:
                b += os.stat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return n, b


def ensure_lakehouse(cache: Path, tables: int, versions: int) -> tuple[Path, dict[str, Any]]:
    """The cached lakehouse of (tables, versions), built by mklh.py (public API) when missing."""
    lh = cache / f"lh-{tables}-{versions}"
    meta = cache / f"lh-{tables}-{versions}.gen.json"
    if lh.is_dir() and meta.exists():
        return lh, json.loads(meta.read_text())
    if lh.is_dir() and not meta.exists():  # built outside this script (same command): no timing
        info = {"generator": "mklh.py (prebuilt)", "tables": tables, "versions": versions, "seconds": None}
        meta.write_text(json.dumps(info))
        return lh, info
    cache.mkdir(parents=True, exist_ok=True)
    part = cache / f"lh-{tables}-{versions}.partial"
    shutil.rmtree(part, ignore_errors=True)
    t0 = time.perf_counter()
    if (PEERS / "mklh.py").exists():
        subprocess.run(
            [PY, str(PEERS / "mklh.py"), str(part), str(tables), str(versions), "32"], check=True, capture_output=True
        )
        gen = "mklh.py"
    else:  # no acceptance peers here: the bench generator (same shape knobs)
        from bench.generator import generate

        generate(str(part), tables=tables, versions=versions, order=32, node_max_bytes=16 * 1024, seed=1)
        gen = "bench.generator"
    info = {"generator": gen, "tables": tables, "versions": versions, "seconds": round(time.perf_counter() - t0, 1)}
    part.rename(lh)
    meta.write_text(json.dumps(info))
    return lh, info


def plant(root: Path, n: int) -> None:
    """N old orphans under the spec's hash prefixes (peer_scale.py's plant, same names)."""
    sys.path.insert(0, str(PEERS))
    try:
        import peer_scale

        peer_scale.plant(str(root), n)
        return
    except ImportError:
        pass
    from trinitylake.format.paths import hashed_path

    for i in range(n):
        p = root / hashed_path(f"node-00000000-0000-4000-8000-{i:012d}.arrow")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
        os.utime(p, (OLD, OLD))


# ---- one size -----------------------------------------------------------------------------------
def _phases(doc: dict[str, Any] | None) -> dict[str, Any]:
    if not doc:
        return {}
    det = doc.get("details") or {}
    walk = det.get("reachable_walk") or {}
    return {
        "seconds": doc.get("seconds"),
        "execution": det.get("execution"),
        "levels": walk.get("levels"),
        "spark": det.get("spark"),
        "counts": doc.get("counts"),
        "bytes": doc.get("bytes"),
    }


def _where(doc: dict[str, Any] | None) -> str:
    ex = ((doc or {}).get("details") or {}).get("execution") or {}
    places = sorted({v.get("where", "?") for v in ex.values() if isinstance(v, dict)})
    return "+".join(places)


def _spark_s(doc: dict[str, Any] | None) -> float | None:
    sp = ((doc or {}).get("details") or {}).get("spark") or {}
    return sp.get("session_seconds") if sp.get("started") else 0.0


def _tlake_row(
    base: dict[str, Any],
    job: str,
    tool: str,
    m: dict[str, Any],
    doc: dict[str, Any] | None,
    items: int | None,
    nbytes: int | None = None,
) -> dict[str, Any]:
    ok = m["rc"] == 0 and doc is not None and doc.get("status") in ("succeeded", None)
    return {
        **base,
        "job": job,
        "tool": tool,
        "seconds": m["seconds"],
        "ok": ok,
        "items": items,
        "items_per_s": items / m["seconds"] if items and m["seconds"] else None,
        "mb_per_s": nbytes / m["seconds"] / 2**20 if nbytes and m["seconds"] else None,
        "spark_s": _spark_s(doc),
        "where": _where(doc),
        "driver_mb": m["driver_mb"],
        "jvm_mb": m["jvm_mb"],
        "workers_mb": m["workers_mb"],
        "tree_max_mb": m["tree_max_mb"],
        "phases": _phases(doc),
        "error": None
        if ok
        else (f"timed out after {m['seconds']:.0f} s (killed); " if m.get("timed_out") else "")
        + (m["stderr_tail"][-600:] or str((doc or {}).get("error"))),
    }


def _peer_row(
    base: dict[str, Any],
    job: str,
    tool: str,
    seconds: float,
    items: int | None,
    nbytes: int | None = None,
    m: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    m = m or {}
    return {
        **base,
        "job": job,
        "tool": tool,
        "seconds": seconds,
        "ok": m.get("rc", 0) == 0,
        "items": items,
        "items_per_s": items / seconds if items and seconds else None,
        "mb_per_s": nbytes / seconds / 2**20 if nbytes and seconds else None,
        "spark_s": None,
        "where": "1 process",
        "driver_mb": m.get("driver_mb"),
        "jvm_mb": None,
        "workers_mb": None,
        "tree_max_mb": m.get("tree_max_mb"),
        "phases": extra or None,
        "error": None,
    }


def _log(row: dict[str, Any]) -> None:
    keys = ("files", "job", "tool", "seconds", "ok", "items", "where", "driver_mb", "jvm_mb")
    print(
        json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items() if k in keys}), flush=True
    )
    if row.get("error"):
        print("   error:", str(row["error"])[-400:], flush=True)


def measure_size(args: Any, cache: Path, tables: int, versions: int, env: dict[str, str]) -> list[dict[str, Any]]:
    lh, gen = ensure_lakehouse(cache, tables, versions)
    files, nbytes = tree_size(lh)
    base = {
        "size": f"{tables}t/{versions}v",
        "tables": tables,
        "versions": versions,
        "files": files,
        "lakehouse_mb": round(nbytes / 2**20, 1),
        "load_1m": round(os.getloadavg()[0], 2),  # other work on the (shared) machine when this size started
    }
    print(
        f"== {base['size']}: {files} files, {nbytes / 2**20:.0f} MiB (generated by {gen.get('generator')} "
        f"in {gen.get('seconds')} s)",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    jobs = {j.strip() for j in args.jobs.split(",") if j.strip()}
    common = [TLAKE, "--lakehouse", str(lh), "--no-audit"]
    t_out = args.timeout
    work = Path(tempfile.mkdtemp(prefix=f"scale-{tables}-", dir=cache))
    try:
        if "walk" in jobs:
            m = measure([PY, str(PEERS / "tlwalk.py"), str(lh)], t_out, env)
            ref = json.loads(m["stdout"].strip().splitlines()[-1]) if m["rc"] == 0 else {}
            rows.append(
                _peer_row(
                    base,
                    "walk",
                    "peer: tlwalk.py (serial pyarrow)",
                    m["seconds"],
                    ref.get("files"),
                    m=m,
                    inner_seconds=ref.get("seconds"),
                )
            )
            _log(rows[-1])
            for mode in [x.strip() for x in args.walk_modes.split(",") if x.strip()]:
                m = measure([*common, "walk", "--master", args.master, "--json", *WALK_MODES[mode]], t_out, env)
                doc = job_json(m["stdout"])
                rows.append(
                    _tlake_row(
                        base, "walk", f"tlake {mode}", m, doc, ((doc or {}).get("counts") or {}).get("reachable")
                    )
                )
                _log(rows[-1])
        if "orphans" in jobs:
            n_orph = max(1000, int(files * args.orphans_fraction))
            for mode in [x.strip() for x in args.orphan_modes.split(",") if x.strip()]:
                plant(lh, n_orph)
                m = measure(
                    [
                        *common,
                        "orphans",
                        "--older-than",
                        "1d",
                        "--unsafe-min-age",
                        "--master",
                        args.master,
                        "--json",
                        "--execution",
                        mode,
                    ],
                    t_out,
                    env,
                )
                doc = job_json(m["stdout"])
                deleted = ((doc or {}).get("counts") or {}).get("deleted")
                row = _tlake_row(base, "orphans", f"tlake {mode}", m, doc, deleted)
                row["planted"] = n_orph
                if deleted is not None and deleted < n_orph:
                    row["ok"] = False
                    row["error"] = f"deleted {deleted} of {n_orph} planted orphans"
                rows.append(row)
                _log(row)
            m = measure([PY, str(PEERS / "peer_vacuum.py"), str(n_orph), str(work / "vac")], t_out, env)
            v = json.loads(m["stdout"].strip().splitlines()[-1]) if m["rc"] == 0 else {}
            rows.append(
                _peer_row(
                    base,
                    "orphans",
                    "peer: delta-rs vacuum(full=True)",
                    v.get("vacuum_s") or 0.0,
                    v.get("vacuumed"),
                    m=None,
                    process_s=round(m["seconds"], 2),
                    find_delete_s=v.get("find_delete_s"),
                )
            )
            rows[-1]["planted"] = n_orph
            _log(rows[-1])
        if "export" in jobs:
            m = measure(["cp", "-r", str(lh), str(work / "cp-copy")], t_out, env)
            rows.append(_peer_row(base, "export", "peer: cp -r (whole folder)", m["seconds"], files, nbytes, m=m))
            _log(rows[-1])
            shutil.rmtree(work / "cp-copy", ignore_errors=True)
            has_modes = (
                "--execution"
                in subprocess.run([TLAKE, "export", "--help"], capture_output=True, text=True, env=env).stdout
            )
            for mode in [x.strip() for x in args.export_modes.split(",") if x.strip()]:
                target = work / f"export-{mode}"
                name = f"x{int(time.time() * 1000)}"
                flags = ["--execution", mode] if has_modes else []
                m = measure(
                    [
                        *common,
                        "export",
                        "--name",
                        name,
                        "--target",
                        str(target),
                        "--full",
                        "--master",
                        args.master,
                        "--json",
                        *flags,
                    ],
                    args.export_timeout or t_out,
                    env,
                )
                doc = job_json(m["stdout"])
                n_exp, b_exp = tree_size(target) if target.exists() else (0, 0)
                tool = f"tlake {mode}" if has_modes else "tlake (Spark, before --execution)"
                rows.append(_tlake_row(base, "export", tool, m, doc, n_exp, b_exp))
                _log(rows[-1])
                shutil.rmtree(target, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    date = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    for r in rows:
        r.setdefault("planted", None)
        r["generator_s"] = gen.get("seconds")
        r["date"] = date
        # The rows of sizes not re-measured stay in the file: a ratio, a crossover or a fit pairs
        # rows of one run of one clean commit only (`same_run`, `analysis_run`).
        r["run_id"] = RUN_ID
        r["commit"] = commit()
    return rows


def same_run(a: dict[str, Any] | None, b: dict[str, Any] | None, refused: list[str], label: str) -> bool:
    """Whether a ratio of rows `a` and `b` may be printed: both measured, in one run (rows
    without a run id pair with nothing), on a clean tree. Otherwise the reason is added to
    `refused` (printed instead of the ratio)."""
    if a is None or b is None:
        return False
    remeasure = f"re-measure both with `python -m bench.bench_scale --sizes {a['tables']}:{a['versions']}`"
    undated = [r["tool"] for r in (a, b) if run_of(r) is None]
    if undated:
        refused.append(
            f"{label}: not printed, {' and '.join(undated)} {UNDATED} "
            f"(which rows were measured together is unknown); {remeasure}"
        )
        return False
    if run_of(a) != run_of(b):
        refused.append(
            f"{label}: not printed, its sides come from different runs ({a['tool']}: {run_of(a)}; "
            f"{b['tool']}: {run_of(b)}); {remeasure}"
        )
        return False
    dirty = [str(r.get("commit")) for r in (a, b) if str(r.get("commit") or "").endswith("+dirty")]
    if dirty:
        refused.append(f"{label}: not printed, measured on a tree with uncommitted changes ({dirty[0]})")
        return False
    return True


def analysis_run(rows: list[dict[str, Any]]) -> str | None:
    """The run the crossover and the fits come from: of the runs of a clean commit, the one
    whose ok walks cover the most sizes with both `local` and `distributed` (then the most
    sizes, then the latest). None when no row carries a run of a clean commit."""

    def score(run: str) -> tuple[int, int, str]:
        mine = [r for r in rows if run_of(r) == run and r["job"] == "walk" and r.get("ok")]
        both = {
            f
            for f in {r["files"] for r in mine}
            if {"tlake local", "tlake distributed"} <= {r["tool"] for r in mine if r["files"] == f}
        }
        return len(both), len({r["files"] for r in mine}), run

    runs = {run_of(r) for r in rows if not str(r.get("commit") or "+dirty").endswith("+dirty")} - {None}
    return max(runs, key=score) if runs else None


# ---- analysis -----------------------------------------------------------------------------------
def fit_loglog(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least squares of log y = a + b log x: (a, b), or None with fewer than 2 points."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x and y and x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if not sxx:
        return None
    b = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
    return my - b * mx, b


def fit_linear(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least squares of y = a + b x."""
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if not sxx:
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - b * mx, b


def level_points(
    rows: list[dict[str, Any]], tool: str, skip_first: bool = False, only_first: bool = False
) -> list[tuple[int, float]]:
    """(node files, seconds) of the walk levels of `tool`'s runs (optionally without, or only,
    each run's first level)."""
    pts = []
    for r in rows:
        if r["job"] == "walk" and r["tool"] == tool and r.get("ok"):
            levels = [
                lv
                for lv in (r.get("phases") or {}).get("levels") or []
                if lv.get("frontier") and lv.get("seconds") is not None
            ]
            if skip_first:
                levels = levels[1:]
            if only_first:
                levels = levels[:1]
            pts += [(int(lv["frontier"]), float(lv["seconds"])) for lv in levels]
    return pts


def crossover(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the distributed walk starts beating the local one: per level (node files of one
    level, linear cost models fitted to every level measured) and per job (wall ratio vs files,
    log-log fit).

    A distributed run's first level also pays the session's first job (JIT, Python workers):
    it is left out of the per-level fit and reported as ``first_job_extra_s`` (its excess over
    the fitted line), next to the session start; ``level_crossover_nodes`` is the level size
    above which executors win once Spark is up, ``cold_crossover_nodes`` the size above which
    a job's only big level pays for starting Spark too.
    """
    out: dict[str, Any] = {"run_id": one_run(rows, "a crossover of walk rows")}
    loc = level_points(rows, "tlake local")
    dist = level_points(rows, "tlake distributed", skip_first=True)
    firsts = level_points(rows, "tlake distributed", only_first=True)
    fl = fit_linear([p[0] for p in loc], [p[1] for p in loc]) if loc else None
    fd = fit_linear([p[0] for p in dist], [p[1] for p in dist]) if dist else None
    sessions = [
        r["spark_s"]
        for r in rows
        if r["job"] == "walk" and r["tool"] == "tlake distributed" and r.get("ok") and r.get("spark_s")
    ]
    if fl and fd:
        out["level_local_s"] = {"fixed": round(fl[0], 4), "per_node_us": round(fl[1] * 1e6, 2), "levels": len(loc)}
        out["level_distributed_s"] = {
            "fixed": round(fd[0], 4),
            "per_node_us": round(fd[1] * 1e6, 2),
            "levels": len(dist),
        }
        first_extra = sorted(s - (fd[0] + fd[1] * n) for n, s in firsts)[len(firsts) // 2] if firsts else 0.0
        session = sorted(sessions)[len(sessions) // 2] if sessions else 0.0
        out["first_job_extra_s"] = round(first_extra, 2)
        out["session_start_s"] = round(session, 2)
        if fl[1] > fd[1]:
            out["level_crossover_nodes"] = max(0, round((fd[0] - fl[0]) / (fl[1] - fd[1])))
            out["cold_crossover_nodes"] = max(0, round((fd[0] + first_extra + session - fl[0]) / (fl[1] - fd[1])))
        else:
            out["level_crossover_nodes"] = None  # executors never win per node on this machine
    # Whole walk, linear in files over the big sizes (fixed costs dominate the small ones):
    # seconds = fixed + per_file x files for each mode; executors win above the crossing, if any.
    lin = {}
    for tool in ("tlake local", "tlake distributed"):
        pts = [(r["files"], r["seconds"]) for r in rows if r["job"] == "walk" and r["tool"] == tool and r.get("ok")]
        big = [p for p in pts if p[0] >= 100_000]
        use = big if len(big) >= 2 else pts
        f = fit_linear([p[0] for p in use], [p[1] for p in use])
        if f:
            lin[tool] = {"fixed_s": round(f[0], 2), "per_file_us": round(f[1] * 1e6, 2), "sizes": len(use)}
    if len(lin) == 2:
        lo, di = lin["tlake local"], lin["tlake distributed"]
        out["job_linear"] = {"local": lo, "distributed": di}
        if lo["per_file_us"] > di["per_file_us"]:
            out["job_linear"]["crossover_files"] = round(
                (di["fixed_s"] - lo["fixed_s"]) / ((lo["per_file_us"] - di["per_file_us"]) / 1e6)
            )
        else:
            out["job_linear"]["crossover_files"] = None
            out["job_linear"]["limit_ratio"] = round(di["per_file_us"] / lo["per_file_us"], 2)
    by_size: dict[int, dict[str, float]] = {}
    for r in rows:
        if r["job"] == "walk" and r.get("ok"):
            by_size.setdefault(r["files"], {})[r["tool"]] = r["seconds"]
    pairs = sorted(
        (f, d["tlake distributed"] / d["tlake local"])
        for f, d in by_size.items()
        if "tlake local" in d and "tlake distributed" in d
    )
    out["job_ratio_distributed_over_local"] = [(f, round(x, 3)) for f, x in pairs]
    fj = fit_loglog([p[0] for p in pairs], [p[1] for p in pairs])
    if fj:
        a, b = fj
        out["job_ratio_fit"] = {"a": round(a, 4), "slope": round(b, 4)}
        out["job_crossover_files"] = round(math.exp(-a / b)) if b < 0 else None
    return out


def extrapolate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Seconds vs files of every (job, tool), log-log over the sizes of 10k files or more, and
    the fitted seconds at 1M files: from the rows of one run only (MixedRunsError otherwise)."""
    one_run(rows, "a fit of seconds over sizes")
    out = {}
    for job, tool in sorted({(r["job"], r["tool"]) for r in rows}):
        pts = [(r["files"], r["seconds"]) for r in rows if r["job"] == job and r["tool"] == tool and r.get("ok")]
        fit = fit_loglog([p[0] for p in pts if p[0] >= 10_000], [p[1] for p in pts if p[0] >= 10_000])
        if fit:
            out[f"{job} / {tool}"] = {
                "largest_ok_files": max(p[0] for p in pts),
                "slope": round(fit[1], 3),
                "seconds_at_1M": round(math.exp(fit[0]) * 1e6 ** fit[1], 1),
            }
    return out


UNDATED = "measured before rows carried a run id"


def refusal_notes(refused: list[str]) -> list[str]:
    """One note per ratio refused across runs or on a dirty tree; the ratios refused because
    their rows carry no run id, counted per size in one note (`runs_notes` says why)."""
    undated: dict[str, int] = {}
    for x in refused:
        if UNDATED in x:
            size = x.split(":", 1)[0].rsplit(", ", 1)[-1]
            undated[size] = undated.get(size, 0) + 1
    out = [f"REFUSED: {x}" for x in refused if UNDATED not in x]
    if undated:
        out.append(
            "Not printed, their rows carrying no run id: "
            + "; ".join(f"{n} ratio{'s' if n > 1 else ''} at {size}" for size, n in undated.items())
            + "."
        )
    return out


def runs_notes(rows: list[dict[str, Any]], run: str | None) -> list[str]:
    """Which rows come from which run, and why the older ones pair with nothing."""
    out = []
    by_run: dict[str | None, list[dict[str, Any]]] = {}
    for r in rows:
        by_run.setdefault(run_of(r), []).append(r)
    for rid, rs in sorted(by_run.items(), key=lambda x: x[0] or ""):
        sizes = ", ".join(f"{f:,}" for f in sorted({r["files"] for r in rs}))
        if rid is None:
            dates = sorted({str(r.get("date"))[:10] for r in rs if r.get("date")})
            out.append(
                f"{len(rs)} rows ({sizes} files; measured {', '.join(dates)}) carry no run id: they were measured "
                "before rows carried one, in runs of different days, and pair with nothing (no ratio, crossover "
                "or fit uses them; re-measure a size with `--sizes TABLES:VERSIONS` for its ratios)."
            )
        else:
            commits = ", ".join(sorted({str(r.get("commit")) for r in rs}))
            used = " (the crossover and the fits come from this run)" if rid == run else ""
            out.append(f"Run `{rid}` (commit {commits}): {len(rs)} rows at {sizes} files{used}.")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(NAME, argv, _extra)
    t_all = time.perf_counter()
    if args.sizes:
        ladder = [tuple(int(x) for x in s.split(":")) for s in args.sizes.split(",") if s.strip()]
    else:
        ladder = LADDERS[args.scale]
    cache = Path(args.lakehouses)
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", PY)  # Spark Connect's workers need the venv's pyarrow
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if x)
    # One result file whatever the scale (--scale only picks the default ladder): rows of sizes not
    # measured this time are kept, each with its own date, so the big sizes survive a small run.
    name_file = RESULTS_DIR / f"{NAME}.json"
    if args.report_only:
        stored = json.loads(name_file.read_text())
        write_rows(args, stored.get("rows") or [], [], ladder, stored.get("seconds") or 0.0)
        return 0
    new: list[dict[str, Any]] = []
    for i, (tables, versions) in enumerate(ladder):  # the result is written after each size
        new += measure_size(args, cache, tables, versions, env)  # lakehouses stay cached: minutes to rebuild
        keep_old = not (args.fresh and i == 0) and name_file.exists()  # read now: another run may have written
        old = (json.loads(name_file.read_text()).get("rows") or []) if keep_old else []
        write_rows(args, old, new, ladder, time.perf_counter() - t_all)
    return 0


def write_rows(
    args: Any, old: list[dict[str, Any]], new: list[dict[str, Any]], ladder: list[tuple[int, ...]], secs: float
) -> None:
    measured = {(r["tables"], r["versions"], r["job"], r["tool"]) for r in new}
    # A kept row keeps its run; one written before rows carried a run id gets none (not this run's).
    rows = [
        {"run_id": None, "commit": None, **r}
        for r in old
        if (r["tables"], r["versions"], r["job"], r["tool"]) not in measured
    ]
    rows += [dict(r) for r in new]
    # One file count per lakehouse (each run adds a few job outputs): the smallest one seen.
    first: dict[tuple[int, int], int] = {}
    for r in rows:
        first[(r["tables"], r["versions"])] = min(r["files"], first.get((r["tables"], r["versions"]), r["files"]))
    for r in rows:
        r["files"] = first[(r["tables"], r["versions"])]
    rows.sort(key=lambda r: (r["files"], ["walk", "orphans", "export"].index(r["job"]), r["tool"]))
    report(args, rows, sorted({(r["tables"], r["versions"]) for r in rows}), secs)


def _best_row(rows: list[dict[str, Any]], files: int, job: str, tool: str) -> dict[str, Any] | None:
    for r in rows:
        if r["files"] == files and r["job"] == job and r["tool"] == tool and r.get("ok"):
            return r
    return None


def crossover_text(c: dict[str, Any]) -> str:
    if not c.get("run_id"):
        return (
            "Crossover of `--execution distributed` over `local` (walk): not computed, "
            + (c.get("refused") or "no run of a clean commit measured both at two sizes")
            + "."
        )
    out = f"Crossover of `--execution distributed` over `local` (walk), from run `{c['run_id']}` only. "
    if c.get("level_local_s") and c.get("level_distributed_s"):
        lo, di = c["level_local_s"], c["level_distributed_s"]
        out += (
            f"Per level (node files of one walk level, linear fits): on the driver {lo['fixed']:.2f} s + "
            f"{lo['per_node_us']:.0f} µs per node file ({lo['levels']} levels measured); on the executors, Spark "
            f"already up, {di['fixed']:.2f} s + {di['per_node_us']:.0f} µs per node file ({di['levels']} levels; each "
            f"run's first level is left out: it costs {c.get('first_job_extra_s')} s more, the session's first job), "
            f"after {c.get('session_start_s')} s of session start. "
        )
        if c.get("level_crossover_nodes") is not None:
            out += (
                f"Executors win per level above ~{c['level_crossover_nodes']:,} node files once Spark is up, and "
                f"above ~{c.get('cold_crossover_nodes', 0):,} when that level must also start Spark. "
            )
        else:
            out += (
                "Executors never win per level on this machine: their cost per node file is not lower than the "
                "driver's (2 cores, which the driver's threads already use). "
            )
    jl = c.get("job_linear")
    if jl:
        lo, di = jl["local"], jl["distributed"]
        out += (
            f"Whole walk, linear fits of wall seconds over the {lo['sizes']} biggest sizes: local {lo['fixed_s']} s + "
            f"{lo['per_file_us']} µs per lakehouse file, distributed {di['fixed_s']} s + {di['per_file_us']} µs per "
            "file: "
        )
        out += (
            f"distributed wins above ~{jl['crossover_files']:,} files. "
            if jl.get("crossover_files")
            else f"distributed never catches up on this machine (the ratio tends to {jl.get('limit_ratio')}×). "
        )
    pairs = c.get("job_ratio_distributed_over_local") or []
    if pairs:
        out += "Whole walk, distributed / local wall seconds: " + ", ".join(f"{f:,} files {x}×" for f, x in pairs)
        fit = c.get("job_ratio_fit")
        if fit:
            out += f" (log-log slope {fit['slope']}"
            out += (
                f", which would reach 1 at ~{c['job_crossover_files']:,} files; a power law over sizes where fixed "
                "costs dominate, so the linear model above is the better guide)."
                if c.get("job_crossover_files")
                else ": the ratio does not fall with size, no crossover in reach)."
            )
        else:
            out += "."
    return out


def extrapolation_text(extrap: dict[str, Any], largest: int | None, run: str | None = None) -> str:
    if not extrap:
        return (
            "No fit of seconds vs files: "
            + (f"run `{run}` measured fewer than two sizes of 10k files or more" if run else "no run of a clean commit")
            + " (fits use the rows of one run only)."
        )
    at = "at 1M files" + (" (extrapolated)" if largest and largest < 1_000_000 else " (fitted)")
    return (
        f"Largest lakehouse measured in run `{run}`: {largest:,} files. Seconds ∝ files^slope, fitted over that "
        f"run's sizes of 10k files or more, and the fitted seconds {at}: "
        + "; ".join(
            f"{k}: slope {v['slope']}, {v['seconds_at_1M']:,} s"
            + (
                f" (extrapolated from {v['largest_ok_files']:,} files: its bigger runs failed or timed out)"
                if v.get("largest_ok_files", 10**7) < 1_000_000 <= (largest or 0)
                else ""
            )
            for k, v in extrap.items()
        )
        + "."
    )


def scale_ratios(rows: list[dict[str, Any]]) -> tuple[dict[str, float | None], dict[str, str], list[str]]:
    """The headline ratios per size, each of two rows of one run of a clean commit (`same_run`):
    (ratios, the run of each ratio, the ratios refused and why)."""
    sizes = sorted({r["files"] for r in rows})
    ratios: dict[str, float | None] = {}
    refused: list[str] = []
    runs: dict[str, str] = {}
    for f in sizes:
        lab = f"{f:,} files"
        peer_w = _best_row(rows, f, "walk", "peer: tlwalk.py (serial pyarrow)")
        for mode in ("auto", "local", "distributed", "connect"):
            w = _best_row(rows, f, "walk", f"tlake {mode}")
            label = f"walk seconds, tlake {mode} / tlwalk.py, {lab}"
            if same_run(w, peer_w, refused, label) and w and peer_w:
                ratios[label] = ratio(w["seconds"], peer_w["seconds"])
                runs[label] = str(run_of(w))
        loc, dist = _best_row(rows, f, "walk", "tlake local"), _best_row(rows, f, "walk", "tlake distributed")
        label = f"walk seconds, tlake distributed / tlake local, {lab}"
        if same_run(dist, loc, refused, label) and loc and dist:
            ratios[label] = ratio(dist["seconds"], loc["seconds"])
            runs[label] = str(run_of(loc))
        vac = next((r for r in rows if r["files"] == f and r["tool"].startswith("peer: delta-rs")), None)
        orph = next(
            (
                r
                for r in rows
                if r["files"] == f and r["job"] == "orphans" and r["tool"] == "tlake auto" and r.get("ok")
            ),
            None,
        )
        label = f"orphans files/s, delta-rs vacuum / tlake auto (same number of orphans), {lab}"
        if same_run(vac, orph, refused, label) and vac and orph and vac["items_per_s"] and orph["items_per_s"]:
            ratios[label] = ratio(vac["items_per_s"], orph["items_per_s"])
            runs[label] = str(run_of(orph))
        cp = next((r for r in rows if r["files"] == f and r["tool"].startswith("peer: cp")), None)
        exp = next(
            (r for r in rows if r["files"] == f and r["job"] == "export" and r["tool"] == "tlake auto" and r.get("ok")),
            None,
        )
        label = f"export bytes/s, cp -r / tlake export auto, {lab}"
        if same_run(cp, exp, refused, label) and cp and exp and cp["mb_per_s"] and exp["mb_per_s"]:
            ratios[label] = ratio(cp["mb_per_s"], exp["mb_per_s"])
            runs[label] = str(run_of(exp))
    return ratios, runs, refused


def report(args: Any, rows: list[dict[str, Any]], ladder: list[tuple[int, ...]], secs: float) -> int:
    sizes = sorted({r["files"] for r in rows})
    ratios, ratio_runs, refused = scale_ratios(rows)
    # The crossover and the fits span sizes: all from one run (never a size of one run against
    # a size of another), the run `analysis_run` picks.
    run = analysis_run(rows)
    mine = [r for r in rows if run_of(r) == run]
    cross = crossover(mine) if run else {}
    extrap = extrapolate(mine) if run else {}
    largest = max(sizes) if sizes else None
    phase_notes = []
    for r in rows:
        if r["files"] == largest and r["tool"].startswith("tlake") and r.get("phases"):
            ph = r["phases"]
            ex = {k: (v.get("where"), v.get("items"), v.get("seconds")) for k, v in (ph.get("execution") or {}).items()}
            lv = [(x.get("depth"), x.get("frontier"), x.get("where"), x.get("seconds")) for x in ph.get("levels") or []]
            phase_notes.append(
                f"{r['job']} `{r['tool']}` at {largest:,} files: seconds {ph.get('seconds')}; "
                f"phases (where, items, s) {ex}" + (f"; walk levels (depth, nodes, where, s) {lv}" if lv else "")
            )
    notes = [
        "Wall seconds of one process each, Spark start included (`spark_s`: the session start inside it; 0 when "
        "the job never started Spark). `where`: placements of the job's phases (`details.execution`). "
        "`items`: reachable files (walk), orphans deleted (orphans), files copied (export).",
        "Peers: `../shared/acceptance/lib/tlwalk.py` and `../shared/acceptance/lib/peer_vacuum.py` (`TLAKE_PEERS_DIR`); the vacuum row's "
        "seconds are delta-rs's own `vacuum()` call inside its process (its files are planted first, untimed).",
        crossover_text(cross),
        extrapolation_text(extrap, max((r["files"] for r in mine), default=None), run),
        *phase_notes,
        *runs_notes(rows, run),
        *refusal_notes(refused),
    ]
    failed = [
        f"{r['job']} {r['tool']} at {r['files']:,} files: {str(r.get('error'))[-300:]}" for r in rows if not r.get("ok")
    ]
    notes += [f"FAILED: {x}" for x in failed]
    plots = [
        {
            "id": job,
            "x": "files",
            "ys": ["seconds"],
            "group": "tool",
            "where": {"job": job},
            "logx": True,
            "logy": True,
            "title": f"{job}: wall seconds vs lakehouse files",
            "xlabel": "files in the lakehouse",
            "ylabel": "seconds (one process, end to end)",
        }
        for job in ("walk", "orphans", "export")
        if any(r["job"] == job for r in rows)
    ]
    path = write_result(
        NAME,
        "Maintenance jobs at scale: walk, orphans, export per execution mode vs single-process peers",
        rows,
        ratios,
        scale="small",  # one file for every ladder (see main)
        description="\n\n".join(__doc__.split("\n\n")[1:4]),
        params={
            "ladder": [list(x) for x in ladder],
            "master": args.master,
            "orphans_fraction": args.orphans_fraction,
            "last_run_scale": args.scale,
        },
        columns=[
            "files",
            "job",
            "tool",
            "seconds",
            "ok",
            "items",
            "items_per_s",
            "mb_per_s",
            "spark_s",
            "where",
            "driver_mb",
            "jvm_mb",
            "workers_mb",
            "load_1m",
        ],
        notes=notes,
        plot=plots,
        seconds=secs,
        ratio_runs=ratio_runs,
    )
    doc = json.loads(path.read_text())  # the analysis, machine-readable, next to the rows
    doc["analysis"] = {"run_id": run, "crossover": cross, "extrapolation": extrap}
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return 0  # failures are recorded in the result (rows with ok = no, and notes)


if __name__ == "__main__":
    raise SystemExit(main())
