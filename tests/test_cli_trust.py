"""Issue 54 items 1-5, one focused test each: durations need their unit wherever they are
written, storage options are checked and mapped once, contradictory flags are refused, errors
name their cause, a namespace the CLI cannot address is not created, and an expire run's
headline counts only what it expired."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from trinitylake.cli import cli
from trinitylake.cli.jobs import outcome_lines
from trinitylake.config import load_job_config
from trinitylake.errors import ConfigError
from trinitylake.job_flags import parse_job_args
from trinitylake.runs.results import JobResult
from trinitylake.storage.object_io import _obstore_config
from trinitylake.storage.options import check_storage_options, fileio_properties
from trinitylake.storage.storage import Storage


def tl(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(cli, list(args), input=input)


@pytest.fixture
def lh(tmp_path: Any) -> str:
    uri = str(tmp_path / "lh")
    assert tl("--lakehouse", uri, "--no-audit", "init", "--txn-ttl", "1m").exit_code == 0
    return uri


# ---- 1. durations ------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["flag", "yaml", "env"])
def test_a_duration_without_a_unit_is_refused_wherever_it_is_written(tmp_path: Any, where: str) -> None:
    conf = tmp_path / "orphans.yaml"
    conf.write_text("older_than: 5\n" if where == "yaml" else "{}\n")
    argv = ["--lakehouse", str(tmp_path / "lh"), "--conf", str(conf)] + (["--older-than", "5"] if where == "flag" else [])
    env = {"TLAKE_ORPHANS_OLDER_THAN": "5"} if where == "env" else {}
    with pytest.raises(ConfigError, match="'5' has no unit: write 5s, 5m, 5h or 5d") as e:
        parse_job_args("orphans", argv, env=env)
    assert {"flag": "--older-than", "yaml": str(conf), "env": "TLAKE_ORPHANS_OLDER_THAN"}[where] in str(e.value)
    # With its unit it loads; zero needs none; a Python caller's int is milliseconds.
    assert parse_job_args("orphans", [*argv[:2], "--older-than", "5d"], env={}).older_than == 5 * 86_400_000
    assert parse_job_args("orphans", [*argv[:2], "--older-than", "0"], env={}).older_than == 0
    assert load_job_config("orphans", overrides={"lakehouse": "/x", "older_than": 5}, env={}).older_than == 5


def test_every_duration_flag_of_the_cli_refuses_a_bare_number(lh: str) -> None:
    for args in (["expire", "--max-version-age", "5"], ["expire", "--clock-skew-margin", "5"],
                 ["orphans", "--older-than", "5"], ["walk", "--keep-runs-max-age", "5"],
                 ["tables", "expire-snapshots", "--older-than", "5"], ["tables", "remove-orphans", "--older-than", "5"],
                 ["export", "--name", "e", "--target", lh + "-x", "--keep-runs-max-age", "5"],
                 ["txn", "begin", "--distributed", "--ttl", "5"]):
        r = tl("--lakehouse", lh, "--no-audit", *args)
        assert r.exit_code == 2 and "no unit" in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
    r = tl("--lakehouse", lh + "-2", "init", "--txn-ttl", "5")
    assert r.exit_code == 2 and "no unit" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_show_since_takes_a_duration(lh: str) -> None:
    tl("--lakehouse", lh, "namespace", "create", "n1")
    recent = tl("--lakehouse", lh, "show", "--since", "1h", "--json")
    assert recent.exit_code == 0, recent.stderr
    assert "namespace create" in [e["command"] for e in json.loads(recent.stdout)]
    future = tl("--lakehouse", lh, "show", "--since", "2999-01-01T00:00:00Z", "--json")
    assert json.loads(future.stdout) == []


# ---- 2. storage options ------------------------------------------------------------------


def test_region_is_mapped_for_each_client() -> None:
    opts = check_storage_options({"region": "eu-west-1", "endpoint_url": "http://s3:9000", "anon": "true"})
    assert opts == {"endpoint_url": "http://s3:9000", "anon": True, "client_kwargs": {"region_name": "eu-west-1"}}
    assert fileio_properties(opts)["s3.region"] == "eu-west-1"  # PyIceberg's FileIO
    assert _obstore_config(opts)[0]["region"] == "eu-west-1"  # the asynchronous engine
    assert Storage("s3://b/lh", {"region_name": "eu-west-1"}).options["client_kwargs"] == {"region_name": "eu-west-1"}
    kwargs = check_storage_options({"client_kwargs": '{"region_name": "us-east-2"}'})
    assert kwargs == {"client_kwargs": {"region_name": "us-east-2"}}


@pytest.mark.parametrize(("options", "named"), [
    ({"endpointurl": "http://x"}, "unknown key 'endpointurl'; known: endpoint_url, region"),
    ({"client_kwargs": "{not json"}, "client_kwargs must be a JSON object"),
    ({"client_kwargs": {"regoin_name": "x"}}, "unknown key 'regoin_name' in client_kwargs"),
    ({"anon": "maybe"}, "anon must be true or false"),
    ({"secret": {"a": "hidden-value"}}, "secret must be text"),
])
def test_a_bad_storage_option_is_one_typed_line(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named) as e:
        Storage("s3://b/lh", options)  # every entry point builds its storage: the one check
    assert "hidden-value" not in str(e.value) and "\n" not in str(e.value)


def test_the_cli_refuses_an_unknown_storage_option_before_any_command(lh: str) -> None:
    r = tl("--lakehouse", "s3://b/lh", "--storage-option", "endpointurl=http://x", "namespace", "list")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "endpointurl" in r.stderr and "endpoint_url" in r.stderr


# ---- 3. flags ----------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [["--minimal", "--partial"], ["--full", "--minimal"], ["--mode", "full", "--partial"],
                                   ["--minimal", "--depth", "1"], ["--no-verify", "--verify-checksum"],
                                   ["--partial", "--with-tables"], ["--version", "0", "--as-of", "2026-01-01"]])
def test_contradictory_export_flags_are_refused(lh: str, tmp_path: Any, flags: list[str]) -> None:
    r = tl("--lakehouse", lh, "--no-audit", "export", "--name", "x", "--target", str(tmp_path / "t"), *flags)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "t").exists()


def test_export_takes_every_export_option_from_the_option_table(lh: str, tmp_path: Any) -> None:
    help_text = tl("export", "--help").stdout
    for flag in ("--reference-time", "--run-id", "--remote", "--keep-runs", "--mode", "--depth", "[default: full]"):
        assert flag in help_text, flag
    r = tl("--lakehouse", lh, "--no-audit", "export", "--name", "x", "--target", str(tmp_path / "t"), "--minimal",
           "--run-id", "my-run", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["run_id"] == "my-run" and json.loads(r.stdout)["details"]["mode"] == "minimal"


def test_every_option_has_help_and_every_command_a_description() -> None:
    import click

    def walk(cmd: click.Command, path: str) -> list[str]:
        missing = [] if (cmd.help or cmd.short_help) else [f"{path}: no description"]
        ctx = click.Context(cmd)
        missing += [f"{path} {max(p.opts, key=len)}: no help" for p in cmd.get_params(ctx)
                    if isinstance(p, click.Option) and not p.help]
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                missing += walk(sub, f"{path} {name}")
        return missing

    missing = [m for m in walk(cli, "tlake") if not m.startswith("tlake catalog")]  # the server's: tests/rest_catalog
    assert missing == []


def test_a_click_usage_error_is_one_line_exit_2() -> None:
    r = tl("namespace", "create")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "tlake namespace create: Missing argument 'NAME'" in r.stderr


# ---- 4. errors that name the cause -------------------------------------------------------


def test_a_target_that_is_a_file_is_named(lh: str, tmp_path: Any) -> None:
    (tmp_path / "afile").write_text("x")
    r = tl("--lakehouse", lh, "--no-audit", "export", "--name", "x", "--target", str(tmp_path / "afile"), "--minimal")
    assert r.exit_code == 1 and "is a file, not a folder" in r.stderr and "Errno" not in r.stderr, r.stderr


@pytest.mark.s3
def test_a_missing_bucket_is_named(s3_server: Any) -> None:
    opts = [f"endpoint_url={s3_server.endpoint_url}"]
    for args in (["namespace", "list"], ["init"]):
        r = tl("--lakehouse", "s3://no-such-bucket/lh", *[a for o in opts for a in ("--storage-option", o)], *args)
        assert r.exit_code == 1 and "bucket 'no-such-bucket' does not exist" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and "\x1b[" not in r.stderr and "Kernel" not in r.stderr
    bucket = s3_server.create_bucket()
    lh = f"s3://{bucket}/lh"
    assert tl("--lakehouse", lh, "--storage-option", opts[0], "--no-audit", "init").exit_code == 0
    r = tl("--lakehouse", lh, "--storage-option", opts[0], "--no-audit", "export", "--name", "dr",
           "--target", "s3://no-dr-bucket/x", "--minimal")
    assert r.exit_code == 1 and "bucket 'no-dr-bucket' does not exist" in r.stderr, r.stderr


# ---- 5. namespaces and concurrent expire runs --------------------------------------------


def test_a_namespace_the_cli_cannot_address_is_not_created(lh: str) -> None:
    r = tl("--lakehouse", lh, "namespace", "create", "a.b")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "dot" in r.stderr
    assert json.loads(tl("--lakehouse", lh, "namespace", "list", "--json").stdout)["namespaces"] == []


def test_an_expire_headline_counts_only_what_this_run_expired() -> None:
    """The second of two concurrent runs finishes deleting the files of the first one's 35
    versions and expires 1 of its own: its headline says 1, and the 35 apart."""
    r = JobResult(job="expire", run_id="r2", lakehouse="/lh", status="succeeded",
                  counts={"versions_expired": 1, "versions_leftover": 35, "candidates": 3},
                  details={"oldest_retained_after": 40})
    lines = outcome_lines(r)
    assert lines[0] == "expired 1 versions (oldest retained now 40)"
    assert lines[1] == "deleted the remaining files of 35 versions an earlier or concurrent run expired"


def test_contradictory_time_travel_flags_are_refused(lh: str) -> None:
    r = tl("--lakehouse", lh, "namespace", "list", "--version", "0", "--as-of", "2026-01-01")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "--version and --as-of contradict" in r.stderr


def test_another_stores_options_pass_as_they_are(tmp_path: Any) -> None:
    """S3's keys are known; an fsspec store of another scheme (Azure, GCS) takes its own."""
    env = {"TLAKE_STORAGE_OPTIONS": '{"account_name": "acct", "sas_token": "x"}'}
    cfg = load_job_config("walk", overrides={"lakehouse": "abfs://c/lh"}, env=env)
    assert dict(cfg.storage_options) == {"account_name": "acct", "sas_token": "x"}
    with pytest.raises(ConfigError, match="environment variable TLAKE_STORAGE_OPTIONS: .*unknown key 'account_name'"):
        load_job_config("walk", overrides={"lakehouse": "s3://b/lh"}, env=env)
    layered = load_job_config("export", overrides={"lakehouse": "/lh", "name": "n", "target": "s3://b/x",
                                                   "target_storage_options": ["region=eu-west-1"]},
                              env={"TLAKE_EXPORT_TARGET_STORAGE_OPTIONS": '{"client_kwargs": {"verify": false}}'})
    assert dict(layered.target_storage_options) == {"client_kwargs": {"verify": False, "region_name": "eu-west-1"}}
