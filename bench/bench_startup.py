"""Start-up: the CPU a `tlake` command spends before it does anything, against `import pyarrow`,
the AWS CLI's ``aws --version`` and ``s5cmd version``.

Each command runs as its own process, `repeat` times in turn with the others (so a busy moment of
a shared machine falls on all of them alike); its CPU is user + system time of that process and
its children (``os.wait4``), wall time beside it. The table gives the least and the median of the
runs; the ratios compare the least CPU (the cost itself, without the machine's noise) measured in
this one run. Targets (issue 54): ``tlake --help`` at most half of ``import pyarrow``, a command on
a local lakehouse (``namespace list``) at most twice.

The AWS CLI is the one on PATH (a pyenv shim resolved to the script it runs), else one
pip-installed into a scratch virtualenv under /tmp; s5cmd the one `bench.objstore.find_gotools`
finds (built by ``make gotools``). A tool that cannot be found or installed is left out of the
table and its ratio, with the reason printed and kept in the notes.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

from bench.common import parse_args, ratio, write_result

TLAKE = str(Path(sys.executable).with_name("tlake"))


def run_cpu(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of `cmd` (stdout and stderr discarded)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.stderr:
        p.stderr.close()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {err[-500:]}")
    return usage.ru_utime + usage.ru_stime, wall


def find_aws() -> tuple[list[str] | None, str]:
    """The AWS CLI to run (the script behind a pyenv shim, not the shim's bash), or None and why."""
    aws = shutil.which("aws")
    if aws and "/shims/" in aws and shutil.which("pyenv"):
        real = subprocess.run(["pyenv", "which", "aws"], capture_output=True, text=True).stdout.strip()
        aws = real or aws
    if aws:
        return [aws], f"aws on PATH ({aws})"
    scratch = Path(tempfile.gettempdir()) / "tlake-bench-awscli"
    exe = scratch / "bin" / "aws"
    if not exe.exists():
        try:
            venv.create(scratch, with_pip=True)
            subprocess.run([str(scratch / "bin" / "pip"), "install", "-q", "awscli"], check=True, timeout=600,
                           capture_output=True)
        except (OSError, subprocess.SubprocessError) as e:
            return None, f"the AWS CLI is not on PATH and could not be pip-installed into {scratch}: {e}"
    return [str(exe)], f"pip-installed into {scratch}"


def find_s5cmd() -> tuple[list[str] | None, str]:
    try:
        from bench.objstore import find_gotools
    except ImportError as e:
        return None, f"bench.objstore unavailable: {e}"
    tools = find_gotools()
    if tools is None:
        return None, "s5cmd is not built: run `make gotools` (needs the Go toolchain)"
    return [str(tools["s5cmd"])], f"s5cmd at {tools['s5cmd']}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args("startup", argv, lambda p: p.add_argument("--repeat", type=int, default=None,
                                                                help="runs of each command (default 7, large 15)"))
    repeat = args.repeat or (15 if args.scale == "large" else 7)
    notes: list[str] = []
    lh_dir = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        lh = str(lh_dir / "lh")
        subprocess.run([TLAKE, "--lakehouse", lh, "init"], check=True, capture_output=True)
        subprocess.run([TLAKE, "--lakehouse", lh, "namespace", "create", "sales"], check=True, capture_output=True)
        cases: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import pyarrow": [sys.executable, "-c", "import pyarrow"],
            "tlake --help": [TLAKE, "--help"],
            "tlake namespace list (local)": [TLAKE, "--lakehouse", lh, "namespace", "list"],
            "tlake versions (local)": [TLAKE, "--lakehouse", lh, "versions"],
        }
        for label, (cmd, why) in (("aws --version", find_aws()), ("s5cmd version", find_s5cmd())):
            print(f"{label}: {why}", flush=True)
            if cmd is None:
                notes.append(f"{label} left out: {why}")
            else:
                cases[label] = [*cmd, label.split()[1]]
        cpu: dict[str, list[float]] = {k: [] for k in cases}
        wall: dict[str, list[float]] = {k: [] for k in cases}
        for name, cmd in list(cases.items()):  # one warm-up each (page cache, .pyc files)
            try:
                run_cpu(cmd)
            except (OSError, RuntimeError) as e:
                print(f"{name} left out: {e}", flush=True)
                notes.append(f"{name} left out: {e}")
                del cases[name]
        for _ in range(repeat):
            for name, cmd in cases.items():
                c, w = run_cpu(cmd)
                cpu[name].append(c)
                wall[name].append(w)
    finally:
        shutil.rmtree(lh_dir, ignore_errors=True)
    rows = [{"command": name, "runs": len(cpu[name]), "cpu_s_min": round(min(cpu[name]), 4),
             "cpu_s_median": round(statistics.median(cpu[name]), 4), "wall_s_min": round(min(wall[name]), 4),
             "wall_s_median": round(statistics.median(wall[name]), 4)} for name in cases]
    least = {name: min(cpu[name]) for name in cases}
    pa = least["import pyarrow"]
    ratios = {
        "CPU, tlake --help / import pyarrow (target at most 0.5)": ratio(least["tlake --help"], pa),
        "CPU, tlake namespace list on a local lakehouse / import pyarrow (target at most 2)":
            ratio(least["tlake namespace list (local)"], pa),
    }
    for other in ("aws --version", "s5cmd version"):
        if other in least:
            ratios[f"CPU, tlake --help / {other}"] = ratio(least["tlake --help"], least[other])
            ratios[f"CPU, tlake namespace list (local) / {other}"] = ratio(least["tlake namespace list (local)"],
                                                                         least[other])
    for r in rows:
        print(f"{r['command']:32} cpu min {r['cpu_s_min']:.3f} s  median {r['cpu_s_median']:.3f} s  "
              f"wall median {r['wall_s_median']:.3f} s", flush=True)
    for k, v in ratios.items():
        print(f"{k}: {v}", flush=True)
    write_result("startup", "Start-up: CPU before a command does anything, against import pyarrow, aws and s5cmd",
                 rows, ratios, scale=args.scale, description=__doc__.split("\n\n")[1].replace("\n", " "),
                 params={"repeat": repeat}, notes=notes or None,
                 columns=["command", "runs", "cpu_s_min", "cpu_s_median", "wall_s_min", "wall_s_median"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
