"""Running the catalog server: its settings (a YAML file, options, the environment) and uvicorn.

Safe by default: it binds 127.0.0.1, refuses to start without a bearer token
(``TLAKE_CATALOG_TOKEN`` or a token file) or client credentials (``TLAKE_CATALOG_CREDENTIAL``,
``client_id:client_secret``, or a credential file), limits request bodies, and logs requests
without their headers (uvicorn's access log: client, request line, status) through the
process's redacting log filter.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
import yaml

from trinitylake.errors import ConfigError
from trinitylake.rest_catalog.app import DEFAULT_MAX_BODY_BYTES, ServerSettings, build_app
from trinitylake.rest_catalog.auth import (
    DEFAULT_TOKEN_LIFETIME_S,
    Authenticator,
    parse_credentials,
    read_secret_file,
)

log = logging.getLogger(__name__)

TOKEN_ENV = "TLAKE_CATALOG_TOKEN"
CREDENTIAL_ENV = "TLAKE_CATALOG_CREDENTIAL"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8181
_LOOPBACK = ("127.0.0.1", "localhost", "::1")

#: The keys a settings file may hold (conf/catalog_serve.yaml), with their types.
FILE_KEYS: dict[str, type] = {"host": str, "port": int, "token_file": str, "credential_file": str, "read_only": bool,
                              "allow_purge": bool, "max_body_bytes": int, "token_lifetime_s": int,
                              "forwarded_allow_ips": str, "properties": dict}


@dataclass
class ServeOptions:
    """What `tlake catalog serve` was asked for: None means "not given" (the file's or the default)."""

    host: str | None = None
    port: int | None = None
    token_file: str | None = None
    credential_file: str | None = None
    read_only: bool | None = None
    allow_purge: bool | None = None
    max_body_bytes: int | None = None
    token_lifetime_s: int | None = None
    forwarded_allow_ips: str | None = None
    properties: dict[str, str] = field(default_factory=dict)


def load_file(path: str) -> ServeOptions:
    """Settings from a YAML file of `FILE_KEYS` (unknown keys and wrong types refused by name)."""
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read the catalog server settings {path}: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    unknown = sorted(set(raw) - set(FILE_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown settings {unknown}; known: {sorted(FILE_KEYS)}")
    out = ServeOptions()
    for key, value in raw.items():
        if value is None:
            continue
        want = FILE_KEYS[key]
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            kind = {int: "an integer", bool: "true or false", str: "a string", dict: "a mapping"}[want]
            raise ConfigError(f"{path}: {key} must be {kind}, got {type(value).__name__}")
        if isinstance(value, dict):
            value = {str(k): str(v) for k, v in value.items()}
        setattr(out, key, value)
    return out


def merge(file: ServeOptions, given: ServeOptions) -> ServeOptions:
    """`given` (the command line) over `file`."""
    out = dataclasses.replace(file)
    for key, value in vars(given).items():
        if key == "properties":
            out.properties = {**file.properties, **value}
        elif value is not None:
            setattr(out, key, value)
    return out


def authenticator(opts: ServeOptions, env: dict[str, str] | None = None) -> Authenticator:
    """The token and client credentials from the environment and files (never printed)."""
    env = dict(os.environ) if env is None else env
    token = env.get(TOKEN_ENV) or None
    if opts.token_file:
        token = read_secret_file(opts.token_file, "token")
    credentials: dict[str, str] = {}
    if env.get(CREDENTIAL_ENV):
        credentials.update(parse_credentials(env[CREDENTIAL_ENV], CREDENTIAL_ENV))
    if opts.credential_file:
        try:
            text = Path(opts.credential_file).read_text()
        except OSError as e:
            raise ConfigError(f"cannot read the credential file {opts.credential_file}: {e.strerror}") from None
        credentials.update(parse_credentials(text, opts.credential_file))
    return Authenticator(token, credentials, opts.token_lifetime_s or DEFAULT_TOKEN_LIFETIME_S)


def serve(lakehouse: str, opts: ServeOptions, *, storage_options: dict[str, str] | None = None,
          control_uri: str | None = None, audit: bool = True) -> None:
    """Serve the lakehouse until interrupted (SIGINT/SIGTERM end it cleanly)."""
    auth = authenticator(opts)
    settings = ServerSettings(lakehouse=lakehouse, storage_options=dict(storage_options or {}),
                              catalog_properties=dict(opts.properties), control_uri=control_uri, audit=audit,
                              read_only=bool(opts.read_only), allow_purge=bool(opts.allow_purge),
                              max_body_bytes=opts.max_body_bytes or DEFAULT_MAX_BODY_BYTES)
    app = build_app(settings, auth)
    host, port = opts.host or DEFAULT_HOST, opts.port if opts.port is not None else DEFAULT_PORT
    for name in ("uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.INFO)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if host not in _LOOPBACK:
        log.warning("binding %s: the server speaks plain HTTP; put it behind a TLS proxy (README)", host)
    mode = "read-only" if settings.read_only else "read-write"
    how = " and ".join(x for x in ("a bearer token" if auth.has_static_token else "",
                                   "OAuth2 client credentials" if auth.issues_tokens else "") if x)
    print(f"serving the Iceberg REST catalog of {lakehouse} on http://{host}:{port} ({mode}; {how})",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=True, server_header=False,
                            proxy_headers=bool(opts.forwarded_allow_ips),
                            forwarded_allow_ips=opts.forwarded_allow_ips or None, timeout_keep_alive=30)
    uvicorn.Server(config).run()
