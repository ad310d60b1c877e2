"""Run the benchmarks and regenerate BENCHMARKS.md and the plots.

    python -m bench.run_all [--scale small|large] [--only format,txn] [--render-only]

Every ``bench/bench_<name>.py`` module is run in its own subprocess as ``main(["--scale", S])``
(a crash or a leak in one cannot affect the next); each writes ``bench/results/<name>.json``
(schema: `bench.common`). Then every result file present, including those of modules not run
this time, is rendered into ``BENCHMARKS.md`` at the repository root (one section per result,
with its machine and date and its ratios stated explicitly) and into PNG plots under
``bench/results/``. Exit status 1 when a benchmark failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import BENCH_DIR, REPO_ROOT, RESULTS_DIR, SCALES, load_results

BENCHMARKS_MD = REPO_ROOT / "BENCHMARKS.md"


# Benchmarks run only when named in --only: they need more than the virtualenv.
OPT_IN = {
    "objstore": "builds s3s-fs with cargo and takes tens of minutes (make bench-objstore)",
    "objstore_anchor": "builds s3s-fs and s5cmd and takes tens of minutes (make bench-objstore-anchor)",
}


def discover() -> list[str]:
    """Names of the benchmark modules (``bench_<name>.py``), sorted."""
    return sorted(p.stem[len("bench_") :] for p in BENCH_DIR.glob("bench_*.py"))


def run_one(name: str, scale: str, timeout: float | None, extra: list[str]) -> tuple[int, float]:
    code = (
        f"import sys; from bench.bench_{name} import main; "
        "rc = main(sys.argv[1:]); sys.exit(rc if isinstance(rc, int) else 0)"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if x)
    env.setdefault("PYTHONUNBUFFERED", "1")
    t0 = time.perf_counter()
    print(f"=== bench_{name} (--scale {scale})", flush=True)
    try:
        rc = subprocess.run(
            [sys.executable, "-c", code, "--scale", scale, *extra], cwd=REPO_ROOT, env=env, timeout=timeout
        ).returncode
    except subprocess.TimeoutExpired:
        print(f"!!! bench_{name} timed out after {timeout} s", flush=True)
        rc = 124
    secs = time.perf_counter() - t0
    print(f"=== bench_{name}: exit {rc} in {secs:.1f} s", flush=True)
    return rc, secs


# ---- rendering ---------------------------------------------------------------------------------
def fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 10_000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.1f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


#: Row keys every writer adds (bench.common.write_result): stated once per section, as the run
#: line, unless the rows come from several runs.
RUN_KEYS = ("run_id", "commit")


def columns_of(doc: dict[str, Any]) -> list[str]:
    cols = list(doc.get("columns") or [])
    if not cols:
        for r in doc.get("rows") or []:
            for k in r:
                if k not in cols and k not in RUN_KEYS:
                    cols.append(k)
    if len(runs_of(doc)) > 1:  # which rows pair with which: the run is a column
        cols += [k for k in RUN_KEYS if k not in cols]
    return cols


def runs_of(doc: dict[str, Any]) -> list[str | None]:
    """The runs of a result's rows, in first-seen order (None: rows written before rows had one)."""
    out: list[str | None] = []
    for r in doc.get("rows") or []:
        run = r.get("run_id") or None
        if run not in out:
            out.append(run)
    return out


def run_line(doc: dict[str, Any]) -> str | None:
    """What the reader needs to know about the runs behind a section's rows and ratios."""
    runs = runs_of(doc)
    if not runs:
        return None
    if runs == [None]:
        return "The rows carry no run id (written before rows carried one)" + (
            "; the ratios above were computed by the one run that wrote this file, from the rows it measured."
            if doc.get("ratios")
            else "."
        )
    if len(runs) == 1:
        git = (doc.get("machine") or {}).get("git")
        commits = sorted({str(r.get("commit") or git) for r in doc.get("rows") or []})
        return f"All rows from run `{runs[0]}` (commit {', '.join(commits)})."
    old = " (rows without one were written before rows carried a run id and pair with nothing)" if None in runs else ""
    return (
        f"Rows of {len(runs)} runs: each ratio names the run both its sides come from{old}; "
        "no figure here combines rows of two runs."
    )


