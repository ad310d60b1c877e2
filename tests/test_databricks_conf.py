"""Databricks job definitions: generated from the task table, valid, and wired like the DAG."""

from __future__ import annotations

import glob
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from trinitylake.job_flags import parse_job_args

REPO = Path(__file__).resolve().parent.parent
JSON_PATH = REPO / "conf" / "databricks" / "trinitylake_maintenance.json"
SERVERLESS_JSON_PATH = REPO / "conf" / "databricks" / "trinitylake_maintenance_serverless.json"
SPARK_TASKS = ("expire", "tables_expire", "tables_orphans", "orphans_dry_run", "orphans", "export_weekly")


def _load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generate():
    return _load_module("tlake_databricks_generate", REPO / "conf" / "databricks" / "generate.py")


@pytest.fixture(scope="module")
def tasks_table(generate):
    return generate.tl


@pytest.fixture(scope="module")
def job():
    return json.loads(JSON_PATH.read_text(encoding="utf-8"))


def _by_key(job):
    return {t["task_key"]: t for t in job["tasks"]}


def test_committed_files_equal_the_generator_output(generate):
    assert set(generate.OUTPUTS) == {JSON_PATH, SERVERLESS_JSON_PATH, generate.BUNDLE_RESOURCE_PATH,
                                     generate.SERVERLESS_BUNDLE_RESOURCE_PATH}
    for path, render in generate.OUTPUTS.items():
        assert path.is_file(), f"{path.relative_to(REPO)} is missing: run python conf/databricks/generate.py"
        assert path.read_text(encoding="utf-8") == render(), (
            f"{path.relative_to(REPO)} is stale: run python conf/databricks/generate.py"
        )
    assert generate.main(["--check"]) == 0


def test_check_names_a_stale_file(generate, monkeypatch, capsys):
    monkeypatch.setitem(generate.OUTPUTS, SERVERLESS_JSON_PATH, lambda: "{}\n")
    assert generate.main(["--check"]) == 1
    assert "trinitylake_maintenance_serverless.json" in capsys.readouterr().err


def test_job_settings_round_trip_through_the_sdk(job):
    jobs = pytest.importorskip("databricks.sdk.service.jobs")
    settings = jobs.JobSettings.from_dict(job)
    assert settings.as_dict() == job
    assert settings.max_concurrent_runs == 1
    assert settings.schedule.quartz_cron_expression == "0 0 3 * * ?"
    assert settings.schedule.timezone_id == "UTC"
    assert settings.schedule.pause_status == jobs.PauseStatus.PAUSED


def test_bundle_job_round_trips_through_the_sdk(generate):
    jobs = pytest.importorskip("databricks.sdk.service.jobs")
    resource = yaml.safe_load(generate.BUNDLE_RESOURCE_PATH.read_text(encoding="utf-8"))
    job = resource["resources"]["jobs"]["trinitylake_maintenance"]
    assert jobs.JobSettings.from_dict(job).as_dict() == job


def test_task_graph(job):
    tasks = _by_key(job)
    deps = {key: [d["task_key"] for d in t.get("depends_on", [])] for key, t in tasks.items()}
    assert deps == {
        "expire": [],
        "tables_expire": ["expire"],
        "tables_orphans": ["tables_expire"],
        "orphans_dry_run": ["tables_orphans"],
        "orphans": ["orphans_dry_run"],
        "is_export_day": ["orphans"],
        "export_weekly": ["is_export_day"],
    }
    assert tasks["export_weekly"]["depends_on"] == [{"task_key": "is_export_day", "outcome": "true"}]
    gate = tasks["is_export_day"]["condition_task"]
    assert gate == {
        "op": "EQUAL_TO",
        "left": "{{job.trigger.time.iso_weekday}}",
        "right": "{{job.parameters.export_weekday}}",
    }


