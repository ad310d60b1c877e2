"""Who may call the catalog server: a static bearer token, or tokens the server issues through
the Iceberg REST protocol's OAuth2 client-credentials endpoint (``POST /v1/oauth/tokens``).

Issued tokens are stateless: ``tlk1.<payload>.<signature>``, the payload naming the client and
an expiry, signed with HMAC-SHA256 under a key derived from that client's secret. Any server
given the same credentials accepts them, and no token is stored anywhere.

Nothing here logs or returns a token or secret in a message; `Principal.name` (what audit rows
and logs may name) is ``token`` for the static token and the client id for issued ones.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from pathlib import Path

from trinitylake.errors import ValidationError
from trinitylake.redact import remember

TOKEN_PREFIX = "tlk1"
DEFAULT_TOKEN_LIFETIME_S = 3600
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its name (never a secret) for audit rows and logs."""

    name: str


class OAuthError(Exception):
    """A refused token request: the OAuth2 error code and a description (RFC 6749 5.2)."""

    def __init__(self, error: str, description: str, status: int = 400):
        super().__init__(description)
        self.error, self.description, self.status = error, description, status


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def read_secret_file(path: str, what: str) -> str:
    """The first non-empty line of `path` (a token or ``client_id:client_secret``)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise ValidationError(f"cannot read the {what} file {path}: {e.strerror}") from None
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()
    raise ValidationError(f"the {what} file {path} holds no {what}")


def parse_credentials(text: str, source: str) -> dict[str, str]:
    """``client_id:client_secret`` pairs (comma or newline separated) -> {client_id: secret}."""
    out: dict[str, str] = {}
    for part in text.replace("\n", ",").split(","):
        part = part.strip()
        if not part or part.startswith("#"):
            continue
        cid, sep, secret = part.partition(":")
        if not sep or not cid or not secret:
            raise ValidationError(f"{source}: expected client_id:client_secret pairs (the secret is not shown)")
        out[cid] = secret
    return out


class Authenticator:
    """Checks bearer tokens and issues tokens for client credentials."""

    def __init__(self, token: str | None = None, credentials: dict[str, str] | None = None,
                 token_lifetime_s: int = DEFAULT_TOKEN_LIFETIME_S):
        if not token and not credentials:
            raise ValidationError("the catalog server needs a bearer token (TLAKE_CATALOG_TOKEN or --token-file) "
                                  "or client credentials (TLAKE_CATALOG_CREDENTIAL or --credential-file)")
        self._token = token or None
        self._credentials = dict(credentials or {})
        self.token_lifetime_s = token_lifetime_s
        for secret in [token, *self._credentials.values()]:
            remember(secret)  # scrubbed from any later log line or message

    @property
    def has_static_token(self) -> bool:
        return self._token is not None

    @property
    def issues_tokens(self) -> bool:
        return bool(self._credentials)

    def _key(self, client_id: str) -> bytes | None:
        secret = self._credentials.get(client_id)
        if secret is None:
            return None
        return hashlib.sha256(b"trinitylake-catalog-token\0" + client_id.encode() + b"\0" + secret.encode()).digest()

    def _issue(self, client_id: str) -> dict[str, str | int]:
        key = self._key(client_id)
        if key is None:
            raise OAuthError("invalid_client", "unknown client", 401)
        payload = _b64(json.dumps({"sub": client_id, "exp": int(time.time()) + self.token_lifetime_s}).encode())
        sig = _b64(hmac.new(key, f"{TOKEN_PREFIX}.{payload}".encode(), hashlib.sha256).digest())
        remember(f"{TOKEN_PREFIX}.{payload}.{sig}")
        return {"access_token": f"{TOKEN_PREFIX}.{payload}.{sig}", "token_type": "bearer",
                "expires_in": self.token_lifetime_s, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}

    def token_response(self, form: dict[str, str], basic: tuple[str, str] | None) -> dict[str, str | int]:
        """The answer of ``POST /v1/oauth/tokens`` to `form` (and HTTP Basic client credentials)."""
        if not self._credentials:
            raise OAuthError("unsupported_grant_type", "this server issues no tokens (it was given no client credentials)")
        grant = form.get("grant_type", "")
        if grant == "client_credentials":
            cid, secret = basic if basic is not None else (form.get("client_id", ""), form.get("client_secret", ""))
            expected = self._credentials.get(cid)
            if expected is None or not hmac.compare_digest(expected.encode(), secret.encode()):
                raise OAuthError("invalid_client", "invalid client credentials", 401)
            return self._issue(cid)
        if grant == TOKEN_EXCHANGE:  # a client refreshing the token it holds
            principal = self._verify_issued(form.get("subject_token", ""))
            if principal is None:
                raise OAuthError("invalid_grant", "the subject token is not valid", 401)
            return self._issue(principal.name)
        raise OAuthError("unsupported_grant_type", f"grant type {grant[:80]!r} is not supported "
                                                   f"(client_credentials or token exchange)")

    def _verify_issued(self, token: str) -> Principal | None:
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
            return None
        try:
            claims = json.loads(_unb64(parts[1]))
            sub, exp = str(claims["sub"]), int(claims["exp"])
        except (ValueError, KeyError, TypeError):
            return None
        key = self._key(sub)
        if key is None or exp < time.time():
            return None
        want = _b64(hmac.new(key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest())
        return Principal(sub) if hmac.compare_digest(want.encode(), parts[2].encode()) else None

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The caller an ``Authorization`` header names (None: missing, malformed or invalid)."""
        if not authorization:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        if self._token is not None and hmac.compare_digest(self._token.encode(), token.encode()):
            return Principal("token")
        return self._verify_issued(token)
