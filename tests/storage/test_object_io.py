"""The S3 I/O engine (`trinitylake.storage.object_io`) against the moto server: exclusive
server-side copies, the fallback to GET+PUT across endpoints, request counts by kind, and the
number of requests in flight following the store's latency."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.jobs import run_local
from trinitylake.lakehouse import Lakehouse
from trinitylake.storage import Storage, requests
from trinitylake.storage.object_io import MAX_IN_FLIGHT, InFlight

pytestmark = pytest.mark.s3


def _cost(fn: Any) -> dict[str, int]:
    before = requests.snapshot()
    fn()
    return {k: v for k, v in requests.since(before).items() if v}


def _body(server: Any, uri: str) -> bytes:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bytes(server.client.get_object(Bucket=bucket, Key=key)["Body"].read())


def test_server_side_copy_is_one_request_and_never_overwrites(s3_server, s3_bucket, s3_storage_options):
    src = Storage(f"{s3_bucket}/src", s3_storage_options)
    dst = Storage(f"{s3_bucket}/dst", s3_storage_options)
    assert src.engine is not None and dst.copies_server_side_from(src)
    src.write("a/f1", b"source bytes 1")
    src.write("a/f2", b"source bytes 2")
    dst.write("a/f2", b"someone else's file")
    out: list[Any] = []
    cost = _cost(lambda: out.extend(dst.copy_many_from(src, [("a/f1", "a/f1"), ("a/f2", "a/f2"), ("a/none", "a/none")])))
    # One CopyObject per file, no byte through the client, no HEAD before it.
    assert cost == {"copy": 3}, cost
    assert out[0] is None
    assert isinstance(out[1], FileExistsError) and f"{s3_bucket}/dst/a/f2" in str(out[1])
    assert isinstance(out[2], FileNotFoundError)
    assert _body(s3_server, f"{s3_bucket}/dst/a/f1") == b"source bytes 1"
    assert _body(s3_server, f"{s3_bucket}/dst/a/f2") == b"someone else's file", "an existing key was overwritten"


def test_a_full_export_on_one_endpoint_copies_server_side(s3_server, s3_bucket, s3_storage_options):
    uri, opts = f"{s3_bucket}/lh", s3_storage_options
    lh = Lakehouse.create(uri, storage_options=opts, order=4, node_max_bytes=4096, audit=False)
    for c in range(2):
        t = lh.begin()
        for i in range(15):
            t.create_namespace(f"ns{c}_{i}")
        t.commit()
    exp = run_local("export", uri, storage_options=opts, name="x1", target=f"{s3_bucket}/x1", mode="full")
    r = exp.requests
    nodes = exp.counts["planned"] - exp.counts["unsized_planned"]
    # Definitions by one CopyObject each (not a GET and a PUT); the nodes (their bytes are in
    # the plan) and the rewritten lakehouse definition by PUT.
    assert r["copy"] >= 30 and r["copy"] >= exp.counts["unsized_planned"] - 1, r
    assert r["get"] <= nodes + exp.counts["batches"] + 20, r
    assert r["put"] <= nodes + 2 * exp.counts["batches"] + 20, r
    src = Storage(uri, opts)
    dst = Storage(f"{s3_bucket}/x1", opts)
    same = 0
    for f in src.list():
        if f.path.endswith(".binpb") and not f.path.startswith("_"):
            data = dst.read(f.path) if dst.exists(f.path) else None
            if data is not None:
                assert data == src.read(f.path), f.path
                same += 1
    assert same >= 30


def test_an_export_across_two_endpoints_goes_through_the_client_with_identical_bytes(
        s3_server, slow_s3, s3_storage_options):
    # The same moto server reached at two endpoints (directly and through the delaying proxy):
    # two stores as far as the client can tell, so no server-side copy between them.
    bucket = slow_s3.bucket
    uri = f"{bucket}/lh"
    lh = Lakehouse.create(uri, storage_options=s3_storage_options, order=4, node_max_bytes=4096, audit=False)
    t = lh.begin()
    for i in range(12):
        t.create_namespace(f"ns{i}")
    t.commit()
    target = f"{bucket}/dr"
    exp = run_local("export", uri, storage_options=s3_storage_options, name="dr", target=target, mode="full",
                    target_storage_options=slow_s3.storage_options)
    r = exp.requests
    assert r.get("copy", 0) == 0, r
    assert r["get"] >= 12 and r["put"] >= 12, r
    src = Storage(uri, s3_storage_options)
    listed = s3_server.client.list_objects_v2(Bucket=bucket.removeprefix("s3://"), Prefix="dr/")["Contents"]
    same = 0
    for o in listed:
        rel = o["Key"].removeprefix("dr/")
        if rel.startswith("_") or not rel.endswith(".binpb"):
            continue  # the root, hints and the export's own records (rewritten by design), nodes
        assert _body(s3_server, f"{target}/{rel}") == src.read(rel), rel
        same += 1
    assert same >= 12, same  # every namespace's definition, byte for byte


def test_in_flight_follows_the_latency_of_the_store(slow_s3):
    st = Storage(f"{slow_s3.bucket}/lat", slow_s3.storage_options)
    eng = st.engine
    assert eng is not None
    names = [f"k{i:03d}" for i in range(70)]
    for n in names:
        st.write(n, b"x")
    for n in names:  # one at a time: the store's round trip, no queueing of ours in it
        st.read(n)
    low_latency, low_limit = eng.in_flight.latency(), eng.in_flight.limit()
    slow_s3.proxy.delay_ms = 100.0
    for n in names:
        st.read(n)
    high_latency, high_limit = eng.in_flight.latency(), eng.in_flight.limit()
    assert 0.015 <= low_latency < 0.09, low_latency
    assert high_latency >= 0.095, high_latency
    assert high_limit >= min(MAX_IN_FLIGHT, 3 * low_limit), (low_limit, high_limit)
    # A batch keeps at most the limit in flight, and reaches it when it has the work.
    out = st.read_many(names * 4)
    assert all(o == b"x" for o in out)
    assert eng.peak_in_flight <= high_limit


def test_littles_law():
    f = InFlight(cores=2, cpu_per_request_s=0.3e-3)
    for _ in range(100):
        f.observe(0.02)
    assert f.limit() == 134  # 2 cores / 0.3 ms = 6,667 requests/s, x 20 ms
    for _ in range(300):
        f.observe(0.1)
    assert f.limit() == 667  # the window holds the new latency only
    f.observe_cpu(cpu_seconds=64 * 2e-3, n_requests=64)  # a client costing 2 ms a request
    assert f.limit() == 247  # smoothed: 0.81 ms a request, 2,469 requests/s x 100 ms
    for _ in range(300):
        f.observe(10.0)
    assert f.limit() == MAX_IN_FLIGHT


def test_concurrent_batches_measure_the_cpu_of_a_request_once(monkeypatch):
    """Nine batches at once (an export's parts) share the process's CPU: each request's cost is
    the process's CPU over the requests of every batch, not each batch's view of all of it
    (which measured nine times the cost and held 41 copies in flight where 128 were wanted).
    The CPU between batches (planning, parsing) is no request's."""
    import trinitylake.storage.object_io as oio

    cpu = [0.0]
    monkeypatch.setattr(oio.time, "process_time", lambda: cpu[0])
    f = InFlight(cores=2, cpu_per_request_s=0.3e-3)
    for _ in range(20):  # rounds of nine concurrent batches of 100 requests at 1 ms of CPU each
        for _ in range(9):
            f.batch_started()
        for _ in range(9 * 100):
            f.observe(0.1)
            cpu[0] += 1e-3
        for _ in range(9):
            f.batch_ended()
        cpu[0] += 5.0  # the process's work between batches
    assert abs(f.cpu_per_request_s - 1e-3) < 0.05e-3, f.cpu_per_request_s
    assert 195 <= f.limit() <= 205  # 2 cores / 1 ms x 100 ms
    # A batch too small for a credible figure leaves the estimate alone until the window fills.
    f.batch_started()
    for _ in range(10):
        f.observe(0.1)
        cpu[0] += 5e-3
    f.batch_ended()
    assert abs(f.cpu_per_request_s - 1e-3) < 0.05e-3, f.cpu_per_request_s


def test_a_batch_does_not_raise_the_latency_lone_requests_measured(monkeypatch):
    """In a batch every round trip also waits for the client to handle the others in flight:
    those must not ask for still more in flight. Lone ("quiet") round trips set the estimate;
    a store that slowed down shows in them, and they expire after a minute."""
    import trinitylake.storage.object_io as oio

    f = InFlight(cores=2, cpu_per_request_s=0.3e-3)
    for _ in range(10):
        f.observe(0.02, quiet=True)
    for _ in range(300):
        f.observe(0.5)  # a batch of a client at its limit
    assert f.latency() == 0.02 and f.limit() == 134
    for _ in range(70):
        f.observe(0.1, quiet=True)  # the store slowed down: lone requests see it
    assert f.latency() == 0.1 and f.limit() == 667
    for _ in range(300):
        f.observe(0.5)
    now = oio.time.monotonic()
    monkeypatch.setattr(oio.time, "monotonic", lambda: now + 61)
    assert f.latency() == 0.5 and f.limit() == MAX_IN_FLIGHT  # no quiet one left: the batches' own
