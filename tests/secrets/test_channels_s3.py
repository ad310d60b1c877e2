"""Secrets never leave the process on the S3 test server: the same commands and jobs as
tests/secrets/test_channels.py (whose docstring says what is planted and scanned), with real
S3 credentials on the signing path, credentials from the environment only, and an
unreachable endpoint whose URI holds a password. A file of its own so that pytest-xdist runs it
beside the local one."""

from __future__ import annotations

import pytest

from tests.secrets.channels import assert_no_leaks, check_recorded_redacted, every_command, plant_channels

pytestmark = pytest.mark.slow


@pytest.mark.s3
def test_every_command_and_job_on_s3(planted, tmp_path, s3_server):
    bucket = s3_server.create_bucket()
    storage, spark = plant_channels(planted, s3_endpoint=s3_server.endpoint_url)
    out = every_command(planted, f"s3://{bucket}/lh", storage, spark, cwd=tmp_path,
                        export_target=f"s3://{bucket}/exports", log_level="INFO")
    check_recorded_redacted(out)
    g = ["--lakehouse", f"s3://{bucket}/lh", "--storage-option", f"endpoint_url={s3_server.endpoint_url}"]
    # Credentials only from the environment, with the wire-level DEBUG logs of botocore on.
    env = {"AWS_ACCESS_KEY_ID": planted.new("env_aws_key_id", "AKIA"), "AWS_SECRET_ACCESS_KEY": planted.new("env_aws_secret")}
    planted.tlake([*g, "--log-level", "DEBUG", "namespace", "create", "from_env"], cwd=tmp_path, env=env)
    planted.tlake([*g, "--log-level", "DEBUG", "walk", "--json"], cwd=tmp_path, env=env)
    # An endpoint whose URI holds a password: refused before any request (a signed client cannot
    # send a URL with credentials in it), by an error that quotes the URI.
    bad = planted.tlake(["--lakehouse", f"s3://{bucket}/lh", "--storage-option",
                         f"endpoint_url=http://ops:{planted.new('bad_endpoint_password')}@127.0.0.1:9",
                         "--storage-option", f"secret={planted.new('s3_secret_2')}", "show"], cwd=tmp_path, ok=False)
    assert "endpoint_url http://ops:<redacted>@127.0.0.1:9 carries credentials" in bad.stderr
    assert_no_leaks(planted, planted.leaks_in_bucket(s3_server.client, bucket), planted.leaks_in_dir(tmp_path))
