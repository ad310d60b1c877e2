"""The catalog server's access log (`trinitylake.rest_catalog.server.AccessLog`): uvicorn's line,
redacted, written after the answer by a thread of its own, every queued line written at close.
The real server's lines are checked end to end in test_serve_cli.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import urllib.parse

import pytest

from trinitylake.rest_catalog.server import ACCESS_LOGGER, _AccessLogFilter, access_logged

ANSWERED: list[str] = []  # the paths whose answer's body was sent, in order


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, str, bool]] = []  # (message, thread, its answer sent before it)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        path = message.split(" ")[3].split("?")[0]
        self.lines.append((message, threading.current_thread().name, path in ANSWERED or path == "/boom"))


@pytest.fixture
def capture():
    ANSWERED.clear()
    access = logging.getLogger(ACCESS_LOGGER)
    handler, level, propagate = _Capture(), access.level, access.propagate
    redact = _AccessLogFilter()
    access.addHandler(handler)
    access.addFilter(redact)
    access.setLevel(logging.INFO)
    access.propagate = False
    try:
        yield handler
    finally:
        access.removeHandler(handler)
        access.removeFilter(redact)
        access.setLevel(level)
        access.propagate = propagate


def _scope(path: str, query: bytes = b"") -> dict:
    return {"type": "http", "client": ("10.1.2.3", 5555), "method": "GET", "path": path, "query_string": query,
            "http_version": "1.1"}


def _serve(app, scopes: list[dict]) -> None:
    """Each scope through `app` wrapped in the access log, one after the other, then closed."""
    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        pass

    async def run(logged) -> None:
        for scope in scopes:
            with contextlib.suppress(RuntimeError):
                await logged(scope, receive, send)

    with access_logged(app) as logged:
        asyncio.run(run(logged))


async def _answer(scope, receive, send) -> None:
    if scope["path"] == "/boom":
        raise RuntimeError("before any answer")
    await send({"type": "http.response.start", "status": 404 if scope["path"] == "/missing" else 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})
    ANSWERED.append(urllib.parse.quote(scope["path"]))


def test_each_answer_gets_uvicorn_s_line_redacted_after_it_from_another_thread(capture):
    _serve(_answer, [_scope("/v1/namespaces", b"access_token=s3cr3t-value&pageSize=5"), _scope("/v1/a b"),
                     _scope("/missing"), _scope("/boom")])
    messages = [m for m, _, _ in capture.lines]
    assert messages == [
        '10.1.2.3:5555 - "GET /v1/namespaces?access_token=<redacted>&pageSize=5 HTTP/1.1" 200',
        '10.1.2.3:5555 - "GET /v1/a%20b HTTP/1.1" 200',  # the path quoted, as uvicorn's line has it
        '10.1.2.3:5555 - "GET /missing HTTP/1.1" 404',
        '10.1.2.3:5555 - "GET /boom HTTP/1.1" 500',  # raised before answering: uvicorn answers 500
    ]
    assert {thread for _, thread, _ in capture.lines} == {"trinitylake-access-log"}
    assert all(after for _, _, after in capture.lines)  # each after its answer's body was sent


def test_lines_still_queued_are_written_at_close(capture):
    scopes = [_scope(f"/v1/t{i}") for i in range(200)]
    _serve(_answer, scopes)
    assert len(capture.lines) == 200


def test_a_websocket_or_lifespan_scope_passes_through_without_a_line(capture):
    seen = []

    async def app(scope, receive, send) -> None:
        seen.append(scope["type"])

    _serve(app, [{"type": "lifespan"}])
    assert seen == ["lifespan"] and capture.lines == []
