"""`tlake catalog serve` as an operator meets it: a taken port, a short token, Ctrl-C and
SIGTERM, and the access log's request lines. The real command in a subprocess each time."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import requests

from tests.rest_catalog.server import TLAKE, free_port, new_lakehouse, start
from trinitylake.redact import redact_request_target

TOKEN = "tok-0123456789abcdef-secret"


def _serve(lh: str, port: int, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TLAKE_CATALOG_TOKEN": token}
    return subprocess.run([TLAKE, "--lakehouse", lh, "catalog", "serve", "--port", str(port), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_taken_port_fails_in_one_line_before_announcing(tmp_path):
    lh = new_lakehouse(tmp_path / "lh")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        p = _serve(lh, port, TOKEN)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert len(_lines(out)) == 1, out
    assert f"127.0.0.1:{port}" in out and "already in use" in out
    assert "serving" not in out and "Traceback" not in out and "Errno" not in out


def test_a_static_token_shorter_than_16_characters_is_refused_without_showing_it(tmp_path):
    lh = new_lakehouse(tmp_path / "lh")
    for token in ("abc", "fifteen-chars!!"):
        p = _serve(lh, free_port(), token)
        out = p.stdout + p.stderr
        assert p.returncode == 2, out  # a setting refused: the CLI's usage/configuration code
        assert len(_lines(out)) == 1, out
        assert "at least 16" in out and "TLAKE_CATALOG_TOKEN" in out and f"{len(token)} characters" in out
        assert token not in out and "serving" not in out
    (tmp_path / "tok").write_text("short-token\n")
    p = _serve(lh, free_port(), "", "--token-file", str(tmp_path / "tok"))
    assert p.returncode == 2 and str(tmp_path / "tok") in p.stderr and "short-token" not in p.stderr, p.stderr


def test_sigint_and_sigterm_stop_the_server_with_exit_0_quietly(tmp_path):
    lh = new_lakehouse(tmp_path / "lh")
    for sig in (signal.SIGINT, signal.SIGTERM):
        srv = start(lh, tmp_path, token=TOKEN)
        try:
            r = requests.get(srv.url + "/v1/config", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
            assert r.status_code == 200
            srv.proc.send_signal(sig)
            rc = srv.proc.wait(30)
        finally:
            srv.stop()
        out = srv.output()
        assert rc == 0, (sig, out)
        assert "Aborted" not in out and "Traceback" not in out, out
        assert "serving the Iceberg REST catalog" in out and "Shutting down" in out


def test_the_access_log_keeps_the_request_line_and_hides_only_the_secret(tmp_path):
    lh = new_lakehouse(tmp_path / "lh")
    srv = start(lh, tmp_path, token=TOKEN)
    leaked = "query-secret-0123456789"
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        requests.get(srv.url + "/v1/config?token=&warehouse=latest", headers=auth, timeout=10)
        requests.get(srv.url + f"/v1/namespaces?access_token={leaked}&pageSize=5", headers=auth, timeout=10)
        requests.get(srv.url + f"/v1/namespaces?note={TOKEN}", headers=auth, timeout=10)
        requests.get(srv.url + "/v1/namespaces", timeout=10)  # no token: 401
    finally:
        srv.stop()
    out = srv.output()
    assert '"GET /v1/config?token=<redacted>&warehouse=latest HTTP/1.1" 200' in out, out
    assert '"GET /v1/namespaces?access_token=<redacted>&pageSize=5 HTTP/1.1" 200' in out, out
    assert '"GET /v1/namespaces?note=<redacted> HTTP/1.1" 200' in out, out  # the server's own token, remembered
    assert '"GET /v1/namespaces HTTP/1.1" 401' in out, out
    assert leaked not in out and TOKEN not in out


def test_redact_request_target_touches_only_credential_values():
    assert redact_request_target("/v1/namespaces/db/tables/t") == "/v1/namespaces/db/tables/t"
    assert redact_request_target("/v1/x?a=1&b&c=") == "/v1/x?a=1&b&c="
    assert redact_request_target("/v1/x?client_secret=s&x=y%3Dz") == "/v1/x?client_secret=<redacted>&x=y%3Dz"
    assert redact_request_target("/v1/x?acc%65ss_token=s") == "/v1/x?acc%65ss_token=<redacted>"
    assert redact_request_target("/v1/x?password=p'q&sig=") == "/v1/x?password=<redacted>&sig=<redacted>"
    # Iceberg REST's pagination cursor is no credential (Spark sends ?pageToken= when listing)
    assert redact_request_target("/v1/namespaces/shop/tables?pageToken=&pageSize=10") == \
        "/v1/namespaces/shop/tables?pageToken=&pageSize=10"