def md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(fmt(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return out


def anchor(title: str) -> str:
    keep = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return keep.strip().replace(" ", "-")


def plot_specs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    p = doc.get("plot")
    if not p:
        return []
    return p if isinstance(p, list) else [p]


def plot_file(doc: dict[str, Any], spec: dict[str, Any], i: int, n: int) -> Path:
    suffix = spec.get("id") or (str(i) if n > 1 else "")
    return RESULTS_DIR / (f"{doc['name']}-{suffix}.png" if suffix else f"{doc['name']}.png")


def planned_plots(doc: dict[str, Any]) -> list[Path]:
    """The PNG files `render_plots` writes for `doc`, in order (what the page links to)."""
    specs = plot_specs(doc)
    return [plot_file(doc, spec, i, len(specs)) for i, spec in enumerate(specs)]


def render_plots(doc: dict[str, Any]) -> list[Path]:
    specs = plot_specs(doc)
    if not specs:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots")
        return []
    out = []
    all_rows = doc.get("rows") or []
    for i, spec in enumerate(specs):
        x, ys, group = spec["x"], spec.get("ys") or [], spec.get("group")
        where = spec.get("where") or {}  # only the rows whose columns have these values
        rows = [r for r in all_rows if all(r.get(k) == v for k, v in where.items())]
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
        groups: dict[Any, list[dict[str, Any]]] = {}
        for r in rows:
            groups.setdefault(r.get(group) if group else None, []).append(r)
        if spec.get("kind") == "bar":
            cats = sorted({str(r.get(x)) for r in rows})
            series = [(g, y) for g in groups for y in ys]
            width = 0.8 / max(1, len(series))
            for j, (g, y) in enumerate(series):
                vals = {str(r.get(x)): r.get(y) for r in groups[g]}
                ax.bar(
                    [c + j * width for c in range(len(cats))],
                    [vals.get(c) or 0 for c in cats],
                    width,
                    label=_label(y, g, group, len(ys)),
                )
            ax.set_xticks([c + width * (len(series) - 1) / 2 for c in range(len(cats))], cats)
        else:
            for g, grows in groups.items():
                for y in ys:
                    pts = sorted((r[x], r[y]) for r in grows if r.get(x) is not None and r.get(y) is not None)
                    if pts:
                        ax.plot(
                            [p[0] for p in pts], [p[1] for p in pts], marker="o", label=_label(y, g, group, len(ys))
                        )
        if spec.get("logx"):
            ax.set_xscale("log")
            xs = sorted({r[x] for r in rows if isinstance(r.get(x), int | float)})
            if 0 < len(xs) <= 12 and spec.get("kind") != "bar":
                ax.set_xticks(xs, [fmt(v) for v in xs])
                ax.minorticks_off()
        if spec.get("logy"):
            ax.set_yscale("log")
        ax.set_xlabel(spec.get("xlabel") or x)
        ax.set_ylabel(spec.get("ylabel") or (ys[0] if len(ys) == 1 else "value"))
        ax.set_title(spec.get("title") or doc.get("title", doc["name"]), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = planned_plots(doc)[i]
        fig.savefig(path)
        plt.close(fig)
        out.append(path)
    return out


def _label(y: str, g: Any, group: str | None, n_ys: int) -> str:
    if group is None:
        return y
    return f"{g}" if n_ys == 1 else f"{y} ({g})"


def render_markdown(docs: list[dict[str, Any]], plots: dict[str, list[Path]]) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python -m bench.run_all` (`make bench`; `make bench-large` for the large scale) from "
        "`bench/results/*.json`. Do not edit by hand: re-run the benchmarks.",
        "",
        "Our machines have 2 cores, slow system calls, and are shared with other work, so absolute times vary "
        "from run to run; every ratio below compares two numbers measured in the same run. Counts of files, "
        "bytes and node reads are deterministic up to the random choices of each benchmark's seed.",
        "",
    ]
    if docs:
        lines += ["| benchmark | scale | date (UTC) | ratios |", "|---|---|---|---|"]
        for d in docs:
            m = d.get("machine") or {}
            lines.append(
                f"| [{fmt(d.get('title', d['name']))}](#{anchor(d.get('title', d['name']))}) | "
                f"{d.get('scale', '')} | {str(m.get('date', ''))[:16].replace('T', ' ')} | "
                f"{len(d.get('ratios') or {})} |"
            )
        lines.append("")
    for d in docs:
        m = d.get("machine") or {}
        lines += [f"## {d.get('title', d['name'])}", ""]
        facts = [
            f"`bench/bench_{d.get('module') or d['name']}.py`",
            f"scale {d.get('scale', '?')}",
            f"{m.get('cpu_count', '?')} CPUs",
            f"Python {m.get('python', '?')}",
            f"{m.get('platform', '')}",
            f"{m.get('date', '?')}",
        ]
        if m.get("git"):
            facts.append(f"git {m['git']}")
        if d.get("seconds") is not None:
            facts.append(f"ran {d['seconds']:.0f} s")
        lines += ["*" + " · ".join(f for f in facts if f) + "*", ""]
        if d.get("description"):
            lines += [d["description"].strip(), ""]
        ratios = d.get("ratios") or {}
        if ratios:
            lines += ["**Ratios** (same run):", ""]
            header, by_run = ["comparison", "ratio"], d.get("ratio_runs") or {}
            table = [[k, "n/a" if v is None else f"{fmt(float(v))}×"] for k, v in ratios.items()]
            if by_run:
                header.append("run")
                table = [[*row, by_run.get(row[0], "")] for row in table]
            lines += md_table(header, table)
            lines.append("")
        if run_line(d):
            lines += [run_line(d) or "", ""]
        rows = d.get("rows") or []
        if rows:
            cols = columns_of(d)
            lines += md_table(cols, [[r.get(c) for c in cols] for r in rows])
            lines.append("")
        if d.get("params"):
            lines += [
                "Parameters: "
                + ", ".join(f"`{k}`={fmt(v) if not isinstance(v, list | dict) else v}" for k, v in d["params"].items()),
                "",
            ]
        for note in d.get("notes") or []:
            lines.append(f"- {note}")
        if d.get("notes"):
            lines.append("")
        for p in plots.get(d["name"], []):
            rel = p.relative_to(REPO_ROOT).as_posix()
            lines += [f"![{p.stem}]({rel})", ""]
    return "\n".join(lines).rstrip() + "\n"


def render(docs: list[dict[str, Any]] | None = None) -> Path:
    docs = load_results() if docs is None else docs
    plots: dict[str, list[Path]] = {}
    for d in docs:
        try:
            plots[d["name"]] = render_plots(d)
        except Exception as e:  # noqa: BLE001 - a bad plot spec must not lose the tables
            print(f"plot of {d['name']} failed: {type(e).__name__}: {e}")
            plots[d["name"]] = []
    BENCHMARKS_MD.write_text(render_markdown(docs, plots))
    print(f"wrote {BENCHMARKS_MD.relative_to(REPO_ROOT)} ({len(docs)} benchmarks)")
    return BENCHMARKS_MD


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__.split("\n")[0])
    p.add_argument("--scale", choices=SCALES, default="small")
    p.add_argument("--only", default="", help="comma-separated benchmark names (e.g. format,txn)")
    p.add_argument("--render-only", action="store_true", help="only regenerate BENCHMARKS.md and the plots")
    p.add_argument("--timeout", type=float, default=None, help="seconds per benchmark (default: none)")
    a = p.parse_args(argv)
    available = discover()
    names = [n for n in available if n not in OPT_IN]
    for n in sorted(set(available) & set(OPT_IN)):
        if not a.only:
            print(f"skipping bench_{n} ({OPT_IN[n]}): run it with --only {n}")
    if a.only:
        wanted = [w.strip().removeprefix("bench_").removesuffix(".py") for w in a.only.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in available]
        if unknown:
            p.error(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(available)}")
        names = wanted
    failed = []
    if not a.render_only:
        status = []
        for name in names:
            rc, secs = run_one(name, a.scale, a.timeout, [])
            status.append((name, rc, secs))
            if rc != 0:
                failed.append(name)
        print("\nsummary:")
        for name, rc, secs in status:
            print(f"  bench_{name:12s} {'ok' if rc == 0 else f'FAILED (exit {rc})':18s} {secs:7.1f} s")
    render()
    if failed:
        print(f"failed: {', '.join(failed)} (BENCHMARKS.md shows their previous results, if any)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
