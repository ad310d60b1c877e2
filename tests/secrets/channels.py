"""The secret channels and the commands of tests/secrets/test_channels*.py: every `tlake`
command and every job entry point, run with a unique secret planted in each channel."""

from __future__ import annotations

import json
from pathlib import Path

from tests.secrets.conftest import Planted


def plant_channels(planted: Planted, *, s3_endpoint: str | None) -> tuple[list[str], list[str]]:
    """Plant the secrets; returns (global storage-option args, job Spark-conf args)."""
    storage = []
    if s3_endpoint:
        # The S3 credentials are real here: moto accepts any key, so the secrets travel the
        # whole signing path (s3fs, botocore, delta-rs).
        storage += ["--storage-option", f"endpoint_url={s3_endpoint}",
                    "--storage-option", f"key={planted.new('s3_key', 'AKIA')}",
                    "--storage-option", f"secret={planted.new('s3_secret')}"]
    else:
        storage += ["--storage-option", f"secret={planted.new('so_secret')}",
                    "--storage-option", f"token={planted.new('so_token')}",
                    "--storage-option", f"endpoint_url=http://ops:{planted.new('so_uri_password')}@localhost:9"]
    spark = ["--spark-conf", f"spark.hadoop.fs.s3a.secret.key={planted.new('spark_secret_key')}",
             "--spark-conf", f"spark.hadoop.fs.s3a.access.key={planted.new('spark_access_key')}",
             "--spark-conf", f"spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net={planted.new('spark_azure')}",
             "--spark-conf", f"spark.hadoop.fs.s3a.endpoint=http://u:{planted.new('spark_uri_password')}@127.0.0.1:1"]
    # Options from the environment (the jobs' config layer) and credentials from the
    # environment (what storage libraries read by themselves).
    # (s3fs takes only its own options: on S3 the environment gives a session token.)
    env_option = "token" if s3_endpoint else "sas_token"
    planted.env["TLAKE_STORAGE_OPTIONS"] = f"{env_option}={planted.new('env_storage_option')}"
    planted.env["TLAKE_SPARK_CONF"] = f"spark.hadoop.fs.s3a.session.token={planted.new('env_session_token')}"
    planted.env["AZURE_CLIENT_SECRET"] = planted.new("env_azure_client_secret")
    if not s3_endpoint:
        planted.env["AWS_SECRET_ACCESS_KEY"] = planted.new("env_aws_secret")
    # The export target's own options (trinitylake.storage.target_options): its option from the
    # environment and, for an S3 target, its credentials from the TLAKE_TARGET_* variables.
    planted.env["TLAKE_EXPORT_TARGET_STORAGE_OPTIONS"] = f"{env_option}={planted.new('env_target_option')}"
    if s3_endpoint:
        planted.env["TLAKE_TARGET_S3_ENDPOINT_URL"] = s3_endpoint
        planted.env["TLAKE_TARGET_AWS_ACCESS_KEY_ID"] = planted.new("env_target_key_id", "AKIA")
        planted.env["TLAKE_TARGET_AWS_SECRET_ACCESS_KEY"] = planted.new("env_target_secret")
    return storage, spark


