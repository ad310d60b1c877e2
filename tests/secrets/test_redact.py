"""The redaction rule itself (`trinitylake.redact`): which keys are credentials, which value
shapes are, what stays readable for an operator."""

from __future__ import annotations

import io
import json
import logging
import uuid

import pytest

from trinitylake import redact
from trinitylake.redact import (
    REDACTED,
    RedactingFilter,
    is_secret_key,
    redact_argv,
    redact_text,
    redact_value,
    remember,
    secret_options,
)

SECRET_KEYS = [
    "secret", "key", "token", "password", "passwd", "client_secret", "sas_token", "account_key", "connection_string",
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "AWS_SECRET_ACCESS_KEY", "AZURE_CLIENT_SECRET",
    "AZURE_STORAGE_KEY", "spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.access.key", "fs.s3a.session.token",
    "fs.s3a.bucket.my-bucket.secret.key", "fs.s3a.encryption.key", "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
    "fs.azure.sas.container.acct.blob.core.windows.net", "fs.azure.account.oauth2.client.secret", "fs.gs.auth.service.account.private.key",
    "spark.ssl.keyPassword", "spark.authenticate.secret", "Authorization", "X-Amz-Security-Token", "X-Amz-Signature", "sig",
    "credentials", "refresh_token", "apiKey", "privateKey", "DATABRICKS_TOKEN",
]
KEPT_KEYS = [
    "endpoint_url", "region_name", "region", "anon", "client_kwargs", "use_ssl", "spark.master", "spark.hadoop.fs.s3a.endpoint",
    "fs.s3a.endpoint.region", "fs.s3a.aws.credentials.provider", "fs.s3a.path.style.access", "fs.azure.account.auth.type",
    "fs.azure.account.oauth2.client.id", "fs.azure.account.oauth2.client.endpoint", "fs.azure.sas.token.provider.type",
    "spark.ssl.keyStore", "account_name", "username", "lakehouse", "control_uri", "run_id", "dry_run", "bucket",
    "spark.hadoop.google.cloud.auth.service.account.json.keyfile", "fs.s3a.assumed.role.arn", "", None, 3,
]


def unique(label: str) -> str:
    return f"Zq{label}{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_credential_keys_are_secret(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", KEPT_KEYS)
def test_setting_keys_are_kept(key):
    assert not is_secret_key(key)


