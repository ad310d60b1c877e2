"""Disaster recovery to another store, from every entry point: an export whose target lives on a
second S3 server, reached only through the target's own storage options.

The lakehouse lives on the session's moto server. The target is a second moto server in a
process of its own (its own buckets) that checks credentials: only the access key made for it
on its IAM works there, so the lakehouse's credentials (which the target used to share) are
refused, and an export that lands there used the target's options. They are given as
``tlake export --target-storage-option``, as the ``TLAKE_TARGET_*`` environment, and in the
``--conf`` YAML of ``jobs/export.py``. Each export is checked byte for byte (boto3 on both
servers), read back by the independent oracle, and the first server holds nothing outside the
source. The last test scans every output, log and stored object of the runs for the target's
credentials.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.secrets.conftest import Planted
from trinitylake.cli import cli
from trinitylake.config import load_job_config
from trinitylake.errors import ConfigError
from trinitylake.format.paths import HINT_FILE
from trinitylake.job_flags import parse_job_args
from trinitylake.storage.target_options import TARGET_ENV, resolve_target_options, target_options_from_env

from .conftest import contents, populate, reachable

pytestmark = pytest.mark.s3

ROOT = Path(__file__).resolve().parents[2]
LAKE = "lh"  # the source lakehouse's prefix in its bucket


# ---- the second store -------------------------------------------------------------------------
@dataclass
class DRServer:
    """A moto server in its own process that accepts only `key`/`secret` (its IAM user's)."""

    endpoint_url: str
    key: str
    secret: str
    _client: Any = field(default=None, repr=False)

    @property
    def options(self) -> dict[str, str]:
        return {"endpoint_url": self.endpoint_url, "key": self.key, "secret": self.secret}

    def flags(self) -> list[str]:
        return [a for k, v in self.options.items() for a in ("--target-storage-option", f"{k}={v}")]

    def env(self) -> dict[str, str]:
        return {"TLAKE_TARGET_S3_ENDPOINT_URL": self.endpoint_url, "TLAKE_TARGET_AWS_ACCESS_KEY_ID": self.key,
                "TLAKE_TARGET_AWS_SECRET_ACCESS_KEY": self.secret}

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _s3_client(self.endpoint_url, self.key, self.secret)
        return self._client

    def create_bucket(self) -> str:
        name = f"dr-{os.urandom(8).hex()}"
        self.client.create_bucket(Bucket=name)
        return name


def _s3_client(endpoint_url: str, key: str, secret: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url, aws_access_key_id=key, aws_secret_access_key=secret,
                        region_name="us-east-1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def dr_server(s3_server) -> Any:
    """The second store: ``moto.server`` in a subprocess with authentication on after the three
    IAM calls that make its one user (every action allowed) and that user's access key."""
    import boto3

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TLAKE_"))}
    env |= {"INITIAL_NO_AUTH_ACTION_COUNT": "3", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the second moto server did not start (exit code {proc.poll()})")
                time.sleep(0.1)
        iam = boto3.client("iam", endpoint_url=url, aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap",
                           region_name="us-east-1")
        iam.create_user(UserName="dr")
        iam.put_user_policy(UserName="dr", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="dr")["AccessKey"]
        yield DRServer(url, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ---- the source -------------------------------------------------------------------------------
@dataclass
class Source:
    lh: Any
    version: int
    bucket: str
    options: dict[str, str]

    def flags(self) -> list[str]:
        return ["--lakehouse", self.lh.uri,
                *(a for k, v in self.options.items() for a in ("--storage-option", f"{k}={v}"))]


@pytest.fixture
def planted() -> Planted:
    return Planted()


@pytest.fixture
def source(s3_server, planted) -> Source:
    """A small multi-level lakehouse on the session's server, audited, with credentials of its
    own (planted: the secrets test looks for them too; the session server takes any key)."""
    from trinitylake.lakehouse import Lakehouse

    bucket = s3_server.create_bucket()
    options = {"endpoint_url": s3_server.endpoint_url, "key": planted.new("src_key", "AKIA"),
               "secret": planted.new("src_secret")}
    lh = Lakehouse.create(f"s3://{bucket}/{LAKE}", storage_options=options, order=4, node_max_bytes=4096)
    return Source(lh, populate(lh, namespaces=2, tables=3, alters=1, drops=1), bucket, options)


def _keys(client: Any, bucket: str, prefix: str = "") -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _body(client: Any, bucket: str, key: str) -> bytes:
    return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())


def _plan(dr: DRServer, bucket: str, prefix: str, name: str) -> dict[str, str]:
    """``path -> action`` (copy: verbatim; rewrite: pointers or records changed) of the export's
    plan at the target: its Parquet parts and, in the index, the root."""
    import pyarrow.parquet as pq

    plan = f"{prefix}/_export/{name}/plan/"
    actions: dict[str, str] = {}
    for key in _keys(dr.client, bucket, plan):
        if key.endswith(".parquet"):
            rows = pq.read_table(io.BytesIO(_body(dr.client, bucket, key)), columns=["target", "action"]).to_pylist()
            actions |= {r["target"]: r["action"] for r in rows}
    root = json.loads(_body(dr.client, bucket, f"{plan}_plan.json"))["root"]
    return actions | {root["path"]: root["action"]}


def assert_landed(src: Source, s3_server: Any, dr: DRServer, bucket: str, prefix: str, name: str) -> None:
    """The export `name` at ``s3://bucket/prefix`` on the second server: every file the version
    reaches; those the plan copies verbatim byte for byte the source's (boto3 on each server),
    the rewritten ones (root and lakehouse definition: their pointers) read back by the oracle
    as the source's version; and nothing on the first server outside the source's folder."""
    files = {k.removeprefix(f"{prefix}/"): k for k in _keys(dr.client, bucket, f"{prefix}/")}
    data = {rel: k for rel, k in files.items() if not rel.startswith("_export/")}
    want = reachable(src.lh, src.version).paths()
    assert set(data) == want | {HINT_FILE}
    actions = _plan(dr, bucket, prefix, name)
    assert set(actions) == want
    copied = sorted(rel for rel, action in actions.items() if action == "copy")
    assert len(copied) > len(want) // 2
    for rel in copied:
        assert _body(dr.client, bucket, data[rel]) == _body(s3_server.client, src.bucket, f"{LAKE}/{rel}"), rel
    assert contents(f"s3://{bucket}/{prefix}", None, dr.options) == contents(src.lh.uri, src.version, src.options)
    # The first server: no bucket of the target's name, and the source's bucket holds the
    # lakehouse's folder only (files, control table, _maintenance).
    assert bucket not in {b["Name"] for b in s3_server.client.list_buckets()["Buckets"]}
    assert {k.split("/", 1)[0] for k in _keys(s3_server.client, src.bucket)} == {LAKE}


def _tlake(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


# ---- the tests --------------------------------------------------------------------------------
def test_the_second_store_refuses_the_lakehouse_credentials(dr_server, source):
    """What makes the tests below mean something: the lakehouse's options cannot write there."""
    from botocore.exceptions import ClientError

    bucket = dr_server.create_bucket()
    stranger = _s3_client(dr_server.endpoint_url, source.options["key"], source.options["secret"])
    with pytest.raises(ClientError, match="InvalidAccessKeyId"):
        stranger.put_object(Bucket=bucket, Key="x", Body=b"x")


def test_cli_flags_export_to_another_store(source, dr_server, s3_server):
    bucket = dr_server.create_bucket()
    target = f"s3://{bucket}/dr1"
    res = _tlake(*source.flags(), "export", "--name", "dr1", "--target", target, *dr_server.flags(), "--json")
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["status"] == "succeeded" and r["details"]["target"] == target and r["counts"]["copied"] > 0
    assert_landed(source, s3_server, dr_server, bucket, "dr1", "dr1")
    assert dr_server.secret not in res.output and dr_server.secret not in res.stderr
    # Recorded in the lakehouse (on the first server) as an export at the second one's URI.
    listed = json.loads(_tlake(*source.flags(), "export", "list", "--json").stdout)["exports"]
    assert [(e["name"], e["root"].rsplit("/", 1)[0]) for e in listed] == [("dr1", target)]


def test_environment_gives_the_target_its_store(source, dr_server, s3_server, monkeypatch):
    for var, value in dr_server.env().items():
        monkeypatch.setenv(var, value)
    bucket = dr_server.create_bucket()
    res = _tlake(*source.flags(), "export", "--name", "dr-env", "--target", f"s3://{bucket}/env", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["status"] == "succeeded"
    assert_landed(source, s3_server, dr_server, bucket, "env", "dr-env")
    # A flag wins over the environment: a wrong secret there, the right one on the command line.
    monkeypatch.setenv("TLAKE_TARGET_AWS_SECRET_ACCESS_KEY", "not-the-secret-of-the-dr-server")
    other = dr_server.create_bucket()
    res = _tlake(*source.flags(), "export", "--name", "dr-env2", "--target", f"s3://{other}/env", "--version", str(source.version),
                 "--target-storage-option", f"secret={dr_server.secret}", "--json")
    assert res.exit_code == 0, res.output
    assert_landed(source, s3_server, dr_server, other, "env", "dr-env2")


def test_yaml_config_of_the_spark_submit_job(source, dr_server, s3_server, tmp_path):
    """``target_storage_options:`` in the job's --conf file: loaded by the config alone, then
    jobs/export.py run on the driver (``--execution local``: Spark never starts)."""
    bucket = dr_server.create_bucket()
    conf = tmp_path / "export.yaml"
    conf.write_text(yaml.safe_dump({"execution": "local", "target_storage_options": dr_server.options}))
    cfg = load_job_config("export", str(conf), overrides={"lakehouse": source.lh.uri, "name": "y",
                                                          "target": f"s3://{bucket}/y"}, env={})
    assert dict(cfg.target_storage_options) == dr_server.options and cfg.sources["target_storage_options"] == "file"

    args = [*source.flags(), "--conf", str(conf), "--name", "dr-yaml", "--target", f"s3://{bucket}/yaml",
            "--version", str(source.version)]
    p = subprocess.run([sys.executable, str(ROOT / "jobs" / "export.py"), *args], capture_output=True, text=True,
                       cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["status"] == "succeeded" and r["details"]["spark"]["started"] is False
    assert_landed(source, s3_server, dr_server, bucket, "yaml", "dr-yaml")
    assert dr_server.secret not in p.stdout + p.stderr


def test_layers_of_the_target_options(tmp_path):
    """conf file < TLAKE_EXPORT_TARGET_STORAGE_OPTIONS < --target-storage-option, merged per key;
    a JSON object in the environment; values typed as the lakehouse's storage options are."""
    conf = tmp_path / "export.yaml"
    conf.write_text("target_storage_options:\n  endpoint_url: http://from-file:9000\n  region_name: eu-west-1\n")
    env = {"TLAKE_EXPORT_TARGET_STORAGE_OPTIONS": '{"endpoint_url": "http://from-env:9000", "use_ssl": false}'}
    cfg = parse_job_args("export", ["--conf", str(conf), "--lakehouse", "s3://a/lh", "--name", "n", "--target",
                                    "s3://b/x", "--target-storage-option", "client_kwargs.region_name=us-east-2",
                                    "--target-storage-option", "anon=true"], env=env)
    # The file's region_name goes where s3fs takes it (client_kwargs, storage.options.check_storage_options);
    # the flag's client_kwargs.region_name wins over it.
    assert dict(cfg.target_storage_options) == {"endpoint_url": "http://from-env:9000",
                                                "use_ssl": False, "client_kwargs": {"region_name": "us-east-2"},
                                                "anon": True}
    assert cfg.storage_options == {}  # the lakehouse's own options are another option
    defaults = load_job_config("export", overrides={"lakehouse": "s3://a/lh", "name": "n", "target": "s3://b/x"},
                               env={})
    assert defaults.target_storage_options == {} and defaults.sources["target_storage_options"] == "default"


def test_resolution_of_the_target_options():
    env = {"TLAKE_TARGET_S3_ENDPOINT_URL": "http://dr:9000", "TLAKE_TARGET_AWS_ACCESS_KEY_ID": "AKIADRKEY",
           "TLAKE_TARGET_AWS_SECRET_ACCESS_KEY": "dr-secret", "TLAKE_TARGET_AWS_SESSION_TOKEN": "dr-token"}
    assert set(TARGET_ENV) == set(env)
    # Nothing given: None, so the target keeps sharing the lakehouse's options (as before).
    assert resolve_target_options("s3://b/x", {}, env={}) is None
    assert resolve_target_options("s3://b/x", {"anon": None}, env={}) is None
    # The environment alone; the options win over it key by key; explicit credentials drop its token.
    assert resolve_target_options("s3://b/x", {}, env=env) == {"endpoint_url": "http://dr:9000", "key": "AKIADRKEY",
                                                               "secret": "dr-secret", "token": "dr-token"}
    assert resolve_target_options("s3://b/x", {"key": "AKIAOTHER", "secret": "other"}, env=env) == {
        "endpoint_url": "http://dr:9000", "key": "AKIAOTHER", "secret": "other"}
    assert resolve_target_options("s3://b/x", {"client_kwargs": {"endpoint_url": "http://c:1"}}, env=env) == {
        "key": "AKIADRKEY", "secret": "dr-secret", "token": "dr-token", "client_kwargs": {"endpoint_url": "http://c:1"}}
    # The S3 variables are for an S3 target; a local target ignores them.
    assert resolve_target_options("file:///tmp/x", {}, env=env) is None
    # Options a caller of the job function passes are used as they are (even none).
    assert resolve_target_options("s3://b/x", {"region_name": "x"}, {}, env=env) == {}
    # A secret without its key id would be dropped and the target written with other credentials.
    with pytest.raises(ConfigError, match="TLAKE_TARGET_AWS_SECRET_ACCESS_KEY set without TLAKE_TARGET_AWS_ACCESS_KEY_ID"):
        target_options_from_env({"TLAKE_TARGET_AWS_SECRET_ACCESS_KEY": "s"})
    assert target_options_from_env({"TLAKE_TARGET_S3_ENDPOINT_URL": "  "}) == {}


def test_every_entry_point_lists_the_flag():
    """``tlake export --help`` and ``jobs/export.py --help`` (from the option table) name it."""
    assert "--target-storage-option KEY=VALUE" in _tlake("export", "--help").output
    with pytest.raises(SystemExit) as done:
        parse_job_args("export", ["--help"])
    assert done.value.code == 0
    from trinitylake.job_flags import job_command

    assert any("--target-storage-option" in p.opts for p in job_command("export").params)


def test_orchestrators_pass_the_options_as_the_export_jobs_environment(monkeypatch):
    """The task table gives the export (only) ``TLAKE_EXPORT_TARGET_STORAGE_OPTIONS``: the
    Airflow DAGs from their param/Variable, the Databricks bundle's job cluster from its variable;
    the value an operator sets there parses as the job's option, and an empty one is no option."""
    monkeypatch.syspath_prepend(str(ROOT / "airflow_dags"))
    import trinitylake_tasks as tl

    export = next(t for t in tl.TASKS if t.job == "export")
    assert tl.job_environment(export, target_storage_options="{{ x }}") == {tl.TARGET_OPTIONS_ENV: "{{ x }}"}
    assert tl.job_environment(export) == {}
    assert all(tl.job_environment(t, target_storage_options="x") == {} for t in tl.TASKS if t.job != "export")
    bundle = tl.databricks_job(export_target_storage_options="${var.export_target_storage_options}")
    env = bundle["job_clusters"][0]["new_cluster"]["spark_env_vars"]
    assert env == {tl.TARGET_OPTIONS_ENV: "${var.export_target_storage_options}"}
    assert "spark_env_vars" not in tl.databricks_job()["job_clusters"][0]["new_cluster"]
    assert "export_target_storage_options" in yaml.safe_load((ROOT / "databricks.yml").read_text())["variables"]
    base = {"lakehouse": "s3://a/lh", "name": "n", "target": "s3://b/x"}
    for value, want in (('{"endpoint_url": "https://dr:9000"}', {"endpoint_url": "https://dr:9000"}),
                        ("endpoint_url=https://dr:9000,region_name=eu-west-1",
                         {"endpoint_url": "https://dr:9000", "client_kwargs": {"region_name": "eu-west-1"}}), ("", {})):
        cfg = load_job_config("export", overrides=base, env={tl.TARGET_OPTIONS_ENV: value})
        assert dict(cfg.target_storage_options) == want


@pytest.mark.slow
def test_target_credentials_never_leave_the_process(source, dr_server, s3_server, planted, tmp_path):
    """The target's key id and secret (and the lakehouse's) in no stdout, stderr or DEBUG log of
    `tlake export` and jobs/export.py, in no object of either server (audit rows, plans,
    manifests, the exported files) and no local file; the audit rows name the options with
    ``<redacted>`` values."""
    planted.secrets["dr_key"] = dr_server.key
    planted.secrets["dr_secret"] = dr_server.secret
    bucket = dr_server.create_bucket()
    g = [*source.flags(), "--log-level", "DEBUG"]
    planted.tlake([*g, "export", "--name", "s-flags", "--target", f"s3://{bucket}/flags", *dr_server.flags(),
                   "--json"], cwd=tmp_path)
    planted.tlake([*g, "export", "--name", "s-env", "--target", f"s3://{bucket}/env", "--json"], cwd=tmp_path,
                  env=dr_server.env())
    planted.job("export", [*source.flags(), "--log-level", "DEBUG", "--name", "s-job", "--target",
                           f"s3://{bucket}/job", *dr_server.flags()], cwd=tmp_path)
    planted.env.update(dr_server.env())
    planted.job("export", [*source.flags(), "--name", "s-job-env", "--target", f"s3://{bucket}/job-env"],
                cwd=tmp_path)
    # Errors quote no value either: a secret without its key id, and a bad option value.
    env_error = planted.tlake([*g, "export", "--name", "s-bad", "--target", f"s3://{bucket}/bad", "--json"],
                              cwd=tmp_path, ok=False, env={"TLAKE_TARGET_AWS_ACCESS_KEY_ID": ""})
    assert "TLAKE_TARGET_AWS_SECRET_ACCESS_KEY set without TLAKE_TARGET_AWS_ACCESS_KEY_ID" in env_error.stderr
    planted.tlake([*g, "export", "--name", "s-bad2", "--target", f"s3://{bucket}/bad2", "--target-storage-option",
                   f"secret={dr_server.secret}", "--target-storage-option", "client_kwargs=x", "--target-storage-option",
                   "client_kwargs.endpoint_url=y"], cwd=tmp_path, ok=False)
    planted.tlake([*g, "export", "--help"], cwd=tmp_path)

    history = json.loads(planted.tlake([*g, "show", "--all", "--json"], cwd=tmp_path).stdout)
    runs = [e for e in history if e["command"] == "export" and e["arguments"].get("target_storage_options")]
    assert {e["arguments"]["name"] for e in runs} >= {"s-flags", "s-job"}
    for e in runs:
        assert e["arguments"]["target_storage_options"] == {"endpoint_url": dr_server.endpoint_url,
                                                            "key": "<redacted>", "secret": "<redacted>"}
    assert {e["arguments"]["name"] for e in history if e["command"] == "export"} >= {"s-env", "s-job-env"}
    for prefix in ("flags", "env", "job", "job-env"):
        assert _keys(dr_server.client, bucket, f"{prefix}/_export/"), f"the export {prefix} ran"
    leaks = (planted.leaks_in_outputs() + planted.leaks_in_bucket(s3_server.client, source.bucket)
             + planted.leaks_in_bucket(dr_server.client, bucket) + planted.leaks_in_dir(tmp_path))
    assert not leaks, "secrets leaked:\n" + "\n".join(leaks[:20])


def test_a_target_with_options_of_its_own_never_follows_the_lakehouses_endpoint(monkeypatch):
    """Keys for the target and no endpoint: S3's own endpoint, not the lakehouse's variable."""
    from trinitylake.storage import Storage
    from trinitylake.storage.target_options import resolve_target_options

    monkeypatch.setenv("TLAKE_S3_ENDPOINT_URL", "http://the-lakehouse-store:9000")
    opts = resolve_target_options("s3://dr/lh", {"key": "AK", "secret": "s"}, env={})
    assert opts is not None
    st = Storage("s3://dr/lh", opts)
    assert "endpoint_url" not in st.options and st.options["key"] == "AK"
    # Without options of its own the lakehouse's endpoint variable still applies (as before).
    assert Storage("s3://dr/lh").options["endpoint_url"] == "http://the-lakehouse-store:9000"
