"""The walk reads only what can reach the source (issue #42): a self-contained export (no pin: a
full export) is neither walked, read, sized nor probed; a pinned export (partial, minimal) still
protects the source files it references; and on an object store sizes come from listings, never
a HEAD per file.

Expected sets come from the independent oracle (`tests.oracle.expect`: its own live roots, walk
and sizes); requests on S3 are captured at the HTTP level by a recording proxy in front of the
test server (`tests.support.recording_proxy`), whatever client the library uses.

Other tests of the pinned side: `tests/spark/test_expire.py::test_expire_then_orphans_keep_every_
retained_version_readable` (a pinned minimal export through expire and orphans),
`tests/export/test_export_spark.py::test_expire_job_keeps_pinned_exports_and_collects_dropped_ones`
(partial, minimal and full exports through the expire job) and
`tests/maintenance/test_reach.py::test_walk_input_edge_cases` (a pinned export whose root and
version are both gone is refused).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest

from tests.maintenance.helpers import build_history, build_history_on_s3
from tests.oracle import expect as E
from tests.support.jobs import AHEAD_MS, TTL_MS, run_local
from tests.support.recording_proxy import RecordingProxy
from trinitylake.format.paths import root_name
from trinitylake.lakehouse import Lakehouse
from trinitylake.spark.execution import Execution
from trinitylake.spark.output import read_parquet_table
from trinitylake.treewalk import reach as R
from trinitylake.treewalk import walk_roots as WR
from trinitylake.treewalk.walker import walk_reachable

SHAPE = {"order": 4, "node_max_bytes": 4096, "txn_ttl_millis": TTL_MS}
ROOT_FILE = re.compile(r"_[01]{64}\.arrow$")


def _listing(res, options=None) -> list[tuple]:
    t = read_parquet_table(res.output_location, options)
    return sorted(zip(*(t.column(c).to_pylist() for c in ("path", "kind", "size", "depth", "first_version")),
                      strict=True))


def _export_dir(root_uri: str) -> str:
    return root_uri.rsplit("/", 1)[0]


# ---- local disk --------------------------------------------------------------------------------------
def test_a_full_export_is_neither_walked_nor_read_and_the_jobs_agree_with_the_oracle(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False, **SHAPE)
    build_history(lh, seed=41, ops=20)
    target = str(tmp_path / "exports" / "full-1")
    exp = run_local("export", lh.uri, name="full-1", target=target, mode="full")
    assert exp.status == "succeeded" and exp.details["pinned_version"] is None
    o = E.oracle_of(lh)
    loc = E.self_contained_exports(o)["full-1"]
    assert E.export_roots(o) == {}, "the oracle walks no unpinned export either"
    inp = WR.walk_input(lh)
    assert inp.self_contained_exports == {"full-1": loc} and inp.export_roots == {}
    assert loc not in {r for _, r in inp.roots} and inp.warnings == []

    walk = run_local("walk", lh.uri)
    assert walk.counts["exports"] == 0 and walk.counts["self_contained_exports"] == 1
    assert walk.details["exports"] == {"full-1": {"root": loc, "walked": False, "pinned_version": None,
                                                  "reason": "self-contained, not walked"}}
    summary = json.loads(lh.storage.read(f"_maintenance/walk/{walk.run_id}/_summary.json"))
    assert summary["self_contained_exports"] == {"full-1": loc} and summary["exports"] == {}
    got = _listing(walk)
    assert got == E.live_walk(o).tuples(), "the walk, sizes included, is the oracle's"
    assert not any(p.startswith(_export_dir(loc) + "/") for p, *_ in got)

    # Nothing under the export is read: garbage for its root still walks, and with the export
    # gone the walk neither notices nor warns (no probe either).
    want = E.export_contents(lh.uri, "full-1")
    saved = str(tmp_path / "saved")
    shutil.copytree(target, saved)
    with open(loc.removeprefix("file://"), "wb") as f:
        f.write(b"not a node file")
    assert _listing(run_local("walk", lh.uri)) == got
    shutil.rmtree(target)
    again = run_local("walk", lh.uri)
    assert _listing(again) == got and again.details["warnings"] == []
    shutil.move(saved, target)

    # Expire and orphans walk the same way and delete exactly the oracle's sets; the export
    # still reads as it did.
    versions = E.kept_versions(o)
    expected = E.expired_files(o, versions[:-3])
    owned = E.owned(o)
    res = run_local("expire", lh.uri, min_versions_to_keep=3)
    assert res.status == "succeeded" and res.counts["deleted"] == len(expected) > 0
    assert owned - E.owned(E.oracle_of(lh)) == expected
    o = E.oracle_of(lh)
    reference = time.time() + AHEAD_MS / 1000
    orphans = E.orphans(o, reference - TTL_MS / 1000)
    owned = E.owned(o)
    res = run_local("orphans", lh.uri, reference_time=int(reference * 1000))
    assert res.status == "succeeded" and owned - E.owned(E.oracle_of(lh)) == orphans
    assert E.export_contents(lh.uri, "full-1") == want
    assert E.oracle_of(lh).problems() == [], "every live root, the full export's included, still reads whole"


def test_a_pinned_partial_export_still_protects_the_source_files_it_references(tmp_path):
    """A partial export pinned at v references source nodes by absolute URI. Even with v's own
    root gone (so only the export's root reaches them), orphans keeps every one of them; a full
    export beside it changes nothing."""
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False, **SHAPE)
    build_history(lh, seed=43, ops=24)
    v = lh.latest_version()
    part = run_local("export", lh.uri, name="p1", target=str(tmp_path / "exports" / "p1"), version=v,
                     mode="partial", depth=0)
    assert part.details["pinned_version"] == v
    run_local("export", lh.uri, name="f1", target=str(tmp_path / "exports" / "f1"), mode="full")
    txn = lh.begin()  # one version that replaces the whole tree: the nodes v created only v reaches
    for ns in ("ns0", "ns1"):
        txn.drop_namespace(ns, cascade=True)
    txn.create_namespace("later")
    txn.commit()
    want = E.export_contents(lh.uri, "p1")
    o = E.oracle_of(lh)
    loc = E.export_roots(o)["p1"]
    needed = {k for k in E.walk(o, [(v, loc)], sizes=False).paths() if "://" not in k}
    assert needed, "the partial export references source files"
    os.unlink(lh.storage.root.removeprefix("file://") + "/" + root_name(v))
    o = E.oracle_of(lh)
    others = E.walk(o, [e for e in E.live_entries(o) if e[1] != loc], sizes=False).paths()
    assert needed - others, "some of them only the export still reaches"

    inp = WR.walk_input(lh)
    assert inp.export_roots == {"p1": loc} and set(inp.self_contained_exports) == {"f1"}
    assert (v, loc) in inp.roots and (v, root_name(v)) not in inp.roots
    reference = time.time() + AHEAD_MS / 1000
    expected = E.orphans(o, reference - TTL_MS / 1000)
    assert not expected & needed
    owned = E.owned(o)
    res = run_local("orphans", lh.uri, reference_time=int(reference * 1000))
    assert res.status == "succeeded" and owned - E.owned(E.oracle_of(lh)) == expected
    assert needed <= E.owned(E.oracle_of(lh))
    assert E.export_contents(lh.uri, "p1") == want


# ---- S3, requests captured by a proxy ------------------------------------------------------------------
def _proxy_for(s3_server) -> RecordingProxy:
    return RecordingProxy(int(s3_server.endpoint_url.rsplit(":", 1)[1]))


@pytest.mark.s3
def test_on_s3_the_jobs_after_a_full_export_send_no_request_to_the_export(s3_server, s3_bucket):
    bucket = s3_bucket.removeprefix("s3://")
    uri, opts = f"{s3_bucket}/wh/lh", s3_server.storage_options
    lh = build_history_on_s3(s3_server.client, uri, opts, seed=45, ops=14, **SHAPE)
    exp = run_local("export", uri, storage_options=opts, name="full-1", target=f"{s3_bucket}/wh/exports/full-1",
                    mode="full")
    assert exp.status == "succeeded" and exp.details["pinned_version"] is None
    o = E.oracle_of(lh)
    expected = E.live_walk(o).tuples()
    with _proxy_for(s3_server) as proxy:
        popts = {**opts, "endpoint_url": proxy.endpoint_url}
        walk = run_local("walk", uri, storage_options=popts)
        seen = proxy.requests
        orphans = run_local("orphans", uri, storage_options=popts, dry_run=True)
        expire = run_local("expire", uri, storage_options=popts, dry_run=True, min_versions_to_keep=3)
    assert walk.status == "succeeded" and orphans.status == expire.status == "dry_run"
    nodes = {k for k, kind, *_ in expected if kind in ("root", "node")}
    got = {r.key.removeprefix("wh/lh/") for r in seen if r.method == "GET"}
    assert nodes <= got, "the proxy saw the walk read every node file"
    assert proxy.touching(bucket, "wh/exports/") == [], "not one request names the export"
    assert walk.details["exports"]["full-1"]["walked"] is False
    assert _listing(walk, opts) == expected


@pytest.mark.s3
def test_on_s3_sizes_come_from_listings_never_a_head_per_file(s3_server, s3_bucket, monkeypatch):
    """A pinned partial export's own files (absolute keys, outside the lakehouse root) and the
    lakehouse definitions at the root (outside the hash folders) are sized by listing their
    folders, as the hashed definitions are: the walk's only HEADs are version discovery's probes
    of root files (and of the pinned export's root), never one of a file it sizes."""
    bucket = s3_bucket.removeprefix("s3://")
    uri, opts = f"{s3_bucket}/wh/lh", s3_server.storage_options
    lh = build_history_on_s3(s3_server.client, uri, opts, seed=46, ops=18, **SHAPE)
    part = run_local("export", uri, storage_options=opts, name="p1", target=f"{s3_bucket}/wh/exports/p1",
                     version=lh.latest_version() - 1, mode="partial", depth=0)
    assert part.details["pinned_version"] is not None
    o = E.oracle_of(lh)
    ref = E.live_walk(o)
    leaves = {k: r.size for k, r in ref.rows.items() if r.kind in ("definition", "lakehouse_def")}
    assert any(k.startswith("s3://") for k in leaves), "the export's own definitions are reached"
    assert any("/" not in k for k in leaves), "and lakehouse definitions at the root"
    roots = E.live_entries(o)  # the oracle's live roots (full URIs: the walk keys them itself)

    with _proxy_for(s3_server) as proxy:
        popts = {**opts, "endpoint_url": proxy.endpoint_url}
        walk = run_local("walk", uri, storage_options=popts)
        heads = [r for r in proxy.requests if r.method == "HEAD"]
        assert _listing(walk, opts) == ref.tuples()
        assert all(ROOT_FILE.search(r.key) for r in heads), [str(r) for r in heads]
        sized = {k if "://" not in k else k.removeprefix(f"s3://{bucket}/") for k in leaves}
        assert not {r.key.removeprefix("wh/lh/") for r in heads} & sized
        assert not {r.key for r in heads} & sized

        # The library's walk on the driver with sizes: not one HEAD, whichever listing plan applies.
        plh = Lakehouse.open(uri, storage_options=popts, audit=False)
        for one_stream in (R.LIST_ONE_STREAM_KEYS, 1):  # one stream of the root; per hash folder
            monkeypatch.setattr(R, "LIST_ONE_STREAM_KEYS", one_stream)
            proxy.clear()
            t = walk_reachable(Execution("local"), plh, roots, sizes=True).rows.to_table()
            sizes = dict(zip(t.column("path").to_pylist(), t.column("size").to_pylist(), strict=True))
            assert {k: s for k, s in sizes.items() if k in leaves} == leaves
            assert proxy.count("HEAD") == 0 and proxy.count("GET") > 0
        reader = R.Reader(uri, popts)
        # A few keys (folder listings only), a missing one among them.
        few = sorted(k for k in leaves if "://" in k)[:3] + sorted(k for k in leaves if "/" not in k)[:1]
        proxy.clear()
        missing = few[0].rsplit("/", 1)[0] + "/99999999-gone.binpb"
        assert R.sizes_of(reader, [*few, missing]) == [leaves[k] for k in few] + [-1]
        assert proxy.count("HEAD") == 0
        assert all(r.is_list for r in proxy.requests) and len(proxy.requests) <= len(few) + 1