def every_command(planted: Planted, lake: str, storage: list[str], spark: list[str], *, cwd: Path,
                  export_target: str, log_level: str) -> dict[str, str]:
    """Run every `tlake` command and every job entry point; returns some outputs to check."""
    g = ["--lakehouse", lake, *storage, "--log-level", log_level]
    t = planted.tlake
    out: dict[str, str] = {}
    t([*g, "init", "--property", "owner=ops"], cwd=cwd)
    t([*g, "namespace", "create", "s", "--property", "team=data"], cwd=cwd)
    t([*g, "namespace", "create", "s2"], cwd=cwd)
    t([*g, "namespace", "alter", "s", "--set", "a=b"], cwd=cwd)
    t([*g, "namespace", "list", "--json"], cwd=cwd)
    t([*g, "namespace", "describe", "s", "--json"], cwd=cwd)
    t([*g, "table", "create", "s.t", "--property", "fmt=iceberg"], cwd=cwd)
    t([*g, "table", "create", "s.t2"], cwd=cwd)
    t([*g, "table", "alter", "s.t", "--set", "x=y"], cwd=cwd)
    t([*g, "table", "list", "s", "--json"], cwd=cwd)
    t([*g, "table", "describe", "s.t", "--json", "--version", "6"], cwd=cwd)
    t([*g, "txn"], cwd=cwd, stdin="namespace create s3\ntable create s3.u\n")
    t([*g, "versions", "--json"], cwd=cwd)
    t([*g, "rollback", "--to", "5"], cwd=cwd)
    t([*g, "table", "drop", "s.t2"], cwd=cwd)
    t([*g, "namespace", "drop", "s2"], cwd=cwd)
    t([*g, "table", "create", "s.t"], cwd=cwd, ok=False)  # an error message
    out["walk"] = t([*g, "walk", *spark, "--json"], cwd=cwd).stdout
    t([*g, "walk", *spark], cwd=cwd)
    t([*g, "expire", *spark, "--dry-run", "--max-version-age", "0s", "--min-versions-to-keep", "2"], cwd=cwd)
    t([*g, "expire", *spark, "--max-version-age", "0s", "--min-versions-to-keep", "2", "--json"], cwd=cwd)
    t([*g, "orphans", *spark, "--dry-run", "--json"], cwd=cwd)
    t([*g, "orphans", *spark], cwd=cwd)
    t([*g, "walk", *spark, "--versions", "9999"], cwd=cwd, ok=False)  # a failed job run
    t([*g, "export", "--name", "e1", "--target", f"{export_target}/e1", *spark, "--json",
       "--target-storage-option", f"secret={planted.new('target_secret')}"], cwd=cwd)
    t([*g, "export", "list", "--json"], cwd=cwd)
    t([*g, "export", "drop", "e1"], cwd=cwd)
    t([*g, "show"], cwd=cwd)
    out["show"] = t([*g, "show", "--all", "--json"], cwd=cwd).stdout
    t([*g, "show", "--version", "2", "--json"], cwd=cwd)
    t([*g, "report", "--out", str(cwd / "report.html")], cwd=cwd)
    t([*g, "report", "--out", str(cwd / "report2.html"), "--json"], cwd=cwd)
    t([*g, "control", "redact", "--dry-run"], cwd=cwd)
    t([*g, "control", "redact", "--json"], cwd=cwd)
    # The jobs as spark-submit / Airflow runs them (stdout is what XCom gets).
    j = ["--lakehouse", lake, *storage, *spark, "--log-level", log_level]
    for job, extra in (("walk", []), ("expire", ["--dry-run"]), ("orphans", ["--dry-run"]),
                       ("export", ["--name", "e2", "--target", f"{export_target}/e2"])):
        out[f"job {job}"] = planted.job(job, [*j, *extra], cwd=cwd).stdout
    return out


def check_recorded_redacted(out: dict[str, str]) -> None:
    """The options reached the process and were recorded, redacted."""
    history = json.loads(out["show"])
    walks = [e for e in history if e["command"] == "walk" and e["arguments"].get("spark_conf")]
    assert walks, "the walk runs and their options are recorded"
    conf = walks[0]["arguments"]["spark_conf"]
    assert conf["spark.hadoop.fs.s3a.secret.key"] == "<redacted>"
    assert conf["spark.hadoop.fs.s3a.session.token"] == "<redacted>"  # from TLAKE_SPARK_CONF
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://u:<redacted>@127.0.0.1:1"
    options = walks[0]["arguments"]["storage_options"]
    assert options.get("sas_token", options.get("token")) == "<redacted>"  # from TLAKE_STORAGE_OPTIONS
    exports = [e["arguments"]["target_storage_options"] for e in history if e["command"] == "export"]
    assert exports and all(opts and set(opts.values()) == {"<redacted>"} for opts in exports)
    assert any("secret" in opts for opts in exports)  # --target-storage-option
    creates = [e for e in history if e["command"] == "namespace create"]
    assert creates and any(a.endswith("=<redacted>") for a in creates[-1]["arguments"]["argv"])
    assert json.loads(out["job walk"])["status"] == "succeeded"


def assert_no_leaks(planted: Planted, *places: list[str]) -> None:
    leaks = planted.leaks_in_outputs() + [x for p in places for x in p]
    assert not leaks, "secrets leaked:\n" + "\n".join(leaks[:20])