def test_spark_tasks(job):
    tasks = _by_key(job)
    clusters = {c["job_cluster_key"] for c in job["job_clusters"]}
    for key in SPARK_TASKS:
        task = tasks[key]
        spt = task["spark_python_task"]
        params = spt["parameters"]
        assert spt["source"] == "WORKSPACE"
        jobs = "expire|orphans|export|tables_expire|tables_orphans"
        assert re.fullmatch(rf"/Workspace/Shared/trinitylake/jobs/({jobs})\.py", spt["python_file"])
        assert params[:2] == ["--lakehouse", "{{job.parameters.lakehouse}}"]
        job_name = Path(spt["python_file"]).stem
        assert params[params.index("--conf") + 1] == f"/Workspace/Shared/trinitylake/conf/{job_name}.yaml"
        assert params[params.index("--reference-time") + 1] == "{{job.trigger.time.timestamp_ms}}"
        assert task["job_cluster_key"] in clusters
        assert task["libraries"] == [{"whl": "/Workspace/Shared/trinitylake/dist/trinitylake-0.1.0-py3-none-any.whl"}]
        assert task["timeout_seconds"] > 0 and task["max_retries"] >= 0
    assert "--dry-run" in tasks["orphans_dry_run"]["spark_python_task"]["parameters"]
    assert "--dry-run" not in tasks["orphans"]["spark_python_task"]["parameters"]
    for cluster in job["job_clusters"]:
        assert {"spark_version", "node_type_id"} <= set(cluster["new_cluster"])
        # An access mode the jobs support (Python on executors, fsspec with executor credentials).
        assert cluster["new_cluster"]["data_security_mode"] == "DATA_SECURITY_MODE_DEDICATED"
        # A runtime line, not one maintenance release: any 17.3.x (Spark 4, Scala 2.13).
        assert re.fullmatch(r"\d+\.\d+\.x-scala2\.13", cluster["new_cluster"]["spark_version"])


def test_classic_access_mode_is_one_the_sdk_knows(job):
    compute = pytest.importorskip("databricks.sdk.service.compute")
    for cluster in job["job_clusters"]:
        mode = compute.DataSecurityMode(cluster["new_cluster"]["data_security_mode"])
        assert mode in (compute.DataSecurityMode.DATA_SECURITY_MODE_DEDICATED, compute.DataSecurityMode.SINGLE_USER)


@pytest.fixture(scope="module")
def serverless():
    return json.loads(SERVERLESS_JSON_PATH.read_text(encoding="utf-8"))


def test_serverless_job_has_an_environment_with_the_wheel_and_no_cluster(serverless):
    assert serverless["name"] == "trinitylake_maintenance_serverless"
    assert "job_clusters" not in serverless
    envs = {e["environment_key"]: e["spec"] for e in serverless["environments"]}
    assert set(envs) == {"trinitylake"}
    spec = envs["trinitylake"]
    assert spec["environment_version"] and "client" not in spec  # client: the field's deprecated name
    assert spec["dependencies"] == ["/Workspace/Shared/trinitylake/dist/trinitylake-0.1.0-py3-none-any.whl"]
    for task in serverless["tasks"]:
        assert not {"job_cluster_key", "new_cluster", "existing_cluster_id", "libraries"} & set(task)
        if "spark_python_task" in task:
            assert task["environment_key"] in envs
        else:
            assert "environment_key" not in task  # the condition task needs no compute
    assert serverless["schedule"]["pause_status"] == "PAUSED"


def test_serverless_job_runs_the_same_tasks_as_the_classic_one(job, serverless):
    def shape(j):
        return [(t["task_key"], t.get("depends_on"), t.get("spark_python_task"), t.get("condition_task"),
                 t.get("timeout_seconds"), t.get("max_retries")) for t in j["tasks"]]

    assert shape(serverless) == shape(job)
    assert serverless["parameters"] == job["parameters"]
    assert serverless["max_concurrent_runs"] == 1


def test_serverless_job_round_trips_through_the_sdk(serverless, generate):
    jobs = pytest.importorskip("databricks.sdk.service.jobs")
    settings = jobs.JobSettings.from_dict(serverless)
    assert settings.as_dict() == serverless
    assert settings.environments[0].spec.dependencies == serverless["environments"][0]["spec"]["dependencies"]
    assert not settings.job_clusters
    resource = yaml.safe_load(generate.SERVERLESS_BUNDLE_RESOURCE_PATH.read_text(encoding="utf-8"))
    bundle_job = resource["resources"]["jobs"]["trinitylake_maintenance_serverless"]
    assert jobs.JobSettings.from_dict(bundle_job).as_dict() == bundle_job
    assert bundle_job["environments"][0]["spec"]["dependencies"] == ["../../../dist/*.whl"]
    assert bundle_job["schedule"]["pause_status"] == "PAUSED"  # prod runs the classic job; unpause one
    assert "job_clusters" not in bundle_job


def test_job_level_settings(job):
    assert job["name"] == "trinitylake_maintenance"
    assert job["max_concurrent_runs"] == 1
    assert job["tags"]["project"] == "trinitylake"
    assert {p["name"] for p in job["parameters"]} == {"lakehouse", "export_root", "export_weekday"}


