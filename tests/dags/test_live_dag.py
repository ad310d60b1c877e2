"""`airflow dags test trinitylake_maintenance` on a live Airflow: the README's recipe, as written.

The module's fixture extracts the README's "Recipe: a worker with `airflow dags test`" shell
block and runs it with bash from the repository, with ``HOME`` in a temporary folder (the recipe
keeps its lakehouse, exports and AIRFLOW_HOME under ``~/trinitylake-airflow``): it creates the
lakehouse, sets up Airflow (sqlite, the connection ``local[2]``, the pool, the Variables) and runs
``dags test`` at the current time, which must succeed. ``spark-submit`` comes from the main
virtualenv's pyspark (``SPARK_HOME``), the repository as ``make dist`` leaves it. Then:

* every task succeeds, the jobs' results are XComs, and ``tlake show --all --json`` has the
  expire, orphans and export rows;
* a second run of the same logical date succeeds too and changes nothing (same version, same
  export);
* a third run later the same day (a manual trigger, after a new version) keeps that day's export
  (``--if-exists keep``): it succeeds, and the export's files are unchanged;
* a permanent error (no lakehouse there) fails ``expire`` on its first try, without the 5-minute
  retries, and the run fails at once; the task's and the run's alerts name the lakehouse of the
  Variable and reach the failure hook.

Needs .venv (tlake, pyspark) and dist/ (`make test-dags` builds both). A few minutes.
"""

from __future__ import annotations

import pytest

pytest.importorskip("airflow")

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = ROOT / ".venv-airflow" / "bin" / "airflow"
TLAKE = ROOT / ".venv" / "bin" / "tlake"
MAIN_PYTHON = ROOT / ".venv" / "bin" / "python"
ARCHIVE = ROOT / "dist" / "trinitylake-env.tar.gz"
DAG_ID = "trinitylake_maintenance"
JOB_TASKS = ("expire", "tables_expire", "tables_orphans", "orphans_dry_run", "orphans", "export_weekly")


