"""Storage options of an export's target: another store than the lakehouse's.

A disaster-recovery export writes to another S3 endpoint or account than the lakehouse's, so
its target takes options of its own, from (lowest first):

* the environment, for an ``s3://`` target: ``TLAKE_TARGET_S3_ENDPOINT_URL`` (``endpoint_url``),
  ``TLAKE_TARGET_AWS_ACCESS_KEY_ID`` (``key``), ``TLAKE_TARGET_AWS_SECRET_ACCESS_KEY``
  (``secret``) and ``TLAKE_TARGET_AWS_SESSION_TOKEN`` (``token``): the target's counterparts of
  what `trinitylake.storage.options.s3_options_from_env` reads for the lakehouse
  (``TLAKE_S3_ENDPOINT_URL``, ``AWS_*``);
* the export's ``target_storage_options`` option (``conf/export.yaml``,
  ``TLAKE_EXPORT_TARGET_STORAGE_OPTIONS``, ``--target-storage-option KEY=VALUE``), which wins.

When either gives an option, the target's options are exactly those: the lakehouse's
``storage_options`` are never shared with it. When neither does, nothing changes: a target of
the lakehouse's scheme shares its options, any other gets the environment's. (What the
target's options leave out, such as an endpoint when only keys are given, an ``s3://``
storage still takes from the process's own ``TLAKE_S3_ENDPOINT_URL``/``AWS_*`` environment.)

The credentials found are remembered for redaction (`trinitylake.redact`): every later
message, log line, audit row or result that quotes them shows ``<redacted>``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from trinitylake.errors import ConfigError
from trinitylake.redact import redact_value
from trinitylake.storage.uri import parse_uri

#: ``variable -> option`` of the target's environment (an ``s3://`` target's).
TARGET_ENV: Mapping[str, str] = MappingProxyType({
    "TLAKE_TARGET_S3_ENDPOINT_URL": "endpoint_url",
    "TLAKE_TARGET_AWS_ACCESS_KEY_ID": "key",
    "TLAKE_TARGET_AWS_SECRET_ACCESS_KEY": "secret",
    "TLAKE_TARGET_AWS_SESSION_TOKEN": "token",
})
_KEY_ID = "TLAKE_TARGET_AWS_ACCESS_KEY_ID"


def target_options_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The target's S3 options from the ``TLAKE_TARGET_*`` variables (empty ones are unset).

    Example:
        >>> target_options_from_env({"TLAKE_TARGET_S3_ENDPOINT_URL": "http://dr:9000",
        ...                          "TLAKE_TARGET_AWS_ACCESS_KEY_ID": "AK", "TLAKE_TARGET_AWS_SECRET_ACCESS_KEY": "s"})
        {'endpoint_url': 'http://dr:9000', 'key': 'AK', 'secret': 's'}

    Raises:
        ConfigError: a secret or session token without ``TLAKE_TARGET_AWS_ACCESS_KEY_ID`` (it
            would otherwise be dropped, and the target written with other credentials).
    """
    env = os.environ if env is None else env
    found = {opt: env[var].strip() for var, opt in TARGET_ENV.items() if env.get(var, "").strip()}
    if ("secret" in found or "token" in found) and "key" not in found:
        given = [var for var, opt in TARGET_ENV.items() if opt in found and opt != "endpoint_url"]
        raise ConfigError(f"{' and '.join(given)} set without {_KEY_ID}: give the target's access key id too, "
                          f"or unset them")
    return found


def resolve_target_options(target_uri: str, configured: Mapping[str, Any] | None,
                           explicit: Mapping[str, Any] | None = None,
                           env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The storage options of an export's target; None when nothing gives any (the target then
    shares the lakehouse's options when the scheme is the same, as before).

    Args:
        target_uri: the target root (its scheme decides whether the S3 variables apply).
        configured: the export's ``target_storage_options`` (config file, environment, flags).
        explicit: options passed by a caller of the job function itself; used as they are.
        env: where the ``TLAKE_TARGET_*`` variables are read (default ``os.environ``).

    Example:
        >>> resolve_target_options("s3://dr/lh", {"endpoint_url": "http://dr:9000"},
        ...                        env={"TLAKE_TARGET_AWS_ACCESS_KEY_ID": "AK", "TLAKE_TARGET_AWS_SECRET_ACCESS_KEY": "s"})
        {'key': 'AK', 'secret': 's', 'endpoint_url': 'http://dr:9000'}
        >>> resolve_target_options("s3://dr/lh", {}, env={}) is None
        True

    Raises:
        ConfigError: see `target_options_from_env`.
    """
    if explicit is not None:
        options = dict(explicit)
    else:
        options = target_options_from_env(env) if parse_uri(target_uri).scheme == "s3" else {}
        given = {k: v for k, v in (configured or {}).items() if v is not None}
        if "key" in given or "secret" in given:
            options.pop("token", None)  # the environment's session token belongs to its key
        if (given.get("client_kwargs") or {}).get("endpoint_url"):
            options.pop("endpoint_url", None)
        options.update(given)
        if not options:
            return None
    if (options and parse_uri(target_uri).scheme == "s3" and not options.get("endpoint_url")
            and not (options.get("client_kwargs") or {}).get("endpoint_url")):
        # Options of its own and no endpoint: S3's own, never the lakehouse's
        # TLAKE_S3_ENDPOINT_URL / AWS_ENDPOINT_URL (`s3_options_from_env` reads "" so).
        options["endpoint_url"] = ""
    redact_value(options, learn=True)  # scrubbed from every later message and log line
    return options
