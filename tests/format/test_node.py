"""Node files: Arrow IPC file format, 4 utf8 columns, system rows / key table / buffer."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest

from trinitylake.errors import CorruptNodeError
from trinitylake.format.node import SCHEMA, Message, Node, deserialize, serialize


def _table(data: bytes) -> pa.Table:
    return pa.ipc.open_file(pa.BufferReader(data)).read_all()


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def _leaf() -> Node:
    return Node(
        system={"created_at_millis": "1700000000000", "lakehouse_def": "_lakehouse_def_x.binpb"},
        keys=["B===a   ", "B===b   "],
        values=["p/a.binpb", "p/b.binpb"],
        buffer=[Message("B===c   ", "p/c.binpb", "t1"), Message("B===a   ", None, "t1")],
    )


def test_layout_of_a_leaf():
    t = _table(serialize(_leaf(), order=5))
    assert t.column_names == ["key", "value", "pnode", "txn"]
    assert all(f.type == pa.utf8() and f.nullable for f in t.schema)
    rows = t.to_pylist()
    # System rows: key and value set, n_keys added, pnode/txn NULL.
    sys_rows = rows[:3]
    assert {r["key"]: r["value"] for r in sys_rows} == {
        "created_at_millis": "1700000000000", "lakehouse_def": "_lakehouse_def_x.binpb", "n_keys": "2"}
    assert all(r["pnode"] is None and r["txn"] is None for r in sys_rows)
    # Key table: exactly `order` rows, row 0 NULL/NULL (leaf: no pnode), keys, then all-NULL padding.
    kt = rows[3 : 3 + 5]
    assert kt[0] == {"key": None, "value": None, "pnode": None, "txn": None}
    assert [r["key"] for r in kt[1:3]] == ["B===a   ", "B===b   "]
    assert kt[3:] == [{"key": None, "value": None, "pnode": None, "txn": None}] * 2
    # Buffer: messages at the bottom, newest last; NULL value = delete.
    assert rows[8:] == [
        {"key": "B===c   ", "value": "p/c.binpb", "pnode": None, "txn": "t1"},
        {"key": "B===a   ", "value": None, "pnode": None, "txn": "t1"},
    ]
    assert len(rows) == 3 + 5 + 2


def test_internal_node_pointers():
    n = Node(keys=["k2", "k4"], values=["v2", "v4"], children=["c0", "c1", "c2"])
    rows = _table(serialize(n, order=4)).to_pylist()
    assert rows[0] == {"key": "n_keys", "value": "2", "pnode": None, "txn": None}
    assert rows[1] == {"key": None, "value": None, "pnode": "c0", "txn": None}
    assert rows[2]["pnode"] == "c1" and rows[3]["pnode"] == "c2"
    assert rows[4] == {"key": None, "value": None, "pnode": None, "txn": None}
    assert len(rows) == 5
    back = deserialize(serialize(n, 4), 4, "x")
    assert back.children == ["c0", "c1", "c2"] and not back.is_leaf


@pytest.mark.parametrize("order", [None, 5, 3 + 2])
def test_round_trip(order):
    n = _leaf()
    back = deserialize(serialize(n, 5), order, "mem")
    n.system["n_keys"] = "2"
    assert back == n


def test_round_trip_empty_and_full():
    empty = Node()
    back = deserialize(serialize(empty, 3), 3, "e")
    assert back.keys == [] and back.buffer == [] and back.children == [] and back.system == {"n_keys": "0"}
    full = Node(keys=["a", "b", "c"], values=["1", "2", "3"], buffer=[Message("d", "4", "t")])
    back = deserialize(serialize(full, 4), None, "f")
    assert back.keys == ["a", "b", "c"] and back.buffer == [Message("d", "4", "t")]


def test_serialize_refuses_too_many_keys_or_bad_children():
    with pytest.raises(ValueError):
        serialize(Node(keys=["a", "b", "c"], values=["1", "2", "3"]), 3)
    with pytest.raises(ValueError):
        serialize(Node(keys=["a"], values=["1"], children=["x"]), 3)


def test_java_two_column_single_root_layout_is_accepted():
    # What the Java reference writes: key,value only; system rows then sorted keys; no
    # separator row, padding, pnode/txn columns or buffer.
    t = pa.table(
        {
            "key": ["created_at_millis", "lakehouse_def", "n_keys", "previous_root", "B===ns1     ", "C===ns1     t1      "],
            "value": ["1", "_lakehouse_def_a.binpb", "2", "_" + "0" * 64 + ".arrow", "ns.binpb", "t.binpb"],
        },
        schema=pa.schema([("key", pa.utf8()), ("value", pa.utf8())]),
    )
    n = deserialize(_ipc(t), None, "java")
    assert n.system["lakehouse_def"] == "_lakehouse_def_a.binpb"
    assert n.system["previous_root"].startswith("_0")
    assert n.keys == ["B===ns1     ", "C===ns1     t1      "]
    assert n.values == ["ns.binpb", "t.binpb"]
    assert n.is_leaf and n.buffer == []


def test_missing_pnode_txn_columns_read_as_null():
    t = pa.table({"key": ["n_keys", None, "a", None], "value": ["1", None, "1", None]},
                 schema=pa.schema([("key", pa.utf8()), ("value", pa.utf8())]))
    n = deserialize(_ipc(t), 3, "two-col")
    assert n.keys == ["a"] and n.children == []


def test_unknown_system_rows_are_kept():
    n = Node(system={"future_key": "x"}, keys=["a"], values=["1"])
    assert deserialize(serialize(n, 3), 3, "f").system["future_key"] == "x"


# ---- corruption -------------------------------------------------------------------------
def _good() -> bytes:
    return serialize(_leaf(), 5)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not an arrow file",
        b"ARROW1\x00\x00garbage",
    ],
)
def test_garbage_is_corrupt_node_naming_the_file(data):
    with pytest.raises(CorruptNodeError, match="dir/node-x.arrow"):
        deserialize(data, 5, "dir/node-x.arrow")


@pytest.mark.parametrize("cut", [1, 10, 100, 0.5, -1, -8, -20])
def test_truncated_file_is_corrupt_node(cut):
    data = _good()
    n = int(len(data) * cut) if isinstance(cut, float) else cut
    with pytest.raises(CorruptNodeError, match="the/file.arrow"):
        deserialize(data[:n], 5, "the/file.arrow")


def _rows_to_ipc(rows: list[dict], schema=SCHEMA) -> bytes:
    return _ipc(pa.Table.from_pylist(rows, schema=schema))


def _rows() -> list[dict]:
    return _table(_good()).to_pylist()


def test_wrong_column_type():
    t = pa.table({"key": pa.array([1, 2], pa.int64()), "value": ["a", "b"]})
    with pytest.raises(CorruptNodeError, match="w.arrow.*key"):
        deserialize(_ipc(t), None, "w.arrow")


@pytest.mark.parametrize("damaged", ["\x00node", "pnodf", "tx"])
def test_a_damaged_column_name_is_corrupt_not_a_missing_column(damaged):
    """An internal root whose "pnode" (or "txn") name was damaged on disk (one byte, as the
    reliability fuzzer found) must not read as a leaf with its subtrees silently gone."""
    internal = pa.table({"key": ["n_keys", None, "k", None], "value": ["1", None, "v", None],
                         "pnode": [None, "left.arrow", "right.arrow", None], "txn": [None, None, None, None]},
                        schema=pa.schema([(c, pa.utf8()) for c in ("key", "value", "pnode", "txn")]))
    assert deserialize(_ipc(internal), 3, "ok.arrow").children == ["left.arrow", "right.arrow"]
    renamed = internal.rename_columns(["key", "value", damaged, "txn"] if damaged != "tx" else
                                      ["key", "value", "pnode", damaged])
    with pytest.raises(CorruptNodeError, match="d.arrow has columns the format does not define"):
        deserialize(_ipc(renamed), 3, "d.arrow")


def test_missing_value_column():
    t = pa.table({"key": ["a"]})
    with pytest.raises(CorruptNodeError, match="m.arrow"):
        deserialize(_ipc(t), None, "m.arrow")


def test_broken_layouts():
    rows = _rows()
    # unsorted key table
    bad = [dict(r) for r in rows]
    bad[4]["key"], bad[5]["key"] = bad[5]["key"], bad[4]["key"]
    with pytest.raises(CorruptNodeError, match="not sorted"):
        deserialize(_rows_to_ipc(bad), 5, "u.arrow")
    # key without value in the key table
    bad = [dict(r) for r in rows]
    bad[4]["value"] = None
    with pytest.raises(CorruptNodeError, match="no value"):
        deserialize(_rows_to_ipc(bad), 5, "v.arrow")
    # buffer row without txn
    bad = [dict(r) for r in rows]
    bad[-1]["txn"] = None
    with pytest.raises(CorruptNodeError, match="b.arrow"):
        deserialize(_rows_to_ipc(bad), 5, "b.arrow")
    # n_keys disagrees with the key table
    bad = [dict(r) for r in rows]
    nk = next(r for r in bad if r["key"] == "n_keys")
    nk["value"] = "7"
    with pytest.raises(CorruptNodeError, match="n_keys"):
        deserialize(_rows_to_ipc(bad), 5, "n.arrow")
    # the key table is shorter than the order says
    with pytest.raises(CorruptNodeError, match="key table"):
        deserialize(_rows_to_ipc(rows[:6]), 5, "s.arrow")
    # a system row with a NULL value
    bad = [dict(r) for r in rows]
    bad[0]["value"] = None
    bad[0]["key"] = "x"
    with pytest.raises(CorruptNodeError, match="system row"):
        deserialize(_rows_to_ipc(bad), 5, "y.arrow")


def test_child_pointer_in_a_leaf_is_corrupt():
    # Row 0 (leftmost child) NULL but a key row points to a child: reading it as a leaf would
    # silently drop that subtree.
    rows = _table(serialize(Node(keys=["a", "b"], values=["1", "2"], children=["c0", "c1", "c2"]), 4)).to_pylist()
    sep = next(i for i, r in enumerate(rows) if r["key"] is None and r["value"] is None)
    rows[sep]["pnode"] = None
    with pytest.raises(CorruptNodeError, match="p.arrow.*child pointer"):
        deserialize(_rows_to_ipc(rows), 4, "p.arrow")
    rows[sep + 1]["pnode"] = None
    rows[sep + 2]["pnode"] = None
    assert deserialize(_rows_to_ipc(rows), 4, "p.arrow").is_leaf
