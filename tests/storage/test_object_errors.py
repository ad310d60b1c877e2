"""How the S3 I/O engine reads an obstore error: by the status the store answered, never by a
number or word that happens to be in the request's URL (its port, bucket or key).

A 500 from the test server on port 41273 once read as "412 precondition failed", so a read that
a retry would have cured failed as FileExistsError ("already exists") and failed a CI run."""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import obstore.exceptions as obstore_errors
import pytest

from trinitylake.storage import Storage
from trinitylake.storage.object_io import ConditionalConflict, as_builtin
from trinitylake.storage.retry import is_transient


def _obstore_error(method: str, url: str, status: int, reason: str, body: str = "") -> obstore_errors.GenericError:
    # The text obstore 0.x gives for a non-2xx answer: the request's URL, in its first line
    # and in the debug source, beside the status.
    return obstore_errors.GenericError(
        f"Generic S3 error: Error performing {method} {url} in 132.673911ms - Server returned non-2xx status "
        f"code: {status} {reason}: {body}\n\nDebug source:\nGeneric {{\n    store: \"S3\",\n    source: RetryError(\n"
        f"        RetryErrorImpl {{\n            method: {method},\n            uri: Some(\n                {url},\n"
        f"            ),\n            retries: 0,\n            inner: Status {{\n                status: {status},\n"
        f"                body: Some(\"{body}\"),\n            }},\n        }},\n    ),\n}}")


_HTML_500 = "<!doctype html>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>"


@pytest.mark.parametrize("url, status, reason, expected", [
    # the CI failure: a 500 on port 41273 is transient, not "already exists"
    ("http://127.0.0.1:41273/tl-bd34356711684f20/lh/_control/_seq/_hint", 500, "Internal Server Error",
     ConnectionError),
    ("http://127.0.0.1:40300/b/k", 503, "Slow Down", ConnectionError),  # not a 403
    ("http://127.0.0.1:40404/b/k", 502, "Bad Gateway", ConnectionError),  # not a 404
    ("http://127.0.0.1:9000/b/precondition-forbidden-accessdenied-404-not found.json", 500,
     "Internal Server Error", ConnectionError),
    ("http://127.0.0.1:41273/b/k", 400, "Bad Request", OSError),  # neither transient nor typed
    ("http://127.0.0.1:5000/b/k", 412, "Precondition Failed", FileExistsError),
    ("http://127.0.0.1:5000/b/k", 404, "Not Found", FileNotFoundError),
    ("http://127.0.0.1:5000/b/k", 403, "Forbidden", PermissionError),
])
def test_an_error_is_read_by_its_status_not_by_its_url(url, status, reason, expected):
    body = _HTML_500 if status == 500 else ""
    err = as_builtin(_obstore_error("GET", url, status, reason, body), "s3://b/k")
    assert type(err) is expected, (type(err), err)
    assert is_transient(err) is (expected is ConnectionError)


def test_a_contended_conditional_put_is_its_own_error():
    err = as_builtin(_obstore_error("PUT", "http://127.0.0.1:41273/b/k", 409, "Conflict",
                                    "<Code>ConditionalRequestConflict</Code>"), "s3://b/k")
    assert isinstance(err, ConditionalConflict) and not is_transient(err)


@pytest.mark.parametrize("text, expected", [
    ("error sending request for url (http://127.0.0.1:41273/b/k): connection reset", ConnectionError),
    ("Precondition Failed", FileExistsError),  # a text with no status keeps its words
    ("Access Denied: Forbidden", PermissionError),
])
def test_a_text_without_a_status_is_read_by_its_words_outside_the_url(text, expected):
    assert type(as_builtin(obstore_errors.GenericError(text), "s3://b/k")) is expected


class _FlakyS3(BaseHTTPRequestHandler):
    """GET answers 500 (an HTML page, as moto's werkzeug does under load) the first time for
    each key, then the object; everything else 404."""

    seen: set[str]
    body = b"42\n"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path not in self.seen:
            self.seen.add(self.path)
            self._answer(500, _HTML_500.encode(), "text/html")
            return
        self._answer(200, self.body, "application/octet-stream",
                     {"ETag": '"0123456789abcdef"', "Last-Modified": "Mon, 30 Nov 2026 00:00:00 GMT"})

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(404, b"", "application/xml")

    def _answer(self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _bind_a_port_with_412_in_it() -> ThreadingHTTPServer:
    # The port itself carries the digits a substring match would have misread.
    for port in range(41200, 41300):
        try:
            return ThreadingHTTPServer(("127.0.0.1", port), type("H", (_FlakyS3,), {"seen": set()}))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
    pytest.fail("no free port in 41200-41299")


@pytest.fixture
def flaky_s3() -> Iterator[str]:
    server = _bind_a_port_with_412_in_it()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_read_answered_500_on_a_port_with_412_in_it_is_retried_and_returns_the_bytes(flaky_s3):
    assert "412" in flaky_s3
    st = Storage("s3://bucket/lh", {"endpoint_url": flaky_s3, "key": "testing", "secret": "testing"})
    assert st.read("_control/_seq/_hint") == b"42\n"

