"""Property test of the B-epsilon tree alone: random set/delete batches against a dict.

Each batch is committed with `TreeWriter` (copy-on-write), its node files written to a
``memory://`` storage, the new root serialized and read back, and a fresh `NodeStore` (no
cache, no staged nodes) must then see exactly the model: point lookups, full scans in both
directions, bounded scans and prefix scans. Every older root must still read as its snapshot.
"""

from __future__ import annotations

import os
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trinitylake.format import tree
from trinitylake.format.node import Message, Node, deserialize, serialize
from trinitylake.storage import Storage

KEYS = [f"k{i:03d}" for i in range(60)] + [f"k{i:03d}x" for i in range(0, 60, 7)]

batch = st.lists(
    st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.text("abcdefgh", min_size=1, max_size=40))),
    min_size=1,
    max_size=25,
)


def _check(store: tree.NodeStore, root: Node, model: dict[str, str]) -> None:
    want = sorted(model.items())
    assert list(tree.iter_items(store, root)) == want
    assert list(tree.iter_items(store, root, reverse=True)) == want[::-1]
    for k in KEYS:
        assert tree.get(store, root, k) == model.get(k), k
    for lo, hi in (("k010", "k030"), ("k000", "k001"), ("k055", None), (None, "k020x"), ("k03", "k04")):
        assert list(tree.iter_items(store, root, lo, hi)) == [
            (k, v) for k, v in want if (lo is None or k >= lo) and (hi is None or k < hi)
        ]
    for p in ("k02", "k0", "k014", "k014x", "z"):
        assert tree.scan_prefix(store, root, p) == [(k, v) for k, v in want if k.startswith(p)]


@settings(max_examples=int(os.environ.get("HYP_N", 40)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    order=st.integers(3, 8),
    max_bytes=st.sampled_from([1024, 1400, 2048, 4096]),
    buffer_max=st.integers(1, 8),
    batches=st.lists(batch, min_size=1, max_size=14),
)
def test_random_batches_match_dict_model(order, max_bytes, buffer_max, batches):
    storage = Storage(f"memory://tree-prop-{uuid.uuid4().hex}")
    params = tree.TreeParams(order=order, max_bytes=max_bytes, buffer_max_messages=buffer_max)
    model: dict[str, str] = {}
    root = Node()
    history: list[tuple[bytes, dict[str, str]]] = []
    for n, ops in enumerate(batches):
        txn = f"txn-{n}"
        msgs = [Message(k, v, txn) for k, v in dict(ops).items()]
        writer_store = tree.NodeStore(storage, order)
        writer = tree.TreeWriter(writer_store, params)
        new_root = writer.commit(root, msgs, keep_txn=txn)
        for path, data in writer.pending.items():
            storage.create_exclusive(path, data)
        for m in msgs:
            if m.value is None:
                model.pop(m.key, None)
            else:
                model[m.key] = m.value
        # The committing transaction's messages stay in the root buffer (change-set rule).
        assert {m.key: m.value for m in new_root.buffer if m.txn == txn} == {m.key: m.value for m in msgs}
        assert len(new_root.keys) <= order - 1
        data = serialize(new_root, order)
        root = deserialize(data, order, "root")
        assert deserialize(data, None, "root") == root
        history.append((data, dict(model)))
        _check(tree.NodeStore(storage, order), root, model)
    # Older versions are untouched by later commits (copy-on-write).
    fresh = tree.NodeStore(storage, order)
    for data, snap in history:
        _check(fresh, deserialize(data, order, "old root"), snap)
    # Every stored node respects the layout limits.
    for info in storage.list(""):
        node = deserialize(storage.read(info.path), order, info.path)
        assert len(node.keys) <= order - 1
        assert not node.children or len(node.children) == len(node.keys) + 1


def test_prefix_end():
    assert tree.prefix_end("C===ns  ") == "C===ns !"
    assert tree.prefix_end("ab") == "ac"
    assert tree.prefix_end("") is None
    # Regression: a prefix ending in U+10FFFF made chr() raise ValueError (listing the tables of
    # a namespace whose name fills its byte width and ends in that code point).
    assert tree.prefix_end("ab\U0010ffff") == "ac"
    assert tree.prefix_end("\U0010ffff\U0010ffff") is None
    for p in ("ab\U0010ffff", "x", "C===\U0010fffe"):
        end = tree.prefix_end(p)
        assert end is None or all(p + s < end for s in ("", " ", "\U0010ffff" * 3))


def test_listing_a_namespace_that_ends_in_the_largest_code_point():
    from trinitylake.lakehouse import Lakehouse

    lh = Lakehouse.create(f"memory://pe-{uuid.uuid4().hex}", namespace_max=4, table_max=4, audit=False)
    for ns, t in (("\U0010ffff", "a"), ("\U0010fffe", "b")):
        lh.create_namespace(ns)
        lh.create_table(ns, t)
    assert lh.view().list_tables("\U0010ffff") == ["a"]
    assert lh.view().list_tables("\U0010fffe") == ["b"]
    assert lh.view().list_namespaces() == ["\U0010fffe", "\U0010ffff"]
