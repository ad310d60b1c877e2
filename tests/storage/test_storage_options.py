"""S3 storage options from the environment (TLAKE_S3_ENDPOINT_URL, AWS_ENDPOINT_URL, credentials)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from trinitylake.errors import ConfigError
from trinitylake.storage import Storage, s3_options_from_env

_ENV = (
    "TLAKE_S3_ENDPOINT_URL",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A clean AWS environment for the test (the S3 server's session values are set aside)."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_no_environment_no_options(env: pytest.MonkeyPatch) -> None:
    assert Storage("s3://bkt").options == {}
    assert s3_options_from_env() == {}


def test_tlake_endpoint(env: pytest.MonkeyPatch) -> None:
    env.setenv("TLAKE_S3_ENDPOINT_URL", "http://127.0.0.1:9000")
    assert Storage("s3://bkt").options == {"endpoint_url": "http://127.0.0.1:9000"}


def test_aws_endpoint(env: pytest.MonkeyPatch) -> None:
    env.setenv("AWS_ENDPOINT_URL", "http://aws-endpoint:9000")
    assert Storage("s3://bkt/lake").options["endpoint_url"] == "http://aws-endpoint:9000"


def test_tlake_endpoint_wins_over_aws(env: pytest.MonkeyPatch) -> None:
    env.setenv("TLAKE_S3_ENDPOINT_URL", "http://tlake:1")
    env.setenv("AWS_ENDPOINT_URL", "http://aws:2")
    assert Storage("s3://bkt").options["endpoint_url"] == "http://tlake:1"


def test_aliases_get_the_same_options(env: pytest.MonkeyPatch) -> None:
    env.setenv("TLAKE_S3_ENDPOINT_URL", "http://tlake:1")
    assert Storage("s3a://bkt/x").options == Storage("s3n://bkt/x").options == {"endpoint_url": "http://tlake:1"}


def test_explicit_options_win(env: pytest.MonkeyPatch) -> None:
    env.setenv("TLAKE_S3_ENDPOINT_URL", "http://env:1")
    env.setenv("AWS_ACCESS_KEY_ID", "env-key")
    env.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    s = Storage("s3://bkt", {"endpoint_url": "http://flag:2", "key": "flag-key", "secret": "flag-secret"})
    assert s.options == {"endpoint_url": "http://flag:2", "key": "flag-key", "secret": "flag-secret"}
    # A None option means "not given": the environment value stays.
    assert Storage("s3://bkt", {"endpoint_url": None}).options["endpoint_url"] == "http://env:1"


def test_explicit_client_kwargs_endpoint_wins(env: pytest.MonkeyPatch) -> None:
    env.setenv("AWS_ENDPOINT_URL", "http://env:1")
    s = Storage("s3://bkt", {"client_kwargs": {"endpoint_url": "http://flag:2"}})
    assert "endpoint_url" not in s.options
    assert s.fs.client_kwargs["endpoint_url"] == "http://flag:2"


def test_credentials_from_environment(env: pytest.MonkeyPatch) -> None:
    env.setenv("AWS_ACCESS_KEY_ID", "AKIA-TEST")
    env.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    assert Storage("s3://bkt").options == {"key": "AKIA-TEST", "secret": "s3cr3t"}
    env.setenv("AWS_SESSION_TOKEN", "tok")  # temporary credentials need their token
    assert Storage("s3://bkt").options == {"key": "AKIA-TEST", "secret": "s3cr3t", "token": "tok"}


def test_explicit_key_does_not_mix_with_the_environment_token(env: pytest.MonkeyPatch) -> None:
    env.setenv("AWS_ACCESS_KEY_ID", "env-key")
    env.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    env.setenv("AWS_SESSION_TOKEN", "env-token")
    s = Storage("s3://bkt", {"key": "flag-key", "secret": "flag-secret"})
    assert s.options == {"key": "flag-key", "secret": "flag-secret"}
    s = Storage("s3://bkt", {"key": "flag-key", "secret": "flag-secret", "token": "flag-token"})
    assert s.options["token"] == "flag-token"


def test_endpoint_reaches_the_filesystem(env: pytest.MonkeyPatch) -> None:
    env.setenv("TLAKE_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    s = Storage("s3://bkt")
    assert s.fs.client_kwargs["endpoint_url"] == "http://127.0.0.1:9"  # no connection made yet


def test_other_schemes_ignore_the_s3_environment(env: pytest.MonkeyPatch, tmp_path: Any) -> None:
    env.setenv("TLAKE_S3_ENDPOINT_URL", "http://env:1")
    env.setenv("AWS_ACCESS_KEY_ID", "env-key")
    assert Storage(str(tmp_path)).options == {}
    assert Storage("memory://m/x").options == {}


def test_options_travel_with_the_storage(env: pytest.MonkeyPatch) -> None:
    # Spark executors may lack the driver's environment: pickled options must be complete.
    env.setenv("TLAKE_S3_ENDPOINT_URL", "http://driver-endpoint:1")
    env.setenv("AWS_ACCESS_KEY_ID", "driver-key")
    env.setenv("AWS_SECRET_ACCESS_KEY", "driver-secret")
    s = Storage("s3://bkt/lake")
    for name in _ENV:
        env.delenv(name, raising=False)
    clone = pickle.loads(pickle.dumps(s))
    assert clone.options == {"endpoint_url": "http://driver-endpoint:1", "key": "driver-key", "secret": "driver-secret"}
    assert s.for_uri("s3://other/x").options == s.options
    assert s.for_uri("memory://m/x").options == {}


def test_options_dict_is_copied(env: pytest.MonkeyPatch) -> None:
    given = {"endpoint_url": "http://a:1"}
    s = Storage("s3://bkt", given)
    given["endpoint_url"] = "http://changed:2"
    assert s.options["endpoint_url"] == "http://a:1"


@pytest.mark.s3
def test_environment_alone_reaches_the_server(env: pytest.MonkeyPatch, s3_server: Any, s3_bucket: str) -> None:
    env.setenv("TLAKE_S3_ENDPOINT_URL", s3_server.endpoint_url)
    env.setenv("AWS_ACCESS_KEY_ID", s3_server.key)
    env.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret)
    s = Storage(s3_bucket + "/lake")
    s.create_exclusive("_0", b"v0")
    assert s.read("_0") == b"v0"
    from tests.s3server import make_s3_storage

    assert make_s3_storage(s3_bucket + "/lake", s3_server.endpoint_url).read("_0") == b"v0"


@pytest.mark.parametrize("where", ["endpoint_url", "client_kwargs"])
def test_an_endpoint_with_credentials_is_refused_at_once(env: pytest.MonkeyPatch, where: str) -> None:
    """botocore signs every request and the HTTP client then refuses a URL holding credentials:
    without this check every operation failed only after s3fs's and our retries (a minute)."""
    endpoint = "http://ops:hunter2pw@127.0.0.1:9"
    opts = {"endpoint_url": endpoint} if where == "endpoint_url" else {"client_kwargs": {"endpoint_url": endpoint}}
    with pytest.raises(ConfigError) as err:
        Storage("s3://bkt/lh", options=opts)
    assert "endpoint_url http://ops:<redacted>@127.0.0.1:9 carries credentials" in str(err.value)
    assert "hunter2pw" not in str(err.value)
    env.setenv("AWS_ENDPOINT_URL", endpoint)
    with pytest.raises(ConfigError):
        Storage("s3://bkt/lh")
    # Unsigned (anonymous) requests send no Authorization header: the URL's credentials may serve.
    assert Storage("s3://bkt/lh", options={"endpoint_url": endpoint, "anon": True}).options["anon"] is True
