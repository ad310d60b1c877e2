"""The cluster path as the README documents it: ``make dist``, then ``spark-submit`` of each job
from a virtualenv that holds nothing but ``pyspark``, with the packed environment shipped by
``--archives dist/trinitylake-env.tar.gz#env``.

* The master is ``local-cluster[1,1,1024]``: one executor in a JVM and working directory of its
  own, where Spark unpacks the archive as ``./env``, exactly as in a YARN or Kubernetes container.
  (With ``local[N]`` the executors are threads of the driver's JVM, in its working directory,
  and Spark unpacks archives in a temporary folder instead: ``./env/bin/python`` is not there.)
* The driver runs in client mode from the same archive unpacked here (``env/bin/python``,
  pyspark from ``SPARK_HOME``), so nothing of the project's virtualenv is used.
* ``SPARK_HOME`` is set: a pip-installed ``spark-submit`` otherwise finds it by running
  ``$PYSPARK_DRIVER_PYTHON`` / ``$PYSPARK_PYTHON`` first, before any archive is unpacked.
* The four jobs share one ``spark-submit`` and so one local cluster: its driver
  (``_cluster_jobs.py``) runs ``jobs/walk.py``, ``expire.py``, ``orphans.py`` and ``export.py``
  one after another as spark-submit runs a primary file (``__main__``, their own argv and exit
  code). Four submits cost four drivers, four executor JVMs and four unpacked archives for the
  same checks. ``jobs/walk.py`` is still submitted as the primary file itself by the test of a
  Python without the packages.

Slow (``make dist`` and the cluster's JVMs): marked ``slow`` (``make test`` runs it; ``make
test-fast`` does not). An existing ``dist/`` newer than pyproject.toml and every
file under lib/ is reused (make's rule); a clean checkout builds it.
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

# The first test carries the fixtures' setup (make dist, a venv, four spark-submits): more than the
# run's default 900 s per test on a busy machine.
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
ENV_ARCHIVE = DIST / "trinitylake-env.tar.gz"
TLAKE = Path(sys.executable).with_name("tlake")
PYSPARK = "pyspark==4.2.0"
MASTER = "local-cluster[1,1,1024]"
ORPHAN = "0000/0000/0000/00000000-cluster-path-orphan.arrow"


@pytest.fixture(scope="module")
def dist() -> Path:
    """The archive of `make dist`, rebuilt by make's own rule only when the library changed
    (`make test` builds it before the suite: the DAG tests beside it use the same file)."""
    proc = subprocess.run(["make", "--no-print-directory", str(ENV_ARCHIVE.relative_to(ROOT))], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"make {ENV_ARCHIVE.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert ENV_ARCHIVE.is_file() and list(DIST.glob("trinitylake-*.whl"))
    return ENV_ARCHIVE


@pytest.fixture(scope="module")
def unpacked(dist, tmp_path_factory) -> Path:
    """The archive unpacked once, as a cluster unpacks it: the client-mode driver's environment,
    and what the archive holds. GNU tar, not `tarfile`: 6 CPU-s here instead of 10 for its
    600 MB, and the listing test reads this folder instead of decompressing the archive again."""
    env = tmp_path_factory.mktemp("unpacked") / "env"
    env.mkdir()
    subprocess.run(["tar", "-xzf", str(dist), "-C", str(env)], check=True, timeout=600)
    return env


@pytest.fixture(scope="module")
def pyspark_venv(tmp_path_factory) -> Path:
    """A virtualenv with only pyspark (and py4j, its one dependency), as `pip install pyspark`
    leaves it: both packages in its site-packages and pyspark's scripts (spark-submit,
    find-spark-home, ...) in its bin/. The packages are links to the test run's own copies of
    the same pinned version, because copying pyspark's 500 MB took most of a minute here."""
    import pyspark

    venv = tmp_path_factory.mktemp("pyspark-only") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    assert pyspark.__version__ == PYSPARK.split("==")[1]
    ours = Path(pyspark.__file__).parent.parent
    site = next((venv / "lib").glob("python3*/site-packages"))
    for name in ("pyspark", "py4j"):
        (site / name).symlink_to(ours / name, target_is_directory=True)
        for meta in ours.glob(f"{name}-*.dist-info"):
            (site / meta.name).symlink_to(meta, target_is_directory=True)
    scripts = Path(sys.executable).parent
    for script in (ours / "pyspark" / "bin").iterdir():
        if (scripts / script.name).is_file():  # pip installs pyspark/bin/* and find_spark_home.py as scripts
            shutil.copy2(scripts / script.name, venv / "bin" / script.name)
    shutil.copy2(scripts / "find_spark_home.py", venv / "bin" / "find_spark_home.py")
    assert (venv / "bin" / "spark-submit").is_file()
    return venv


