"""Each job run as a YARN or Kubernetes driver container runs it in cluster deploy mode: an
empty working directory holding only what ``spark-submit`` ships (the main file ``<job>.py``
and the ``--files`` YAML under its base name), the packed environment's interpreter, nothing of
the checkout on ``sys.path``.

    spark-submit --master yarn --deploy-mode cluster --archives dist/trinitylake-env.tar.gz#env \\
      --files conf/expire.yaml --conf spark.pyspark.python=./env/bin/python \\
      jobs/expire.py --lakehouse s3://bucket/lh --conf expire.yaml

No spark-submit here can start such a driver: Spark standalone refuses Python applications in
cluster deploy mode ("Cluster deploy mode is currently not supported for python applications on
standalone clusters"), and local masters have no deploy mode but client. So the test stages the
container's working directory by hand, exactly as spark-submit ships it, and runs the
environment's interpreter there with an empty environment (no ``PYTHONPATH``), as the
container's ``./env/bin/python``. The jobs run on the driver (``--execution local``): a
container's Spark is not what this checks (tests/integration/test_cluster_path.py runs the
executors' side with the same archive).

Two environments: the project's virtualenv (``trinitylake`` installed there; its path file
names ``lib/``, never the checkout's root, which a probe checks), always; and the archive of
``make dist`` itself, unpacked as a container unpacks it, marked ``slow`` (its 600 MB take
seconds to unpack; ``make test`` builds the archive before the suite, make's rule reuses it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.maintenance.helpers import build_history
from trinitylake.jobs.registry import JOB_NAMES
from trinitylake.lakehouse import Lakehouse

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "dist" / "trinitylake-env.tar.gz"
TTL_MS = 1000  # the smallest a lakehouse takes


@pytest.fixture(scope="module", params=["venv", pytest.param("archive", marks=pytest.mark.slow)])
def python(request, tmp_path_factory) -> str:
    """The driver's interpreter: the project's venv, or ``make dist``'s archive unpacked."""
    if request.param == "venv":
        return sys.executable
    proc = subprocess.run(
        ["make", "--no-print-directory", str(ARCHIVE.relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"make {ARCHIVE.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    env = tmp_path_factory.mktemp("container") / "env"
    env.mkdir()
    subprocess.run(["tar", "-xzf", str(ARCHIVE), "-C", str(env)], check=True, timeout=600)
    return str(env / "bin" / "python")


@pytest.fixture(scope="module")
def lakehouse(tmp_path_factory) -> Lakehouse:
    """A small history whose old versions are past their transaction TTL (expire has work)."""
    lh = Lakehouse.create(
        str(tmp_path_factory.mktemp("lh") / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS
    )
    build_history(lh, seed=43, ops=12)
    time.sleep(TTL_MS / 1000 + 0.1)
    return lh


def container(tmp_path: Path, job: str, shipped: dict[str, str] | None = None) -> Path:
    """The driver's working directory: the main file and the ``--files`` (name -> text), nothing else."""
    work = tmp_path / f"container-{job}"
    work.mkdir()
    shutil.copy2(ROOT / "jobs" / f"{job}.py", work / f"{job}.py")
    for name, text in (shipped or {}).items():
        (work / name).write_text(text, encoding="utf-8")
    return work


def driver(python: str, work: Path, *args: str) -> subprocess.Popen[str]:
    """The interpreter in the container's working directory, with nothing of this test run's
    environment (no PYTHONPATH, no TLAKE_* or SPARK_* settings)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"}
    return subprocess.Popen(
        [python, *args], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def result(out: str) -> dict[str, Any]:
    lines = [ln for ln in out.splitlines() if ln.startswith('{"job": ')]
    assert lines, out[-2000:]
    return json.loads(lines[-1])


def test_the_checkout_is_not_on_the_drivers_path(python, tmp_path):
    """What makes the staging honest: the entry file's sibling modules, the checkout's root and
    its jobs/ folder are out of the interpreter's reach; ``trinitylake`` is in it."""
    work = container(tmp_path, "walk")
    code, out, err = finished(driver(python, work, "-c", "import sys, json, trinitylake; print(json.dumps(sys.path))"))
    assert code == 0, err
    path = [os.path.realpath(work / p) for p in json.loads(out)]  # "" is the working directory
    assert str(ROOT) not in path and str(ROOT / "jobs") not in path
    assert sorted(p.name for p in work.iterdir()) == ["walk.py"]


def test_every_entry_point_alone_in_an_empty_folder_prints_its_help(python, tmp_path):
    procs = {job: driver(python, container(tmp_path, job), f"{job}.py", "--help") for job in JOB_NAMES}
    for job, proc in procs.items():
        code, out, err = finished(proc)
        assert code == 0 and "Traceback" not in err, f"{job}: {err[-2000:]}"
        assert f"TrinityLake {job} job" in out and "--lakehouse" in out and "--conf PATH" in out


def test_a_walk_reads_its_conf_shipped_by_base_name(python, lakehouse, tmp_path):
    """``--conf conf/walk.yaml`` as the submitting machine spells it: not in the container, its
    base name is (``--files conf/walk.yaml``); the job says which file it read."""
    shipped = (
        (ROOT / "conf" / "walk.yaml").read_text(encoding="utf-8").replace("\nbatch_size: 256\n", "\nbatch_size: 7\n")
    )
    work = container(tmp_path, "walk", {"walk.yaml": shipped})
    code, out, err = finished(
        driver(
            python, work, "walk.py", "--lakehouse", lakehouse.uri, "--conf", "conf/walk.yaml", "--execution", "local"
        )
    )
    assert code == 0, err[-3000:]
    assert "walk config file conf/walk.yaml is not on this machine; reading walk.yaml" in err
    res = result(out)
    assert res["status"] == "succeeded" and res["counts"]["versions"] == lakehouse.latest_version() + 1
    assert res["counts"]["reachable"] > 0
    # The shipped file's value, not the default, reached the job: its control-table rows hold
    # the arguments it ran with.
    rows = [r for r in Lakehouse.open(lakehouse.uri).auditor.control.records() if r.txn_id == res["run_id"]]
    assert rows and all(r.arguments["batch_size"] == 7 for r in rows), rows


def _lakehouse_files(lh: Lakehouse) -> list[str]:
    """The lakehouse's own files (not the jobs' ``_control`` and ``_maintenance``)."""
    root = Path(lh.uri.removeprefix("file://"))
    names = (p.relative_to(root) for p in root.rglob("*") if p.is_file())
    return sorted(n.as_posix() for n in names if not n.parts[0].startswith("_"))


def test_destructive_jobs_in_dry_run_change_nothing(python, lakehouse, tmp_path):
    """expire and orphans with ``--conf <job>.yaml`` shipped beside them; the shipped files set
    ``dry_run: true`` (no flag does): they find their candidates and delete nothing."""
    before = _lakehouse_files(lakehouse)
    procs = {}
    for job, flags in (
        ("expire", ["--max-version-age", "0", "--clock-skew-margin", "0", "--min-versions-to-keep", "2"]),
        ("orphans", []),
    ):
        text = (ROOT / "conf" / f"{job}.yaml").read_text(encoding="utf-8")
        assert "\ndry_run: false\n" in text
        work = container(tmp_path, job, {f"{job}.yaml": text.replace("\ndry_run: false\n", "\ndry_run: true\n")})
        # Each its own control table: the two run at once.
        procs[job] = driver(
            python,
            work,
            f"{job}.py",
            "--lakehouse",
            lakehouse.uri,
            "--conf",
            f"{job}.yaml",
            "--execution",
            "local",
            "--control-uri",
            str(tmp_path / f"control-{job}"),
            *flags,
        )
    results = {}
    for job, proc in procs.items():
        code, out, err = finished(proc)
        assert code == 0, f"{job}: {err[-3000:]}"
        assert "is not on this machine" not in err  # named by its base name: read as named
        results[job] = result(out)
        assert (results[job]["status"], results[job]["dry_run"]) == ("dry_run", True), results[job]
    assert results["expire"]["counts"]["versions_expired"] == lakehouse.latest_version() - 1
    assert results["expire"]["counts"]["candidates"] > 0
    assert _lakehouse_files(lakehouse) == before
