"""BENCHMARKS.md traces to its results: the page is exactly what ``bench.run_all --render-only``
makes from ``bench/results/*.json`` (nobody edits it by hand), every plot it links is committed
and every file it names exists. (That every ratio section comes from one run at a clean commit is
the acceptance check ``evidence-2``'s; the sections not yet re-run say which run they come from.)"""

from __future__ import annotations

import difflib
import re
import subprocess

from bench import run_all
from bench.common import REPO_ROOT, load_results

SHARED = REPO_ROOT.parent / "shared"
#: A file named in the page's text: a path or a bare name with one of these extensions.
NAMED_FILE = re.compile(r"(?<![\w/.:-])((?:\.\./)?[\w./-]*[\w-]\.(?:py|md|json|sh|ya?ml|toml|png))\b")


def _page_from_results() -> str:
    docs = load_results()
    return run_all.render_markdown(docs, {d["name"]: run_all.planned_plots(d) for d in docs})


def test_page_is_exactly_what_the_results_render():
    page = (REPO_ROOT / "BENCHMARKS.md").read_text()
    want = _page_from_results()
    if page != want:
        diff = list(difflib.unified_diff(page.splitlines(), want.splitlines(), "BENCHMARKS.md", "rendered", lineterm=""))
        raise AssertionError(
            f"BENCHMARKS.md differs from what bench/results renders ({sum(1 for d in diff if d[:1] in '+-') - 2} lines); "
            "re-run `python -m bench.run_all --render-only`, never edit the page:\n" + "\n".join(diff[:40])
        )


def test_every_plot_the_page_shows_is_committed():
    missing = [
        p.relative_to(REPO_ROOT).as_posix() for d in load_results() for p in run_all.planned_plots(d) if not p.exists()
    ]
    assert not missing, f"BENCHMARKS.md links plots that do not exist: {missing}"


def _repo_files() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    return set(out.split())


def _exists(name: str, repo_files: set[str], basenames: set[str]) -> bool:
    if name.startswith("../"):
        return (REPO_ROOT / name).exists()
    if "/" in name:
        name = name.removeprefix("./")
        return any(f"{root}{name}" in repo_files for root in ("", "lib/", "lib/trinitylake/")) or (SHARED / name).exists()
    return name in basenames or any(SHARED.glob(f"**/{name}"))


def test_the_page_names_only_files_that_exist():
    page = (REPO_ROOT / "BENCHMARKS.md").read_text()
    repo_files = _repo_files() | {
        p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "bench" / "results").glob("*")
    }
    basenames = {f.rsplit("/", 1)[-1] for f in repo_files}
    named = sorted({m.group(1) for m in NAMED_FILE.finditer(page)})
    assert named, "the page names no file at all: the pattern is broken"
    missing = [n for n in named if not _exists(n, repo_files, basenames)]
    assert not missing, f"BENCHMARKS.md names files that do not exist: {missing}"


def test_the_file_check_refuses_a_file_that_does_not_exist():
    repo_files = _repo_files()
    basenames = {f.rsplit("/", 1)[-1] for f in repo_files}
    names = [m.group(1) for m in NAMED_FILE.finditer("see `bench/bench_tables_maintenance_s3.py` and tlwalk.py")]
    assert names == ["bench/bench_tables_maintenance_s3.py", "tlwalk.py"]
    assert not _exists(names[0], repo_files, basenames)
    assert _exists("bench/run_all.py", repo_files, basenames)
