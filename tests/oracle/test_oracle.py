"""The oracle itself: it reads what the library writes the way the spec says, finds what is
missing, and agrees with the library's own reads (two independent readers of one lakehouse)."""

from __future__ import annotations

import io
import os
import time

import pyarrow as pa
import pytest

from tests.format.oracle import root_name
from tests.maintenance.helpers import build_history, write_minimal_export
from tests.oracle import Oracle
from tests.oracle.reader import OracleError, base_of, parse_node
from trinitylake.lakehouse import Lakehouse


@pytest.fixture
def lh(tmp_path) -> Lakehouse:
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False)
    build_history(lh, seed=5, ops=30)
    return lh


def test_every_version_reads_as_the_library_reads_it(lh):
    snap = Oracle(lh.uri).snapshot()
    assert sorted(snap.versions) == list(range(lh.latest_version() + 1))
    for v, items in snap.versions.items():
        library = {k: lh.storage.read(p) for k, p in lh.view(version=v).all_items()}
        assert items == library, f"version {v}"


def test_reach_covers_the_tree_and_its_definitions_and_no_other_file(lh):
    o = Oracle(lh.uri)
    live = o.live_files()
    owned = o.owned_files()
    assert live <= owned
    assert any("-node-" in p for p in live) and any(p.startswith("_lakehouse_def_") for p in live)
    assert all(p.startswith("_") or p.endswith((".arrow", ".binpb")) for p in live)
    # A file of the tree is deleted: the oracle says which one is missing.
    victim = sorted(p for p in live if "node-" in p)[0]
    os.remove(os.path.join(o.files.path(o.root), victim))
    problems = o.problems()
    assert problems and victim.rsplit("/", 1)[-1] in problems[0]


def test_exports_are_read_through_their_full_uri_pointers(lh, tmp_path):
    version = lh.latest_version() - 2
    loc = write_minimal_export(lh, version, str(tmp_path / "exp"), "e1")
    o = Oracle(lh.uri)
    snap = o.snapshot()
    assert snap.exports["e1"] == snap.versions[version]
    assert o.live_roots()["export:e1"] == loc and o.live_roots()["pin:e1"].endswith(".arrow")
    # Pointers inside source node files stay relative to the source root.
    assert o.reach_relative([loc]) == o.version_files([version]) - {root_name(version)}


def test_a_changed_definition_is_reported_as_a_changed_key(lh):
    o = Oracle(lh.uri)
    before = o.snapshot()
    latest = lh.latest_version()
    key, path = next(iter(lh.view(version=latest).all_items()))
    with open(os.path.join(o.files.path(o.root), path), "ab") as f:
        f.write(b"\x00")
    assert any(f"version {latest}: keys differ" in p for p in o.problems(before))


def test_the_java_single_node_layout_reads_as_a_leaf():
    """Java writes roots with only key/value columns and no separator row (FORMAT.md §2)."""
    t = pa.table({"key": ["created_at_millis", "lakehouse_def", "n_keys", "B===ns"],
                  "value": ["1", "_lakehouse_def_x.binpb", "1", "0000/0000/0000/00000000-ns-x.binpb"]})
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t)
    node = parse_node(sink.getvalue(), 128, "java-root")
    assert node.entries == [("B===ns", "0000/0000/0000/00000000-ns-x.binpb")] and not node.children
    assert node.system["lakehouse_def"] == "_lakehouse_def_x.binpb"


def test_garbage_is_an_oracle_error_and_bases_follow_full_uris():
    with pytest.raises(OracleError):
        parse_node(b"not arrow", 4, "garbage")
    assert base_of("0000/0000/0000/00000000-node-a.arrow", "file:///lh") == "file:///lh"
    assert base_of("s3://b/src/0110/0000/1011/01111000-node-a.arrow", "file:///exp") == "s3://b/src"
    with pytest.raises(OracleError):
        base_of("s3://b/src/node-a.arrow", "file:///exp")


