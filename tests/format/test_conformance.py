"""On-disk conformance: every file a lakehouse writes is a root, a definition, the hint, or
a hash-prefixed path whose prefix matches the independent MurmurHash3 oracle; a 20-table
lakehouse at order 4 / 4 KiB has a multi-level tree."""

from __future__ import annotations

import os

import pyarrow as pa

from tests.format import oracle
from trinitylake.format.paths import LAKEHOUSE_DEF_RE


def _files(root: str) -> list[str]:
    out = []
    for dp, _, fns in os.walk(root):
        for fn in fns:
            out.append(os.path.relpath(os.path.join(dp, fn), root))
    return out


def _build(make_lakehouse, tmp_path):
    uri = str(tmp_path / "conf")
    lh = make_lakehouse(uri)
    lh.create_namespace("sales", {"owner": "x"})
    for i in range(1, 21):
        lh.create_table("sales", f"t{i:02d}", properties={"i": str(i)})
    txn = lh.begin()
    txn.alter_table("sales", "t03", set_properties={"a": "b"})
    txn.drop_table("sales", "t04")
    txn.create_namespace("日本")
    txn.commit()
    lh.drop_table("sales", "t05")
    lh.rollback(10)
    return uri, lh


def test_every_file_is_named_by_the_format(make_lakehouse, tmp_path):
    uri, lh = _build(make_lakehouse, tmp_path)
    c = oracle.classify_tree(_files(uri))
    assert not c["bad_hash"], c["bad_hash"][:3]
    other = sorted(c["other"])
    assert "_latest_hint.txt" in other
    assert all(f == "_latest_hint.txt" or LAKEHOUSE_DEF_RE.match(f) for f in other), other
    versions = sorted(oracle.root_version(r) for r in c["roots"])
    assert versions == list(range(lh.latest_version() + 1)) == list(range(25))
    # Hash-prefixed files are node files and definitions of the expected shapes.
    names = [oracle.HASHED_RE.match(p).group(5) for p in c["hashed"]]
    assert any(n.startswith("node-") and n.endswith(".arrow") for n in names)
    assert any(n.startswith("sales-t07-") and n.endswith(".binpb") for n in names)
    assert any(n.startswith("日本-") for n in names)
    with open(os.path.join(uri, "_latest_hint.txt"), "rb") as f:
        assert f.read() == b"24"


def test_twenty_tables_make_a_multi_level_tree(make_lakehouse, tmp_path):
    uri, lh = _build(make_lakehouse, tmp_path)
    latest = os.path.join(uri, oracle.root_name(lh.latest_version()))
    t = pa.ipc.open_file(latest).read_all()
    assert t.column_names == ["key", "value", "pnode", "txn"]
    assert t.column("pnode").null_count < len(t), "latest root has no child pointers"
    # Every node file (root or not) obeys the layout and the order; keys are spec-encoded.
    keys: set[str] = set()
    depth_seen = set()
    for rel in _files(uri):
        if not rel.endswith(".arrow"):
            continue
        tab = pa.ipc.open_file(os.path.join(uri, rel)).read_all()
        rows = tab.to_pylist()
        sep = next(i for i, r in enumerate(rows) if r["key"] is None and r["value"] is None)
        assert all(r["pnode"] is None and r["txn"] is None for r in rows[:sep])
        key_table = rows[sep : sep + 4]
        assert len(key_table) == 4
        n_keys = int(next(r["value"] for r in rows[:sep] if r["key"] == "n_keys"))
        assert [r["key"] is not None for r in key_table[1:]] == [True] * n_keys + [False] * (3 - n_keys)
        assert all(r["txn"] is not None and r["pnode"] is None for r in rows[sep + 4 :])
        depth_seen.add(key_table[0]["pnode"] is not None)
        keys.update(r["key"] for r in rows[sep:] if r["key"])
        if oracle.ROOT_RE.match(rel):
            sys_keys = {r["key"] for r in rows[:sep]}
            assert {"created_at_millis", "lakehouse_def", "n_keys"} <= sys_keys
            if rel != oracle.root_name(0):
                assert "previous_root" in sys_keys
        else:
            assert oracle.HASHED_RE.match(rel).group(5).startswith("node-")
    assert depth_seen == {True, False}  # internal nodes and leaves exist
    assert oracle.table_key("sales", "t07") in keys
    assert oracle.ns_key("sales") in keys


def test_tree_contents_after_rollback_and_reopen(make_lakehouse, tmp_path):
    uri, lh = _build(make_lakehouse, tmp_path)
    from trinitylake.lakehouse import Lakehouse

    fresh = Lakehouse.open(uri, audit=False)
    # Version 10 = namespace + 9 tables; the rollback made version 24 equal to it.
    assert fresh.view().list_tables("sales") == [f"t{i:02d}" for i in range(1, 10)]
    assert fresh.view(version=21).list_tables("sales") == [f"t{i:02d}" for i in range(1, 21)]
    assert fresh.view(version=22).list_namespaces() == ["sales", "日本"]
    assert "t04" not in fresh.view(version=22).list_tables("sales")
    assert fresh.view(version=22).describe_table("sales", "t03")["properties"] == {"i": "3", "a": "b"}
    assert fresh.view(version=23).list_tables("sales") == [f"t{i:02d}" for i in range(1, 21) if i not in (4, 5)]


def test_java_single_root_lakehouse_is_read_and_extended(tmp_path):
    """A lakehouse as the Java reference writes it (2-column root, no separator/padding/buffer,
    Java-style definition names) opens, reads, and takes new commits in the spec layout."""
    import io

    from trinitylake.format import definitions as D
    from trinitylake.lakehouse import Lakehouse

    root = tmp_path / "java"
    root.mkdir()
    d = D.new_lakehouse_def(order=4, node_max_bytes=4096)
    def_name = "_lakehouse_def_11111111-2222-4333-8444-555555555555.binpb"
    (root / def_name).write_bytes(D.dumps(d))

    def put(original: str, msg) -> str:
        rel = oracle.hashed_path(original)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(D.dumps(msg))
        return rel

    ns_path = put("ns1-6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8.binpb", D.NamespaceDef(id="n", properties={"from": "java"}))
    t_path = put("ns1-t1-6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8.binpb", D.TableDef(id="t"))
    rows = [("created_at_millis", "1700000000000"), ("lakehouse_def", def_name), ("n_keys", "2"),
            (oracle.ns_key("ns1"), ns_path), (oracle.table_key("ns1", "t1"), t_path)]
    table = pa.table({"key": [k for k, _ in rows], "value": [v for _, v in rows]},
                     schema=pa.schema([("key", pa.utf8()), ("value", pa.utf8())]))
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    (root / oracle.root_name(0)).write_bytes(sink.getvalue())

    lh = Lakehouse.open(str(root), audit=False)
    assert lh.latest_version() == 0
    v = lh.view()
    assert v.list_namespaces() == ["ns1"]
    assert v.list_tables("ns1") == ["t1"]
    assert v.describe_namespace("ns1")["properties"] == {"from": "java"}
    for i in range(6):
        lh.create_table("ns1", f"x{i}")
    lh.drop_table("ns1", "t1")
    assert lh.view().list_tables("ns1") == [f"x{i}" for i in range(6)]
    assert lh.view(version=0).list_tables("ns1") == ["t1"]
    c = oracle.classify_tree(_files(str(root)))
    assert not c["bad_hash"]
    new_root = pa.ipc.open_file(str(root / oracle.root_name(7))).read_all()
    assert new_root.column_names == ["key", "value", "pnode", "txn"]