def test_parameters_are_accepted_by_the_job_parsers(job):
    """With Databricks' references resolved, each task's parameters parse as its job config."""
    resolved = {
        "{{job.parameters.lakehouse}}": "s3://bucket/lh",
        "{{job.parameters.export_root}}": "s3://backup/lh",
        "{{job.trigger.time.timestamp_ms}}": "1795316400000",
        "{{job.trigger.time.iso_date}}": "2026-11-22",
    }
    for key in SPARK_TASKS:
        spt = _by_key(job)[key]["spark_python_task"]
        args = []
        for arg in spt["parameters"]:
            for ref, value in resolved.items():
                arg = arg.replace(ref, value)
            args.append(arg.replace("/Workspace/Shared/trinitylake/conf", str(REPO / "conf")))
        cfg = parse_job_args(Path(spt["python_file"]).stem, args, env={})
        assert cfg.lakehouse == "s3://bucket/lh" and cfg.reference_time == 1795316400000
        if key == "export_weekly":
            assert (cfg.name, cfg.target) == ("weekly-2026-11-22", "s3://backup/lh/weekly-2026-11-22")


def test_table_matches_the_package_version(tasks_table):
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert tasks_table.PACKAGE_VERSION == pyproject["project"]["version"]


def test_is_export_day(tasks_table):
    from datetime import datetime

    assert tasks_table.is_export_day(datetime(2026, 11, 22), 7)  # a Sunday
    assert not tasks_table.is_export_day(datetime(2026, 11, 23), "7")
    with pytest.raises(ValueError, match="ISO weekday"):
        tasks_table.is_export_day(datetime(2026, 11, 23), 0)


def test_databricks_bundle(generate):
    bundle = yaml.safe_load((REPO / "databricks.yml").read_text(encoding="utf-8"))
    assert bundle["bundle"]["name"] == "trinitylake"
    targets = bundle["targets"]
    assert targets["dev"]["mode"] == "development" and targets["dev"]["default"] is True
    assert targets["prod"]["mode"] == "production"
    assert {"lakehouse", "export_root"} <= set(bundle["variables"])
    # Required (no default): the CLI refuses validate/deploy/run without them, so no target, prod
    # least of all (its schedule runs), is ever deployed against a placeholder bucket.
    for name in ("lakehouse", "export_root"):
        assert "default" not in bundle["variables"][name], name
    assert "CHANGE-ME" not in (REPO / "databricks.yml").read_text(encoding="utf-8")
    included = {Path(p).resolve() for pattern in bundle["include"] for p in glob.glob(str(REPO / pattern))}
    assert generate.BUNDLE_RESOURCE_PATH.resolve() in included
    assert generate.SERVERLESS_BUNDLE_RESOURCE_PATH.resolve() in included
    job = yaml.safe_load(generate.BUNDLE_RESOURCE_PATH.read_text(encoding="utf-8"))["resources"]["jobs"][
        "trinitylake_maintenance"
    ]
    resource_dir = generate.BUNDLE_RESOURCE_PATH.parent
    for task in job["tasks"]:
        if "spark_python_task" in task:
            python_file = task["spark_python_task"]["python_file"]
            assert (resource_dir / python_file).resolve().parent == REPO / "jobs"
            assert "source" not in task["spark_python_task"]
            conf = task["spark_python_task"]["parameters"][3]
            assert conf.startswith("${workspace.file_path}/conf/")
            assert (REPO / conf.removeprefix("${workspace.file_path}/")).is_file()
            assert task["libraries"] == [{"whl": "../../../dist/*.whl"}]
    assert "trinitylake_wheel" in bundle["artifacts"]


def test_readme_bundle_commands_name_their_target_and_variables():
    """`databricks bundle run` without `-t` targets dev, which a prod deploy never created; a
    deploy or run without the required variables is refused by the CLI."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    commands = [c.strip() for line in readme.splitlines() if "databricks bundle" in line
                for c in line.split("&&") if "databricks bundle" in c]
    assert commands
    for c in commands:
        if "`" in c:
            continue  # prose mentioning the command, not a command line
        verb = c.split("databricks bundle", 1)[1].split()[0]
        if verb in ("validate", "deploy", "run"):
            assert re.search(r"(^|\s)-t \w+", c), f"no target: {c}"
            assert "--var lakehouse=" in c or "$V" in c or "BUNDLE_VAR_lakehouse" in readme, f"no lakehouse: {c}"
