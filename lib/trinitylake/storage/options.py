"""Storage options from the environment (S3 endpoint and credentials)."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from trinitylake.errors import ConfigError
from trinitylake.redact import redact_text

#: fsspec / s3fs keyword options of a store: strings, numbers and flags, and nested client
#: settings (``client_kwargs``, ``config_kwargs``) as fsspec takes them.
StorageOptions = dict[str, Any]


def s3_options_from_env(overrides: StorageOptions | None = None) -> StorageOptions:
    """S3 storage options from the environment, overridden by explicit flags.

    ``TLAKE_S3_ENDPOINT_URL`` (preferred) or ``AWS_ENDPOINT_URL`` becomes ``endpoint_url``;
    ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN`` become ``key``,
    ``secret`` and ``token``. They are copied into the options so that a pickled `Storage`
    reaches the same endpoint with the same credentials on a Spark executor. The region is
    left to botocore (``AWS_REGION`` / ``AWS_DEFAULT_REGION``). An explicit option wins over the
    environment, including an endpoint given as ``client_kwargs["endpoint_url"]``.
    """
    overrides = overrides or {}
    opts: dict[str, Any] = {}
    endpoint = os.environ.get("TLAKE_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
    explicit_endpoint = (overrides.get("client_kwargs") or {}).get("endpoint_url")
    # ``endpoint_url=""``: S3's own endpoint, whatever the environment says (an export's
    # target with options of its own must not follow the lakehouse's endpoint variable).
    aws_default = overrides.get("endpoint_url") == ""
    if endpoint and not explicit_endpoint and not aws_default:
        opts["endpoint_url"] = endpoint
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        opts["key"] = os.environ["AWS_ACCESS_KEY_ID"]
        if os.environ.get("AWS_SECRET_ACCESS_KEY"):
            opts["secret"] = os.environ["AWS_SECRET_ACCESS_KEY"]
        # Temporary credentials are useless without their token: carry it with the key.
        if os.environ.get("AWS_SESSION_TOKEN"):
            opts["token"] = os.environ["AWS_SESSION_TOKEN"]
    if overrides.get("key") is not None or overrides.get("secret") is not None:
        # Explicit credentials replace the environment's: its session token belongs to its key.
        opts.pop("token", None)
    for k, v in overrides.items():
        if v is not None and not (k == "endpoint_url" and v == ""):
            opts[k] = v
    _refuse_credentials_in_endpoint(opts)
    return opts


def _refuse_credentials_in_endpoint(opts: StorageOptions) -> None:
    """A signed S3 client cannot use an endpoint URL with ``user:password@`` in it: the HTTP
    client refuses to send both the signature's Authorization header and the URL's credentials,
    on every request. s3fs takes that refusal for a network error and retries it, and so do we,
    so the command failed only after about a minute of retries (25 tries per operation); it is
    a setting to fix, said at once."""
    endpoint = opts.get("endpoint_url") or (opts.get("client_kwargs") or {}).get("endpoint_url")
    if not endpoint or opts.get("anon"):
        return
    try:
        parts = urlsplit(str(endpoint))
        has_userinfo = parts.username is not None or parts.password is not None
    except ValueError:
        return  # not a URL we can read: botocore says what is wrong with it
    if has_userinfo:
        raise ConfigError(
            f"S3 endpoint_url {redact_text(str(endpoint))} carries credentials (user:password@): S3 requests "
            "are signed, and the HTTP client refuses a URL with credentials in it; give the endpoint "
            "without them, and the credentials as the key and secret options or the AWS_* environment"
        )