def _spark_home(venv: Path) -> str:
    return subprocess.run([str(venv / "bin" / "python"), "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the test run's Python and Spark settings."""
    drop = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "SPARK_REMOTE", "VIRTUAL_ENV",
            "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_GATEWAY_PORT", "TLAKE_CONTROL_TABLE", "TLAKE_CONTROL_ENGINE")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TLAKE_TEST")}
    return {**env, **extra}


def _result(output: str) -> dict[str, Any]:
    """The job's result: the last line of its output that is a result object (spark-submit
    merges the driver's log into its stdout, and Spark may log JSON lines of its own)."""
    lines = [ln for ln in output.splitlines() if ln.startswith('{"job": ')]
    assert lines, output[-3000:]
    return json.loads(lines[-1])


def _sections(stdout: str) -> dict[str, tuple[int, str]]:
    """job -> (exit code, its output) of the cluster driver's framed output."""
    out: dict[str, tuple[int, str]] = {}
    job, lines = None, []
    for line in stdout.splitlines():
        if line.startswith("@@tlake-job "):
            job, lines = line.split()[1], []
        elif line.startswith("@@tlake-exit ") and job is not None:
            out[job] = (int(line.split()[2]), "\n".join(lines))
            job = None
        elif job is not None:
            lines.append(line)
    return out


@pytest.fixture(scope="module")
def cluster(dist, unpacked, pyspark_venv, tmp_path_factory) -> dict[str, Any]:
    """Runs walk, expire, orphans (dry run) and export in one spark-submit; records what happened."""
    work = tmp_path_factory.mktemp("cluster-path")
    local_env = unpacked  # the client-mode driver: the same archive, unpacked as a cluster would
    lh = work / "lh"

    def tl(*args: str) -> None:
        proc = subprocess.run([str(TLAKE), "--lakehouse", str(lh), *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr

    tl("init", "--txn-ttl", "1s")
    for ns in ("a", "b", "c"):
        tl("namespace", "create", ns)
    orphan = lh / ORPHAN
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"not referenced by any version")
    time.sleep(2.5)  # past the 1 s transaction TTL: old enough to expire and to be an orphan

    env = _clean_env(SPARK_HOME=_spark_home(pyspark_venv))
    submit = [str(pyspark_venv / "bin" / "spark-submit"), "--master", MASTER,
              "--archives", f"{dist}#env",
              "--conf", "spark.pyspark.python=./env/bin/python",
              "--conf", f"spark.pyspark.driver.python={local_env / 'bin' / 'python'}",
              "--conf", "spark.ui.enabled=false"]
    jobs = {
        "walk": ["--execution", "distributed"],  # its phases on the executor: ./env/bin/python there
        "expire": ["--max-version-age", "1s", "--clock-skew-margin", "0s", "--min-versions-to-keep", "1"],
        "orphans": ["--dry-run"],
        "export": ["--name", "weekly-1", "--target", str(work / "export")],
    }
    out: dict[str, Any] = {"lh": lh, "work": work, "orphan": orphan}
    # One spark-submit, one local-cluster: its driver runs each job's entry point in turn as
    # spark-submit would (tests/integration/_cluster_jobs.py), sharing the executor JVM and ./env.
    plan = [[job, ["--lakehouse", str(lh), *args]] for job, args in jobs.items()]
    proc = subprocess.run([*submit, str(ROOT / "tests" / "integration" / "_cluster_jobs.py"), json.dumps(plan)],
                          capture_output=True, text=True, cwd=work, env=env, timeout=900)
    sections = _sections(proc.stdout)
    assert list(sections) == list(jobs), f"spark-submit exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    for job, (code, output) in sections.items():
        assert code == 0, f"jobs/{job}.py exited {code} in the cluster driver:\n{output[-3000:]}\n{proc.stderr[-4000:]}"
        out[job] = _result(output)
    assert proc.returncode == 0, proc.stderr[-4000:]
    show = subprocess.run([str(TLAKE), "--lakehouse", str(lh), "show", "--all", "--json"], capture_output=True,
                          text=True, timeout=120, check=True)
    out["show"] = json.loads(show.stdout)
    return out


def test_walk_runs_its_phases_on_an_executor_with_the_packed_environment(cluster):
    walk = cluster["walk"]
    assert walk["status"] == "succeeded"
    assert walk["details"]["spark"]["started"] is True and walk["details"]["spark"]["mode"] == "classic"
    assert walk["details"]["execution"]["walk.read_nodes"]["where"] == "distributed"
    assert walk["counts"]["versions"] == 4 and walk["counts"]["reachable_root"] == 4


def test_expire_commits_then_deletes(cluster):
    expire = cluster["expire"]
    assert expire["status"] == "succeeded"
    assert (expire["version_before"], expire["version_after"]) == (3, 4)  # the commit of the new oldest version
    assert expire["counts"]["versions_expired"] == 3 and expire["counts"]["deleted_roots"] == 3


def test_orphans_dry_run_finds_the_planted_file_and_deletes_nothing(cluster):
    orphans = cluster["orphans"]
    assert orphans["status"] == "dry_run" and orphans["dry_run"] is True
    assert orphans["counts"]["candidates"] == 1 and orphans["counts"]["deleted"] == 0
    assert cluster["orphan"].exists()


def test_export_copies_the_current_version(cluster):
    export = cluster["export"]
    assert export["status"] == "succeeded"
    assert export["counts"]["copied"] > 0 and export["counts"]["copied"] == export["counts"]["verified"]
    target = cluster["work"] / "export"
    assert (target / "_latest_hint.txt").is_file() and list(target.glob("_lakehouse_def_*.binpb"))


def test_every_run_is_audited_in_txn_seq_order(cluster):
    show = cluster["show"]
    seqs = [e["txn_seq"] for e in show]
    assert seqs == sorted(seqs, reverse=True)
    runs = {e["command"]: e for e in show if e["command"] in ("walk", "expire", "orphans", "export")}
    assert set(runs) == {"walk", "expire", "orphans", "export"}
    for job in runs:
        assert runs[job]["txn_seq"] == cluster[job]["txn_seq"]
    assert runs["walk"]["txn_seq"] < runs["expire"]["txn_seq"] < runs["orphans"]["txn_seq"] < runs["export"]["txn_seq"]
    assert runs["orphans"]["state"] == "dry_run" and runs["walk"]["state"] == "read"


def test_a_relative_pyspark_python_without_spark_home_breaks_spark_submit(pyspark_venv, tmp_path):
    """Why the README sets SPARK_HOME: pip's spark-submit runs $PYSPARK_PYTHON to find it."""
    proc = subprocess.run([str(pyspark_venv / "bin" / "spark-submit"), "--version"], capture_output=True, text=True,
                          cwd=tmp_path, env=_clean_env(PYSPARK_PYTHON="./env/bin/python"), timeout=120)
    assert "./env/bin/python: No such file or directory" in proc.stderr


def test_a_python_without_the_packages_stops_with_one_line(pyspark_venv, tmp_path):
    """spark-submit without the packed environment: the driver's Python has only pyspark."""
    python = pyspark_venv / "bin" / "python"
    proc = subprocess.run([str(pyspark_venv / "bin" / "spark-submit"), "--master", "local[1]",
                           "--conf", f"spark.pyspark.driver.python={python}", "--conf", f"spark.pyspark.python={python}",
                           str(ROOT / "jobs" / "walk.py"), "--lakehouse", str(tmp_path / "lh")],
                          capture_output=True, text=True, cwd=tmp_path,
                          env=_clean_env(SPARK_HOME=_spark_home(pyspark_venv)), timeout=300)
    output = proc.stdout + proc.stderr  # spark-submit merges the driver's stderr into its stdout
    assert proc.returncode == 2, output[-3000:]
    assert "Traceback" not in output
    lines = [ln for ln in output.splitlines() if ln.startswith("tlake walk:")]
    assert len(lines) == 1, output[-3000:]
    # trinitylake itself is absent: the entry file names it (its wheel brings the rest);
    # tests/test_jobs_preflight.py checks the line naming each missing dependency of a present one.
    assert lines[0].startswith(f"tlake walk: missing Python packages on {python}: trinitylake and its dependencies")
    assert "--archives dist/trinitylake-env.tar.gz#env" in lines[0]
    assert "pyspark" not in lines[0].split(":", 2)[2]  # pyspark is there: it is not named


def test_make_dist_leaves_no_build_tools_in_the_archive(unpacked):
    names = [p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*")]
    assert any(n.endswith("site-packages/trinitylake/__init__.py") for n in names)
    assert not any("site-packages/pip/" in n or "site-packages/venv_pack/" in n for n in names)
    assert not any("site-packages/pyspark/" in n for n in names)  # the cluster's own pyspark is used
