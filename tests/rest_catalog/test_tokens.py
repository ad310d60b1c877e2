"""The catalog server's static bearer token: every token that is not exactly the configured one
is refused, over HTTP against the real `tlake catalog serve` (401 ``NotAuthorizedException``
with a ``WWW-Authenticate: Bearer`` challenge, RFC 6750 section 3; never a 500, never the token
in the answer), and the check compares the whole token, as bytes, with `hmac.compare_digest`.

The near misses matter: a check that compares only a prefix, stops at the shorter of the two
or trims the presented token accepts some of them (the token below is ``tok-`` and 32 hex
digits, so its first 8 bytes are shared by every variant built from it)."""

from __future__ import annotations

import hmac

import pytest
import requests

from tests.rest_catalog.server import Server
from trinitylake.rest_catalog.auth import Authenticator


def get_config(srv: Server, authorization: str | bytes | None) -> requests.Response:
    headers = {} if authorization is None else {"Authorization": authorization}
    return requests.get(srv.url + "/v1/config", headers=headers, timeout=30)


def assert_refused(r: requests.Response, srv: Server, what: str) -> None:
    assert r.status_code == 401, (what, r.status_code, r.text[:300])
    assert r.json()["error"]["type"] == "NotAuthorizedException", what
    assert r.headers.get("WWW-Authenticate", "").startswith("Bearer"), what
    assert srv.token not in r.text, what


def _other_last(token: str) -> str:
    return token[:-1] + ("0" if token[-1] != "0" else "1")


def near_misses(token: str) -> dict[str, str]:
    """Tokens that share all or most of `token`'s bytes, by what makes them wrong."""
    return {
        "its first 8 bytes": token[:8],
        "one byte shorter": token[:-1],
        "one byte longer": token + "0",
        "the token twice": token + token,
        "the token and a space-free suffix": token + "-extra",
        "differs only in its last byte": _other_last(token),
        "differs only in its first byte": ("u" if token[0] != "u" else "v") + token[1:],
        "differs only in a middle byte": token[:20] + ("x" if token[20] != "x" else "y") + token[21:],
        "differs only in the case of its hex digits": token.upper(),
    }


def test_the_right_token_is_accepted(served):
    """The refusals below mean something only if the same request with the token succeeds."""
    for header in (f"Bearer {served.token}", f"bearer {served.token}", f"Bearer   {served.token}  "):
        r = get_config(served, header)
        assert r.status_code == 200, (header.replace(served.token, "<token>"), r.text[:300])


@pytest.mark.parametrize("what", list(near_misses("tok-0123456789abcdef0123456789abcdef")))
def test_a_token_close_to_the_right_one_is_refused(served, what):
    wrong = near_misses(served.token)[what]
    assert wrong != served.token
    assert_refused(get_config(served, f"Bearer {wrong}"), served, what)


def test_an_empty_or_non_ascii_token_is_refused(served):
    for what, header in [
        ("empty token", "Bearer "),
        ("empty token, no space", "Bearer"),
        ("only spaces", "Bearer     "),
        # Non-ASCII: UTF-8 bytes on the wire (the server reads header bytes as Latin-1).
        ("non-ASCII token", "Bearer tök-ünïcødé-tøken-0123456789".encode()),
        ("the token with a non-ASCII last byte", f"Bearer {served.token[:-1]}é".encode()),
        ("the token followed by non-ASCII", f"Bearer {served.token}é".encode()),
        ("a Latin-1 byte", b"Bearer " + served.token[:-1].encode() + b"\xff"),
    ]:
        assert_refused(get_config(served, header), served, what)


def test_a_missing_or_malformed_authorization_header_is_refused(served):
    for what, header in [
        ("no header", None),
        ("empty header", ""),
        ("the token without a scheme", served.token),
        ("Basic scheme", f"Basic {served.token}"),
        ("Token scheme", f"Token {served.token}"),
        ("scheme glued to the token", f"Bearer{served.token}"),
        ("two tokens", f"Bearer {served.token} {served.token}"),
        ("a comma list", f"Bearer {served.token}, Bearer {served.token}"),
    ]:
        assert_refused(get_config(served, header), served, what)


def test_refusals_hold_on_writes_too(served):
    """A refused token writes nothing: the write routes check the token before anything else."""
    r = requests.post(served.url + "/v1/namespaces", json={"namespace": ["token_probe"]},
                      headers={"Authorization": f"Bearer {_other_last(served.token)}"}, timeout=30)
    assert_refused(r, served, "a write with a token differing in its last byte")
    r = get_config(served, f"Bearer {served.token}")
    ns = requests.get(served.url + "/v1/namespaces", headers={"Authorization": f"Bearer {served.token}"}, timeout=30)
    assert r.status_code == 200 and ns.status_code == 200
    assert ["token_probe"] not in ns.json()["namespaces"]


def test_the_static_token_is_compared_whole_as_bytes_in_constant_time():
    """`Authenticator.authenticate` hands the whole configured token and the whole presented
    token, as bytes, to `hmac.compare_digest` (whose time does not depend on where they
    differ). A recording wrapper (it calls the real function) sees the arguments; no timing."""
    token = "tok-0123456789abcdef0123456789abcdef"
    auth = Authenticator(token=token)
    seen: list[tuple[object, object]] = []
    real = hmac.compare_digest

    def recording(a, b):
        seen.append((a, b))
        return real(a, b)

    hmac.compare_digest = recording  # type: ignore[assignment]
    try:
        for presented in (token, token[:8], token[:-1], token + "0", _other_last(token), "tök-ünïcødé"):
            seen.clear()
            got = auth.authenticate(f"Bearer {presented}")
            assert (got is not None) == (presented == token), presented
            assert seen, f"no constant-time comparison for {presented!r}"
            a, b = seen[0]
            assert isinstance(a, bytes) and isinstance(b, bytes), "compared as bytes"
            assert {a, b} == {token.encode(), presented.encode()}, "the whole tokens are compared, not a prefix"
    finally:
        hmac.compare_digest = real  # type: ignore[assignment]
