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
    # An unreachable endpoint whose URI holds a password: the error message quotes the URI.
    # botocore tries once per storage attempt (AWS_MAX_ATTEMPTS, an operator's setting we honour):
    # its default 5 tries with up to 8 s pauses, under our 5, made this one command 30-60 s of
    # sleeping; the message, what this checks, is the same after 5 refused connections or 25.
    planted.tlake(["--lakehouse", f"s3://{bucket}/lh", "--storage-option",
                   f"endpoint_url=http://ops:{planted.new('bad_endpoint_password')}@127.0.0.1:9",
                   "--storage-option", f"secret={planted.new('s3_secret_2')}", "show"], cwd=tmp_path, ok=False,
                  env={"AWS_MAX_ATTEMPTS": "1"})
    assert_no_leaks(planted, planted.leaks_in_bucket(s3_server.client, bucket), planted.leaks_in_dir(tmp_path))