def test_options_keep_names_endpoints_regions_and_buckets():
    s1, s2, s3 = unique("a"), unique("b"), unique("c")
    doc = {
        "lakehouse": "s3://my-bucket/lh",
        "storage_options": {"key": s1, "secret": s2, "endpoint_url": "http://minio:9000", "region": "eu-west-1",
                            "client_kwargs": {"region_name": "eu-west-1", "aws_session_token": s3}, "anon": False},
        "spark_conf": {"spark.hadoop.fs.s3a.secret.key": s2, "spark.hadoop.fs.s3a.endpoint": "http://minio:9000",
                       "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"},
        "counts": {"deleted": 3},
    }
    out = redact_value(doc)
    text = json.dumps(out)
    assert not any(s in text for s in (s1, s2, s3))
    assert out["storage_options"] == {"key": REDACTED, "secret": REDACTED, "endpoint_url": "http://minio:9000",
                                      "region": "eu-west-1",
                                      "client_kwargs": {"region_name": "eu-west-1", "aws_session_token": REDACTED},
                                      "anon": False}
    assert out["spark_conf"]["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"
    assert out["spark_conf"]["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("SimpleAWSCredentialsProvider")
    assert out["lakehouse"] == "s3://my-bucket/lh" and out["counts"] == {"deleted": 3}
    assert doc["storage_options"]["secret"] == s2, "the input is not changed"


def test_unset_credentials_and_databricks_references_stay_visible():
    out = redact_value({"secret": None, "token": "", "password": "{{secrets/scope/pw}}", "key": True})
    assert out == {"secret": None, "token": "", "password": "{{secrets/scope/pw}}", "key": True}


def test_uri_password_is_dropped_user_and_host_kept():
    pw = unique("pw")
    assert redact_text(f"https://alice:{pw}@host.example:8443/path?x=1") == f"https://alice:{REDACTED}@host.example:8443/path?x=1"
    assert redact_value({"endpoint_url": f"http://u:{pw}@minio:9000"}) == {"endpoint_url": f"http://u:{REDACTED}@minio:9000"}
    assert redact_text("s3://bucket/a:b/c@d") == "s3://bucket/a:b/c@d"  # no userinfo: untouched
    assert redact_text("http://user@host/") == "http://user@host/"


def test_command_lines():
    s1, s2, s3, s4, s5 = (unique(x) for x in "abcde")
    argv = ["--lakehouse", f"s3://u:{s5}@h/b", "--storage-option", f"secret={s1}", "walk", "--spark-conf",
            f"spark.hadoop.fs.s3a.secret.key={s2}", "--password", s3, f"--token={s4}", "--storage-option",
            json.dumps({"key": s1, "endpoint_url": "http://h"}), "--dry-run"]
    out = redact_argv(argv)
    assert not any(s in " ".join(out) for s in (s1, s2, s3, s4, s5))
    assert out[3] == f"secret={REDACTED}" and out[6] == f"spark.hadoop.fs.s3a.secret.key={REDACTED}"
    assert out[7:10] == ["--password", REDACTED, f"--token={REDACTED}"]
    assert json.loads(out[11]) == {"key": REDACTED, "endpoint_url": "http://h"}
    assert out[-1] == "--dry-run" and out[4] == "walk"
    assert secret_options(argv) == ["a URI with a password", "secret", "spark.hadoop.fs.s3a.secret.key", "--password",
                                    "--token", "a JSON option map"]
    assert secret_options(["--lakehouse", "/x", "--storage-option", "endpoint_url=http://h", "walk"]) == []


@pytest.mark.parametrize("template", [
    "boom: secret={s}", "boom: {{'secret': '{s}', 'endpoint_url': 'http://h'}}", 'boom {{"token": "{s}"}}',
    "Authorization: Bearer {s}", "AccountKey={s};EndpointSuffix=core.windows.net", "https://a.blob.core.windows.net/c?sv=1&sig={s}&se=2",
    "X-Amz-Credential={s}/20260101/us-east-1", "password: {s}", "--storage-option secret={s}", "redis://:{s}@cache:6379",
    "bad: got '{{\"spark.hadoop.fs.s3a.secret.key\": {{\"a\": \"{s}\"}}}}'", "note: token={s}",
    "headers={{'X-Amz-Security-Token': b'{s}', 'User-Agent': b'botocore'}}",
    "sc://connect.example:15002/;token={s};user_id=ops", "jdbc:postgresql://db:5432/x?user=me&password={s}",
])
def test_free_text(template):
    s = unique("t")
    out = redact_text(template.format(s=s))
    assert s not in out and REDACTED in out


def test_value_shapes_anywhere():
    text = "AKIAABCDEFGHIJKLMNOP eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghij " \
           "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"
    out = redact_text(text)
    assert "AKIAABCDEFGHIJKLMNOP" not in out and "eyJzdWIi" not in out and "MIIE" not in out


def test_operator_text_is_untouched():
    for text in ("walk of s3://bucket/lh/_maintenance: 12 files, region us-east-1, endpoint http://minio:9000 (version 3)",
                 "bad value for option 'storage_options': expected KEY=VALUE, got 'x'",
                 "SignatureDoesNotMatch: The request signature we calculated does not match"):
        assert redact_text(text) == text


def test_redaction_is_idempotent():
    s = unique("i")
    once = redact_value({"argv": ["--storage-option", f"secret={s}"], "error": f"secret={s}"})
    assert redact_value(once) == once


def test_learned_values_are_scrubbed_from_later_text():
    s = unique("learned")
    redact_value({"storage_options": {"secret": s}}, learn=True)
    assert redact_text(f"botocore: signature mismatch for {s}") == f"botocore: signature mismatch for {REDACTED}"
    other = unique("notlearned")
    redact_value({"storage_options": {"secret": other}})  # a document, not options: nothing learned
    assert redact_text(f"x {other}") == f"x {other}"


def test_short_values_are_not_learned():
    remember("abc")
    assert redact_text("abc is a path segment") == "abc is a path segment"


def test_environment_credentials_are_learned():
    s = unique("env")
    redact.remember_environment({"AWS_SECRET_ACCESS_KEY": s, "HOME": "/home/someone-long"})
    assert s not in redact_text(f"error: {s}")
    assert redact_text("/home/someone-long") == "/home/someone-long"


def test_the_shell_working_directory_is_not_a_password(tmp_path):
    # PWD reads like "password"; remembering it flagged every command run from that folder.
    here = str(tmp_path / "work-folder-of-the-shell")
    redact.remember_environment({"PWD": here, "OLDPWD": here + "-before"})
    assert redact_text(f"{here}/lakehouse") == f"{here}/lakehouse"
    assert redact.secret_options(["--lakehouse", f"{here}/lh", "--target", f"{here}-before/x"]) == []


def test_log_filter_redacts_message_args_and_traceback():
    s = unique("log")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger(f"tests.secrets.{uuid.uuid4().hex}")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("options %s", {"secret": s})
    try:
        raise ValueError(f"bad token={s}")
    except ValueError:
        logger.exception("failed with password=%s", s)
    text = stream.getvalue()
    assert s not in text
    assert text.count(REDACTED) >= 3 and "ValueError" in text


def test_command_line_warning_once(capsys, monkeypatch):
    monkeypatch.setattr(redact, "_warned", False)
    s = unique("w")
    assert redact.warn_command_line_secrets(["--storage-option", f"secret={s}", "walk"])
    assert not redact.warn_command_line_secrets(["--storage-option", f"secret={s}"])
    err = capsys.readouterr().err
    assert err.count("WARNING") == 1 and "secret" in err and s not in err
    monkeypatch.setattr(redact, "_warned", False)
    assert not redact.warn_command_line_secrets(["--storage-option", "endpoint_url=http://h", "walk"])


def test_redact_module_is_the_lowest_layer():
    """Every layer may use it, so it imports nothing from the package."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(redact))
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + \
               [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported and not [m for m in imported if m and m.split(".")[0] == "trinitylake"]