class LiveAirflow:
    def __init__(self, base: Path):
        self.base = base
        self.home = base / "airflow-home"
        self.lakehouse = base / "lh"
        self.exports = base / "exports"
        spark_home = subprocess.run([str(MAIN_PYTHON), "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
                                    capture_output=True, text=True, check=True).stdout.strip()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AIRFLOW", "PYSPARK_", "SPARK_", "TLAKE_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        if "SPARK_SUBMIT_OPTS" in os.environ:  # the suite's JVM tuning (tests/conftest.py), never a setting of the DAG
            env["SPARK_SUBMIT_OPTS"] = os.environ["SPARK_SUBMIT_OPTS"]
        env |= {"AIRFLOW_HOME": str(self.home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "airflow_dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "SPARK_HOME": spark_home,
                "PATH": f"{spark_home}/bin{os.pathsep}{env.get('PATH', '')}"}
        self.env = env
        self.now = datetime.now(UTC)
        self.conf: dict[str, object] = {}
        self.export_name = ""

    def airflow(self, *args: str, timeout: int = 900, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(AIRFLOW), *args], env=self.env, cwd=self.base, capture_output=True, text=True,
                              timeout=timeout)
        if check:
            assert proc.returncode == 0, f"airflow {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-4000:]}"
        return proc

    def tlake(self, *args: str) -> str:
        proc = subprocess.run([str(TLAKE), "--lakehouse", str(self.lakehouse), *args], capture_output=True, text=True,
                              timeout=300, cwd=self.base)
        assert proc.returncode == 0, f"tlake {' '.join(args)}: {proc.stderr[-2000:]}"
        return proc.stdout

    def query(self, sql: str, *params: object) -> list[tuple]:
        with sqlite3.connect(self.home / "airflow.db") as db:
            return db.execute(sql, params).fetchall()

    def last_run(self) -> tuple[str, str]:
        return self.query("SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", DAG_ID)[0]

    def tasks(self, run_id: str) -> dict[str, tuple[str, int]]:
        rows = self.query("SELECT task_id, state, try_number FROM task_instance WHERE dag_id = ? AND run_id = ?",
                          DAG_ID, run_id)
        return {task_id: (state, tries) for task_id, state, tries in rows}

    def dags_test(self, logical_date: str, conf: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
        args = ["dags", "test", DAG_ID, logical_date] + (["-c", json.dumps(conf)] if conf else [])
        started = time.monotonic()
        proc = self.airflow(*args, check=False)
        return proc, time.monotonic() - started


def readme_recipe() -> str:
    """The shell block of the README's Airflow recipe."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Recipe: a worker with `airflow dags test`"):]
    start = section.index("```bash\n") + len("```bash\n")
    return section[start:section.index("```", start)]


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> LiveAirflow:
    for path, how in ((TLAKE, "make venv"), (ARCHIVE, "make dist")):
        if not path.exists():
            pytest.fail(f"{path} is missing: run `{how}` (make test-dags does)")
    base = tmp_path_factory.mktemp("live-airflow")
    af = LiveAirflow(base)
    home = base / "home"
    home.mkdir()
    recipe_env = {k: v for k, v in af.env.items() if not k.startswith("AIRFLOW") and k not in ("SPARK_HOME",)}
    recipe_env |= {"HOME": str(home), "PATH": recipe_env["PATH"].split(os.pathsep, 1)[1]}  # the recipe sets both
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", readme_recipe()], cwd=ROOT, env=recipe_env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"the README's recipe exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}"
    assert "DagRun failed" not in proc.stdout + proc.stderr
    # What the recipe made, for the tests below: its AIRFLOW_HOME, lakehouse and exports.
    recipe = home / "trinitylake-airflow"
    af.home, af.lakehouse, af.exports = recipe / "airflow", recipe / "lh", recipe / "exports"
    af.env = {**af.env, "AIRFLOW_HOME": str(af.home)}
    run_id, state = af.last_run()
    assert state == "success", (run_id, state, proc.stdout[-4000:])
    assert "expire" in proc.stdout, proc.stdout[-3000:]  # the recipe's `tlake show --all`
    for i in range(4):
        af.tlake("namespace", "create", f"n{i}")
    # The logical date of the runs: now, after the lakehouse has versions, as the README's recipe
    # and the acceptance check run it (the export exports the version current at the logical
    # date: an earlier one has none). export_weekday is its ISO weekday: the weekly export runs.
    af.now = datetime.now(UTC).replace(microsecond=0)
    af.conf = {"export_weekday": af.now.isoweekday()}
    af.export_name = f"weekly-{af.now:%Y%m%d}"
    # The recipe exports only when it runs on a Sunday (the default export_weekday), and then
    # under this very name: the tests start from the same state on every day of the week, with
    # no export of today (its record dropped, its folder removed).
    exported_by_recipe = af.export_name in af.tlake("export", "list")
    assert exported_by_recipe == (datetime.fromisoformat(recipe_run_date(af)).isoweekday() == 7)
    if exported_by_recipe:
        af.tlake("export", "drop", af.export_name)
        shutil.rmtree(af.exports / af.export_name)
    return af


def recipe_run_date(af: LiveAirflow) -> str:
    """The logical date of the recipe's run (the only run before the tests')."""
    return af.query("SELECT logical_date FROM dag_run WHERE dag_id = ? ORDER BY id LIMIT 1", DAG_ID)[0][0]


def _audit(af: LiveAirflow) -> list[dict]:
    rows = json.loads(af.tlake("show", "--all", "--json"))
    return rows.get("rows", rows) if isinstance(rows, dict) else rows


def _commands(rows: list[dict]) -> list[str]:
    return [str(r.get("command") or r.get("job") or "") for r in rows]


def _export_files(af: LiveAirflow) -> dict[str, object]:
    """The export's files and sizes; of its manifest, what it exported. A re-run rewrites the
    manifest with its own run (run_id, completed_at), and without recorded_in_version: the first
    run recorded the export in a lakehouse version, the re-run commits nothing."""
    target = af.exports / af.export_name
    files: dict[str, object] = {str(p.relative_to(target)): p.stat().st_size for p in target.rglob("*") if p.is_file()}
    for name in [n for n in files if n.endswith("export.json")]:
        manifest = json.loads((target / name).read_text())
        files[name] = {k: v for k, v in manifest.items() if k not in ("run_id", "completed_at", "recorded_in_version")}
    return files


def _export_runs(rows: list[dict]) -> list[dict]:
    """The export jobs' rows (not `export drop`), newest first."""
    return [r for r in rows if str(r.get("command") or "") == "export"]


def test_dags_test_runs_every_task_and_a_second_run_is_idempotent(live):
    earlier_exports = len(_export_runs(_audit(live)))  # the recipe's, on Sundays
    proc, seconds = live.dags_test(live.now.isoformat(), live.conf)
    run_id, state = live.last_run()
    assert proc.returncode == 0 and state == "success", f"{state} after {seconds:.0f} s:\n{proc.stdout[-6000:]}"
    tasks = live.tasks(run_id)
    every = ("lakehouse_guard", *JOB_TASKS, "is_export_day")
    assert {t: s for t, (s, _) in tasks.items()} == dict.fromkeys(every, "success")
    # The jobs' results reach XCom (the JSON `tlake <job> --json` prints).
    xcoms = dict(live.query("SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
                            DAG_ID, run_id))
    for task_id, job in (("expire", "expire"), ("orphans", "orphans"), ("export_weekly", "export")):
        value = xcoms[task_id]
        value = json.loads(value) if isinstance(value, str | bytes) else value
        value = json.loads(value) if isinstance(value, str) else value
        assert value["job"] == job and value["status"] == "succeeded", value
    first = _audit(live)
    commands = _commands(first)
    for job in ("expire", "orphans", "export"):
        assert any(job in c for c in commands), f"no {job} audit row: {commands}"
    version = live.tlake("versions")
    exported = _export_files(live)
    assert exported

    # The same logical date again: every task succeeds, the same cutoffs change nothing.
    proc, seconds2 = live.dags_test(live.now.isoformat(), live.conf)
    run_id2, state2 = live.last_run()
    assert run_id2 != run_id
    assert proc.returncode == 0 and state2 == "success", f"{state2} after {seconds2:.0f} s:\n{proc.stdout[-6000:]}"
    assert live.tlake("versions") == version
    assert _export_files(live) == exported
    again = _audit(live)
    assert len(again) > len(first)
    exports = _export_runs(again)
    assert len(exports) == earlier_exports + 2 and exports[0]["metrics"].get("files_copied") == 0, exports[0]  # newest first

    # A run later the same day (a manual trigger), after a new version: the run of an export day
    # that the recipe met on Sundays. That day's export is kept, never overwritten or failed.
    live.tlake("namespace", "create", "later")
    later = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    time.sleep(max(0.0, (later - datetime.now(UTC)).total_seconds()))
    proc, seconds3 = live.dags_test(later.isoformat(), {"export_weekday": later.isoweekday()})
    run_id3, state3 = live.last_run()
    assert proc.returncode == 0 and state3 == "success", f"{state3} after {seconds3:.0f} s:\n{proc.stdout[-6000:]}"
    assert live.tasks(run_id3)["export_weekly"][0] == "success"
    export_xcom = live.query("SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = 'export_weekly' "
                             "AND key = 'return_value'", DAG_ID, run_id3)[0][0]
    export_xcom = export_xcom.decode() if isinstance(export_xcom, bytes) else str(export_xcom)
    if later.date() == live.now.date():
        assert "already_exported" in export_xcom, export_xcom[-2000:]
        assert _export_files(live) == exported
    else:  # the clock crossed midnight between the runs: the new day's export, under its own name
        assert (live.exports / f"weekly-{later:%Y%m%d}").is_dir()
    print(f"dags test: first run {seconds:.0f} s, second run {seconds2:.0f} s, later the same day {seconds3:.0f} s")


def test_a_permanent_error_fails_the_run_at_once_without_retries(live, tmp_path):
    """The lakehouse comes from the Variable, as in the README's recipe (no param), and the
    failure hook is set: the task's alert and the run's alert both name that lakehouse and both
    reach the hook (under `dags test` the run-level one named the DAG's placeholder default and
    skipped the hook without a word)."""
    missing = tmp_path / "no-lakehouse-here"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    received = tmp_path / "alerts.jsonl"
    (hooks / "tl_live_hook.py").write_text(
        "import json\n"
        "def page(msg):\n"
        f"    with open({str(received)!r}, 'a') as f:\n"
        "        f.write(json.dumps(msg) + '\\n')\n")
    earlier = (live.now - timedelta(hours=1)).isoformat()
    env = dict(live.env)
    live.env = {**env, "PYTHONPATH": str(hooks)}
    live.airflow("variables", "set", "trinitylake_lakehouse", str(missing))
    live.airflow("variables", "set", "trinitylake_failure_hook", "tl_live_hook:page")
    try:
        proc, seconds = live.dags_test(earlier, live.conf)
    finally:
        live.airflow("variables", "set", "trinitylake_lakehouse", str(live.lakehouse))
        live.airflow("variables", "delete", "trinitylake_failure_hook")
        live.env = env
    run_id, state = live.last_run()
    assert proc.returncode != 0 and state == "failed", proc.stdout[-4000:]
    tasks = live.tasks(run_id)
    assert tasks["expire"] == ("failed", 1), tasks  # one try: no retries 5 minutes apart
    assert tasks["orphans_dry_run"][0] == "upstream_failed"
    assert seconds < 280, f"{seconds:.0f} s: the permanent error waited for a retry"
    assert "LakehouseNotFoundError" in proc.stdout and "permanent: not retried" in proc.stdout
    # The alert names the lakehouse and a command that runs as it stands.
    assert f"tlake --lakehouse {missing} show --job expire" in proc.stdout
    assert "CHANGE-ME" not in proc.stdout, proc.stdout[-4000:]
    alerts = [json.loads(line) for line in received.read_text().splitlines()] if received.exists() else []
    assert len(alerts) == 2, (alerts, proc.stdout[-4000:])  # the task's alert and the run's
    for alert in alerts:
        assert alert["lakehouse"] == str(missing), alert
