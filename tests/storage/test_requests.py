"""Object-store requests counted by kind, against the request model, on the test S3 server.

The model (ARCHITECTURE.md, "Requests are the cost"): one GET per file read, one PUT per file
written (verified by its ETag, no HEAD), one LIST per 1,000 listed keys, one DELETE per 1,000
deleted keys. Expected counts come from that model and from the independent oracle
(`tests.oracle`), never from the job's own counts.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.spark.conftest import reach
from tests.support.jobs import run_local
from trinitylake.lakehouse import Lakehouse
from trinitylake.storage import Storage, requests

pytestmark = pytest.mark.s3


@pytest.mark.parametrize(("method", "url", "kind"), [
    ("GET", "http://127.0.0.1:9000/bucket/a/b.arrow", "get"),
    ("GET", "http://127.0.0.1:9000/bucket?list-type=2&prefix=a%2F", "list"),
    ("GET", "https://bucket.s3.amazonaws.com/?list-type=2&continuation-token=x", "list"),
    ("GET", "http://127.0.0.1:9000/bucket?delimiter=%2F", "list"),
    ("PUT", "http://127.0.0.1:9000/bucket/a", "put"),
    ("HEAD", "http://127.0.0.1:9000/bucket/a", "head"),
    ("POST", "http://127.0.0.1:9000/bucket?delete", "delete"),
    ("DELETE", "http://127.0.0.1:9000/bucket/a", "delete"),
    ("POST", "http://127.0.0.1:9000/bucket/a?uploads", "other"),
])
def test_kind_of_a_request(method, url, kind):
    assert requests.kind_of(method, url) == kind


def _cost(fn):
    before = requests.snapshot()
    fn()
    return {k: v for k, v in requests.since(before).items() if v}


def test_each_storage_operation_costs_what_the_model_says(s3_bucket, s3_storage_options):
    st = Storage(f"{s3_bucket}/req", s3_storage_options)
    assert _cost(lambda: st.create_exclusive("a/x", b"hello")) == {"put": 1, "bytes_written": 5}
    assert _cost(lambda: st.write("a/y", b"hi")) == {"put": 1, "bytes_written": 2}
    # No HEAD before the GET (s3fs sends one to size a ranged read unless told otherwise).
    assert _cost(lambda: st.read("a/x")) == {"get": 1, "bytes_read": 5}
    assert _cost(lambda: st.info("a/x")) == {"head": 1}
    with pytest.raises(FileExistsError):
        st.create_exclusive("a/x", b"other")
    # 1,001 more files: a recursive listing is two LIST pages, a bulk delete two requests.
    names = [f"many/{i:05d}" for i in range(1001)]  # written through boto3: a plain put each
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: st.write(n, b"."), names))
    assert _cost(lambda: list(st.list("many"))) == {"list": math.ceil(1001 / 1000)}
    assert _cost(lambda: st.delete(names)) == {"delete": math.ceil(1001 / 1000)}


def test_a_put_is_verified_by_its_etag(s3_bucket, s3_storage_options):
    import hashlib

    st = Storage(f"{s3_bucket}/etag", s3_storage_options)
    etag = st.create_exclusive("f", b"content")
    assert etag is not None and etag.strip('"') == hashlib.md5(b"content").hexdigest()  # noqa: S324


def test_walk_and_export_requests_match_the_model(s3_bucket, s3_storage_options):
    uri, opts = f"{s3_bucket}/model/lh", s3_storage_options
    lh = Lakehouse.create(uri, storage_options=opts, order=4, node_max_bytes=4096, audit=False)
    for c in range(3):  # 60 definitions in 3 versions (moto answers ~250 requests/s)
        t = lh.begin()
        for i in range(20):
            t.create_namespace(f"ns{c}_{i}")
        t.commit()
    versions = range(0, lh.latest_version() + 1)
    oracle = reach(lh, versions)
    node_files = len(oracle.paths("root")) + len(oracle.paths("node"))
    files = len(oracle.paths())

    walk = run_local("walk", uri, storage_options=opts)
    r = walk.requests
    # One GET per node file, plus the version hint and the lakehouse definition it starts from.
    assert node_files <= r["get"] <= node_files + 4, r
    # Sizes come from listings (at most the 16 hash folders, paginated), not a HEAD per file.
    assert r["head"] <= 4, r
    # The root listed in one stream of pages (a small lakehouse), plus a few delimited
    # listings of the root's bookkeeping (versions, distributed transactions, exports).
    assert r["list"] <= math.ceil(files / 1000) + 7, r

    latest = reach(lh, [lh.latest_version()])
    exported = len(latest.paths())
    exp = run_local("export", uri, storage_options=opts, name="m1", target=f"{s3_bucket}/model/x1", mode="full")
    r = exp.requests
    parts = exp.counts["batches"]
    # Per definition one server-side CopyObject (no GET, no PUT: no byte through the client;
    # verified by listings of each part's key range), per node one GET while planning and one
    # PUT (verified by its ETag); the lakehouse definition, rewritten, one GET and one PUT; per
    # plan part a PUT of its rows, a GET of them, a PUT of its manifest and two LISTs; around
    # them a bounded amount of bookkeeping (the export's records and hints, the commit that
    # records it, version discovery). One more request per file would break these bounds.
    bookkeeping = 20
    defs = exp.counts["unsized_planned"]
    nodes = exported - defs
    assert defs >= 60 and r["copy"] >= defs - 1, r
    assert r["get"] <= nodes + parts + bookkeeping, r
    assert r["put"] <= nodes + 2 * parts + bookkeeping, r
    assert r["list"] <= 2 * parts + bookkeeping, r
    assert r["head"] <= bookkeeping, r


def test_a_copied_range_is_listed_per_folder_in_flight_together(s3_bucket, s3_storage_options):
    """`listed_etags` over keys in three hash folders: one LIST per folder right below the one
    they share, side by side (a store that walks a folder per LIST walks each once, not the
    whole tree); every key found with its size and ETag, a missing one absent, a key of
    another folder in between never reported."""
    from trinitylake.storage.verify import MAX_FOLDER_RUNS, folder_runs, listed_etags

    st = Storage(f"{s3_bucket}/runs", s3_storage_options)
    paths = [f"x/{a}/{b}/f{i}.arrow" for a in ("0000", "0001", "0011") for b in ("00", "01") for i in range(3)]
    for p in paths:
        st.write(p, p.encode())
    st.write("x/0010/00/other.arrow", b"not asked")  # between two asked folders
    st.write("x/_root.arrow", b"r")
    asked = sorted([*paths, "x/0011/01/missing.arrow"])
    assert [len(r) for r in folder_runs(asked)] == [6, 6, 7]
    before = requests.snapshot()
    got = listed_etags(st, asked)
    cost = {k: v for k, v in requests.since(before).items() if v}
    assert cost == {"list": 3}, cost
    assert set(got) == set(paths)
    import hashlib

    assert all(got[p][0] == len(p) and str(got[p][1]).strip('"') == hashlib.md5(p.encode()).hexdigest()  # noqa: S324
               for p in paths)
    # Files right in the shared folder stay with their neighbours; too many folders: one listing.
    assert folder_runs(["x/_a.arrow", "x/_b.arrow", "x/0000/f", "x/0001/f"]) == [
        ["x/_a.arrow", "x/_b.arrow"], ["x/0000/f"], ["x/0001/f"]]
    many = [f"x/{i:04d}/f" for i in range(MAX_FOLDER_RUNS + 1)]
    assert folder_runs(many) == [many]


def test_server_side_copies_are_verified_by_a_listing_of_the_target_alone(s3_bucket, s3_storage_options):
    """An export's definitions copied by CopyObject within one bucket: one LIST of the target's
    key range verifies them (the source is not listed: the store copied it atomically, and a
    lakehouse file never changes once written). A key that already existed is compared with its
    source by one HEAD: kept when the same bytes, a conflict otherwise, never overwritten."""
    from trinitylake.jobs.export import copying as XC
    from trinitylake.jobs.export import rules as X

    src = Storage(f"{s3_bucket}/ssc/src", s3_storage_options)
    tgt = Storage(f"{s3_bucket}/ssc/tgt", s3_storage_options)
    assert tgt.copies_server_side_from(src)
    paths = [f"0000/0000/0000/0000000{i}-d.binpb" for i in range(5)]
    for i, p in enumerate(paths):
        src.write(p, f"definition {i}".encode())
    tgt.write(paths[3], b"definition 3")  # an earlier run's copy: the same bytes
    tgt.write(paths[4], b"definition X")  # the same size, other bytes
    spec = X.ExportSpec.make(name="e", version=7, mode="full", depth=None, source_uri=src.root,
                             target_uri=tgt.root, source_id="id-1", order=4)
    rows = [X.plan_file(src, p, X.KIND_ODF, 0) for p in paths]
    before = requests.snapshot()
    stats, files = XC.copy_batch(rows, src, tgt, spec, checksum=True, recorded={})
    cost = {k: v for k, v in requests.since(before).items() if v}
    assert cost.get("copy") == 5 and cost.get("list") == 1 and cost.get("head") == 2, cost
    assert "get" not in cost and "put" not in cost, cost
    assert (stats.copied, stats.skipped, stats.verified) == (3, 1, 4) and not stats.errors, stats
    assert len(stats.conflicts) == 1 and paths[4] in stats.conflicts[0], stats.conflicts
    assert tgt.read(paths[4]) == b"definition X"
    import hashlib

    for i in range(4):  # the part's manifest: each file's size and MD5 (moto lists ETags)
        data = f"definition {i}".encode()
        assert files[paths[i]] == (len(data), hashlib.md5(data).hexdigest()), files  # noqa: S324
    assert paths[4] not in files
