"""Storage options: the one checker and mapper of what a user gives (`check_storage_options`),
what each client takes from them (s3fs: the checked options themselves; the object_io engine:
`trinitylake.storage.object_io`; PyIceberg's FileIO: `fileio_properties`), and the options the
environment gives (S3 endpoint and credentials).

Every entry point goes through `check_storage_options`: ``--storage-option KEY=VALUE``, the
jobs' ``storage_options`` (YAML, ``TLAKE_<JOB>_STORAGE_OPTIONS``), an export target's options,
the catalog's ``lakehouse.storage.*`` properties and a Python caller's `Storage`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from types import MappingProxyType
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


# ---- the one checker ----------------------------------------------------------------------

#: The storage options tlake knows (s3fs's keyword arguments), by the type of their value.
#: ``key``, ``secret`` and ``token`` are credentials: never printed (`trinitylake.redact`).
KNOWN_OPTIONS: Mapping[str, str] = MappingProxyType({
    "endpoint_url": "text", "region": "text", "region_name": "text", "profile": "text",
    "key": "text", "secret": "text", "token": "text", "anon": "bool",
    "client_kwargs": "mapping", "config_kwargs": "mapping", "s3_additional_kwargs": "mapping",
    "use_ssl": "bool", "requester_pays": "bool", "version_aware": "bool", "cache_regions": "bool",
    "use_listings_cache": "bool", "listings_expiry_time": "number", "skip_instance_cache": "bool",
    "default_block_size": "int", "default_fill_cache": "bool", "default_cache_type": "text",
    "max_concurrency": "int", "fixed_upload_size": "bool",
})
#: What botocore's ``create_client`` takes in ``client_kwargs``.
KNOWN_CLIENT_KWARGS = frozenset({"region_name", "endpoint_url", "verify", "use_ssl", "api_version",
                                 "aws_access_key_id", "aws_secret_access_key", "aws_session_token"})
_TRUE, _FALSE = frozenset({"true", "yes", "on", "1"}), frozenset({"false", "no", "off", "0"})


def check_storage_options(options: Mapping[str, Any] | None, where: str = "storage option", *,
                          scheme: str = "s3") -> StorageOptions:
    """Storage options checked and put in the one form every client is mapped from (s3fs's).

    ``region`` and ``region_name`` become ``client_kwargs["region_name"]`` (s3fs passes only
    ``client_kwargs`` to botocore's client); ``client_kwargs`` and ``config_kwargs`` may be JSON
    text (a flag's or a variable's value); flags (``anon``, ``use_ssl``) may be ``true``/
    ``false``; a dotted key from text (``client_kwargs.region_name``) arrives nested already.

    Args:
        options: the options as given (None: none).
        where: how the user gave them, named in an error (``--storage-option``, a file's key).
        scheme: the store's scheme: the known keys are S3's (s3fs, the engine, FileIO); another
            fsspec filesystem (``gs://``, ``abfs://``) takes its own keys, passed as they are.

    Raises:
        ConfigError: an unknown key (the message lists the known ones) or a value of the wrong
            type, in one line that names the key and never the value of a credential.

    Example:
        >>> check_storage_options({"region": "eu-west-1", "anon": "true"})
        {'anon': True, 'client_kwargs': {'region_name': 'eu-west-1'}}
        >>> check_storage_options({"endpointurl": "http://x"})
        Traceback (most recent call last):
        ...
        trinitylake.errors.ConfigError: storage option: unknown key 'endpointurl'; known: endpoint_url, region, \
region_name, profile, key, secret, token, anon, client_kwargs, config_kwargs, s3_additional_kwargs, use_ssl, \
requester_pays, version_aware, cache_regions, use_listings_cache, listings_expiry_time, skip_instance_cache, \
default_block_size, default_fill_cache, default_cache_type, max_concurrency, fixed_upload_size
    """
    if scheme != "s3":
        return dict(options or {})
    out: dict[str, Any] = {}
    region: Any = None
    for key, value in (options or {}).items():
        kind = KNOWN_OPTIONS.get(str(key))
        if kind is None:
            raise ConfigError(f"{where}: unknown key {str(key)!r}; known: {', '.join(KNOWN_OPTIONS)}")
        value = _typed(str(key), kind, value, where)
        if key in ("region", "region_name"):
            region = value
        else:
            out[str(key)] = value
    ck = out.get("client_kwargs")
    if ck is not None:
        unknown = sorted(set(ck) - KNOWN_CLIENT_KWARGS)
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} in client_kwargs; known: "
                              f"{', '.join(sorted(KNOWN_CLIENT_KWARGS))}")
    if region is not None:
        out["client_kwargs"] = {**(ck or {}), "region_name": region}
    return out


def _typed(key: str, kind: str, value: Any, where: str) -> Any:
    shown = "<redacted>" if key in ("key", "secret", "token") else repr(value)
    if value is None:
        return None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ConfigError(f"{where}: {key} must be true or false, got {shown}")
    if kind == "mapping":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{where}: {key} must be a JSON object such as "
                                  f'{{"region_name": "eu-west-1"}}, got {shown} ({e.msg})') from None
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: {key} must be a mapping (a JSON object), got {shown}")
        return {str(k): v for k, v in value.items()}
    if kind in ("int", "number"):
        if isinstance(value, str):
            try:
                value = int(value) if kind == "int" else float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float) or (kind == "int" and not isinstance(value, int)):
            raise ConfigError(f"{where}: {key} must be {'an integer' if kind == 'int' else 'a number'}, got {shown}")
        return value
    if isinstance(value, Mapping | list | tuple):
        raise ConfigError(f"{where}: {key} must be text, got {'<redacted>' if shown == '<redacted>' else 'a ' + type(value).__name__}")
    return value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


# ---- what each client takes ---------------------------------------------------------------

#: checked option -> PyIceberg FileIO property.
_FILEIO_PROPERTIES = MappingProxyType({
    "endpoint_url": "s3.endpoint",
    "key": "s3.access-key-id",
    "secret": "s3.secret-access-key",
    "token": "s3.session-token",
    "profile": "s3.profile-name",
})


def fileio_properties(storage_options: Mapping[str, Any]) -> dict[str, str]:
    """PyIceberg's S3 FileIO properties for the same store as `storage_options`.

    Example:
        >>> fileio_properties({"endpoint_url": "http://s3:9000", "region": "eu-west-1", "anon": True})
        {'s3.endpoint': 'http://s3:9000', 's3.region': 'eu-west-1', 's3.anonymous': 'true'}
    """
    options = check_storage_options(storage_options)
    out = {prop: str(options[opt]) for opt, prop in _FILEIO_PROPERTIES.items()
           if isinstance(options.get(opt), str) and options[opt]}
    kwargs = options.get("client_kwargs") or {}
    if not out.get("s3.endpoint") and kwargs.get("endpoint_url"):
        out["s3.endpoint"] = str(kwargs["endpoint_url"])
    if kwargs.get("region_name"):
        out["s3.region"] = str(kwargs["region_name"])
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region and "s3.region" not in out and out:
        out["s3.region"] = region
    if options.get("anon"):
        out["s3.anonymous"] = "true"
    return out
