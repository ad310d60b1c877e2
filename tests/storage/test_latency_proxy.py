"""The delaying proxy that turns a local S3 server into an object store with latency
(`bench.objstore.DelayProxy`, the ``slow_s3`` fixture): every request pays the delay, once, the
bytes pass unchanged (conditional writes included), and its request accounting is right."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from bench.objstore import HttpFramer, request_kind


# ---- framing (no server) -----------------------------------------------------------------------
def _feed_in_pieces(framer: HttpFramer, stream: bytes, step: int) -> list[str]:
    out: list[str] = []
    for i in range(0, len(stream), step):
        out += framer.feed(stream[i : i + step])
    return out


REQUESTS = (
    b"GET /bkt/a/b.arrow HTTP/1.1\r\nHost: x\r\n\r\n"
    b"PUT /bkt/k2 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
    b"PUT /bkt/k3 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\n"
    b"x-amz-checksum-crc32: AAAAAA==\r\n\r\n"
    b"POST /bkt?delete HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nGET \r\n0\r\n\r\n"
    b"GET /bkt?list-type=2&prefix=lh%2F HTTP/1.1\r\n\r\n"
    b"HEAD /bkt/k2 HTTP/1.1\r\n\r\n"
    b"PUT /bkt/k4 HTTP/1.1\r\nx-amz-copy-source: bkt/k2\r\nContent-Length: 0\r\n\r\n"
    b"DELETE /bkt/k4 HTTP/1.1\r\n\r\n"
)
KINDS = ["GET", "PUT", "PUT", "DELETE_BATCH", "LIST", "HEAD", "COPY", "DELETE"]


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64, len(REQUESTS)])
def test_request_framer_finds_every_request_however_the_stream_is_cut(step: int) -> None:
    framer = HttpFramer()
    assert _feed_in_pieces(framer, REQUESTS, step) == KINDS
    assert not framer.broken


def test_request_framer_expect_continue_with_and_without_the_body() -> None:
    # Expect: 100-continue counts at the headers; a body that follows is skipped, and a refused
    # one (the server answered 412 first) never comes: the next request follows directly.
    put = b"PUT /bkt/k HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"
    framer = HttpFramer()
    assert framer.feed(put) == ["PUT"]
    assert framer.feed(b"GET ") == []  # the body (4 bytes that look like a method)
    assert framer.feed(b"HEAD /bkt/k HTTP/1.1\r\n\r\n") == ["HEAD"]
    framer = HttpFramer()
    assert framer.feed(put) == ["PUT"]
    assert framer.feed(b"GET /bkt/k HTTP/1.1\r\n\r\n") == ["GET"]
    assert not framer.broken


def test_response_framer_bodies_head_answers_and_close() -> None:
    heads = [False, True, False, False]
    framer = HttpFramer(response=True, head_next=lambda: heads[0])
    stream = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 412 Precondition Failed\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nno\r\n0\r\n\r\n"
    )
    assert _feed_in_pieces(framer, stream, 5) == ["200", "100", "412"]
    heads.pop(0)  # the next answer is to a HEAD: Content-Length without a body
    assert framer.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n") == ["200"]
    heads.pop(0)
    assert framer.feed(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end") == []
    assert framer.close() == ["200"]


def test_garbage_turns_accounting_off_not_forwarding() -> None:
    framer = HttpFramer()
    assert framer.feed(b"\x16\x03\x01 not http\r\n\r\n") == []
    assert framer.broken
    assert framer.feed(REQUESTS) == []


def test_request_kinds() -> None:
    assert request_kind("GET", "/bkt?list-type=2&prefix=a%2F&delimiter=", {}) == "LIST"
    assert request_kind("GET", "/bkt/", {}) == "LIST"
    assert request_kind("GET", "/bkt?location", {}) == "BUCKET"
    assert request_kind("GET", "/bkt/k?partNumber=1", {}) == "GET"
    assert request_kind("HEAD", "/bkt", {}) == "HEAD_BUCKET"
    assert request_kind("PUT", "/bkt/k?partNumber=2&uploadId=x", {}) == "MPU"
    assert request_kind("POST", "/bkt/k?uploads", {}) == "MPU"
    assert request_kind("POST", "/bkt?delete=", {}) == "DELETE_BATCH"
    assert request_kind("PUT", "/bkt", {}) == "BUCKET"
    assert request_kind("GET", "http://127.0.0.1:9/bkt/k", {}) == "GET"


# ---- through the proxy, in front of the moto server ---------------------------------------------
def _client(endpoint_url: str, server: Any) -> Any:
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint_url, aws_access_key_id=server.key, aws_secret_access_key=server.secret,
        region_name=server.region,
    )


@pytest.mark.s3
def test_every_request_pays_the_delay(slow_s3: Any) -> None:
    bucket = slow_s3.bucket.removeprefix("s3://")
    direct = _client(slow_s3.server.endpoint_url, slow_s3.server)
    direct.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    slow = _client(slow_s3.endpoint_url, slow_s3.server)
    slow.head_object(Bucket=bucket, Key="k")  # connect
    slow_s3.proxy.reset_stats()
    delay = slow_s3.delay_ms / 1000
    for i in range(6):  # on one kept-alive connection: each request, not each connection, pays
        t0 = time.perf_counter()
        if i % 2:
            assert slow.get_object(Bucket=bucket, Key="k")["Body"].read() == b"0123456789"
        else:
            slow.head_object(Bucket=bucket, Key="k")
        assert time.perf_counter() - t0 >= delay
    stats = slow_s3.proxy.stats()
    assert stats["requests_by_kind"] == {"GET": 3, "HEAD": 3}
    assert stats["statuses"] == {"200": 6}
    assert stats["kinds"]["GET"]["timed"] == 3
    # The server's time excludes the delay: from the request forwarded to its answer.
    assert 0 < stats["server_s"] < 6 * delay + 5


@pytest.mark.s3
@pytest.mark.parametrize("slow_s3", [100], indirect=True)
def test_a_request_of_many_chunks_pays_the_delay_once(slow_s3: Any) -> None:
    bucket = slow_s3.bucket.removeprefix("s3://")
    slow = _client(slow_s3.endpoint_url, slow_s3.server)
    slow.head_bucket(Bucket=bucket)  # connect
    slow_s3.proxy.reset_stats()
    body = bytes(range(256)) * (16 * 1024)  # 4 MiB: at least 64 chunks of at most 64 KiB
    t0 = time.perf_counter()
    slow.put_object(Bucket=bucket, Key="big", Body=body)
    elapsed = time.perf_counter() - t0
    stats = slow_s3.proxy.stats()
    assert stats["requests_by_kind"] == {"PUT": 1}
    assert stats["chunks_up"] >= 64
    assert elapsed >= 0.1
    # Held one after another, the chunks would take chunks x 100 ms (6.4 s or more).
    assert elapsed < stats["chunks_up"] * 0.1 / 2
    assert _client(slow_s3.server.endpoint_url, slow_s3.server).get_object(Bucket=bucket, Key="big")["Body"].read() == body


@pytest.mark.s3
def test_exclusive_create_through_the_proxy(slow_s3: Any) -> None:
    from trinitylake.storage import Storage

    storage = Storage(f"{slow_s3.bucket}/lh", slow_s3.storage_options)
    storage.exists("warm-up")
    slow_s3.proxy.reset_stats()
    barrier = threading.Barrier(8)

    def attempt(i: int) -> str:
        barrier.wait(timeout=60)
        try:
            storage.create_exclusive("_root_1.arrow", f"writer-{i}".encode())
            return f"won {i}"
        except FileExistsError:
            return "lost"

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(attempt, range(8)))
    winners = [o for o in outcomes if o != "lost"]
    assert len(winners) == 1, outcomes
    assert storage.read("_root_1.arrow") == f"writer-{winners[0].split()[1]}".encode()
    stats = slow_s3.proxy.stats()
    assert stats["requests_by_kind"].get("PUT", 0) >= 8  # every attempt went through the proxy
    assert stats["statuses"].get("412", 0) >= 7  # and the server refused the losers there


@pytest.mark.s3
def test_the_proxy_in_a_process_of_its_own_delays_and_counts_the_same(s3_server: Any) -> None:
    """`ProcessDelayProxy` (the tables' benchmark: its clients run in the bench's process, where
    the proxy's event loop would take turns on their interpreter lock): every request pays the
    delay, the counts come back from the other process, reset and a new delay reach it, and it
    runs in another process and is gone after `stop`."""
    import os

    from bench.objstore import ProcessDelayProxy

    bucket = s3_server.create_bucket()
    direct = _client(s3_server.endpoint_url, s3_server)
    direct.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    proxy = ProcessDelayProxy(int(s3_server.endpoint_url.rsplit(":", 1)[1]), 50)
    proxy.start()
    try:
        assert proxy.pid is not None and proxy.pid != os.getpid()
        slow = _client(proxy.endpoint_url, s3_server)
        slow.head_object(Bucket=bucket, Key="k")  # connect
        proxy.reset_stats()
        for _ in range(2):
            t0 = time.perf_counter()
            assert slow.get_object(Bucket=bucket, Key="k")["Body"].read() == b"0123456789"
            assert time.perf_counter() - t0 >= 0.05
        proxy.delay_ms = 250
        t0 = time.perf_counter()
        slow.head_object(Bucket=bucket, Key="k")
        assert time.perf_counter() - t0 >= 0.25
        stats = proxy.stats()
        assert stats["requests_by_kind"] == {"GET": 2, "HEAD": 1}
        assert stats["statuses"] == {"200": 3}
        pid = proxy.pid
    finally:
        proxy.stop()
    assert proxy.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