def test_a_reference_rule_broken_in_the_library_walk_is_caught(tmp_path, monkeypatch):
    """Mutation check: the library's walk forgets the definitions in non-root key tables (in
    its batch node reader, `maintenance.node_batch`, which every walk uses). Expire then
    deletes definitions retained versions still use, and the oracle reports them."""
    import numpy as np

    from tests.support.jobs import TTL_MS, run_local
    from trinitylake.format.node_arrow import VALUE
    from trinitylake.treewalk import node_batch as NB

    lh = Lakehouse.create(str(tmp_path / "m"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=5, ops=30)
    o = Oracle(lh.uri)
    before = o.snapshot()
    original = NB.decode_pointers

    def forgetful(datas, where, **kw):
        out = original(datas, where, **kw)
        non_root = np.array([out.lakehouse_def[n] is None for n in out.node.tolist()], bool)
        keep = ~((out.kind == VALUE) & non_root)
        out.node, out.kind, out.pointer = out.node[keep], out.kind[keep], out.pointer.filter(pa.array(keep))
        return out

    monkeypatch.setattr(NB, "decode_pointers", forgetful)
    run_local("expire", lh.uri, min_versions_to_keep=3)
    monkeypatch.undo()
    problems = o.problems(before)
    assert problems and "missing" in problems[0], problems


@pytest.mark.s3
def test_on_s3_a_deleted_or_rewritten_file_is_seen_by_the_next_call(s3_server, s3_bucket):
    """The S3 reader answers reads against one listing per call and keeps the bytes it fetched
    (`BotoFiles`): a file deleted or rewritten between two calls must still be reported."""
    opts = s3_server.storage_options
    lh = Lakehouse.create(f"{s3_bucket}/lh", storage_options=opts, order=4, node_max_bytes=4096, audit=False)
    build_history(lh, seed=5, ops=12)
    o = Oracle(lh.uri, s3_client=s3_server.client)
    before = o.snapshot()
    assert o.problems(before) == []
    bucket, prefix = lh.uri[5:].split("/", 1)
    latest = lh.latest_version()
    key, path = next(iter(lh.view(version=latest).all_items()))
    # Rewritten: other bytes under the same key (a new ETag) are read, not the kept ones.
    s3_server.client.put_object(Bucket=bucket, Key=f"{prefix}/{path}", Body=b"changed")
    assert any(f"version {latest}: keys differ" in p for p in o.problems(before))
    # Deleted: a node file of the tree is gone from the next call's listing.
    victim = sorted(p for p in o.live_files() if "node-" in p)[0]
    s3_server.client.delete_object(Bucket=bucket, Key=f"{prefix}/{victim}")
    problems = o.problems()
    assert problems and victim.rsplit("/", 1)[-1] in problems[0]
    assert not o.files.exists(f"{o.root}/{victim}")


def test_a_live_distributed_transaction_dropped_by_the_library_is_caught(tmp_path, monkeypatch):
    """Mutation check: the library forgets live distributed transactions (its walks start from
    no running root). The orphan job then deletes a definition a live transaction staged long
    ago; the oracle, which reads the transaction's state files itself, reports it."""
    from tests.support.jobs import TTL_MS, run_local
    from trinitylake.lakehouse import distributed as DT

    lh = Lakehouse.create(str(tmp_path / "t"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    lh.create_namespace("ns")
    dt = DT.DistributedTransaction.begin(lh)
    dt.stage(lambda t: t.create_table("ns", "early"))
    o = Oracle(lh.uri)
    old = time.time() - 40 * 86_400
    for p in o.owned_files():  # staged long ago...
        os.utime(os.path.join(o.files.path(o.root), p), (old, old))
    dt.stage(lambda t: t.create_table("ns", "late"))  # ...the lease renewed since
    before = o.snapshot()
    assert list(before.txns) == [dt.id]
    monkeypatch.setattr(DT, "live_running_roots", lambda lakehouse: [])  # walk_roots looks it up on the module per call
    run_local("orphans", lh.uri)
    monkeypatch.undo()
    problems = o.problems(before)
    assert problems and "missing" in problems[0], problems
