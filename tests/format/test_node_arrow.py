"""The batch node decoder (`format.node_arrow`) against the independent oracle's reader.

Valid node files of every shape (library trees with write buffers, the Java reference's root,
hand-made layouts) must decode to the pointers `tests.oracle.reader.parse_node` reads from
them; corrupt ones must fail with the typed error `deserialize` raises (the library's error
contract), wherever in a batch they sit."""

from __future__ import annotations

import io
import os
import random
import struct

import pyarrow as pa
import pytest

from tests.format.test_java_interop import write_java_lakehouse
from tests.maintenance.helpers import build_history
from tests.oracle.reader import parse_node
from trinitylake.errors import CorruptNodeError, TrinityLakeError
from trinitylake.format.node import SCHEMA, Message, Node, deserialize, serialize
from trinitylake.format.node_arrow import CHILD, MESSAGE, VALUE, decode_pointers
from trinitylake.format.paths import root_name
from trinitylake.lakehouse import Lakehouse

SCHEMA_2 = pa.schema([("key", pa.utf8()), ("value", pa.utf8())])


def _ipc(table: pa.Table, max_chunksize: int | None = None) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=max_chunksize)
    return sink.getvalue()


def _rows(rows: list[tuple], schema: pa.Schema = SCHEMA, max_chunksize: int | None = None) -> bytes:
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    return _ipc(pa.table([pa.array(c, f.type) for c, f in zip(cols, schema, strict=True)], schema=schema),
                max_chunksize)


def _decoded(datas: list[bytes]) -> list[tuple[list[str], list[str], list[str], str | None] | str]:
    """Per file: (children, values, messages, lakehouse_def), or its error text."""
    out = decode_pointers(datas, lambda i: f"file-{i}.arrow")
    got: list = []
    for i in range(len(datas)):
        if i in out.errors:
            e = out.errors[i]
            got.append(f"{type(e).__name__}: {e}")
            continue
        mine = [(int(k), p) for n, k, p in zip(out.node, out.kind, out.pointer.to_pylist(), strict=True) if n == i]
        assert [k for k, _ in mine] == sorted(k for k, _ in mine), "children, values, messages: in that order"
        got.append(([p for k, p in mine if k == CHILD], [p for k, p in mine if k == VALUE],
                    [p for k, p in mine if k == MESSAGE], out.lakehouse_def[i]))
    return got


def _oracle(data: bytes, order: int) -> tuple[list[str], list[str], list[str], str | None]:
    n = parse_node(data, order, "oracle")
    return (n.children, [v for _, v in n.entries], [v for _, v in n.messages if v is not None],
            n.system.get("lakehouse_def"))


def _deserialize_error(data: bytes, where: str) -> str:
    with pytest.raises(TrinityLakeError) as e:
        deserialize(data, None, where)
    return f"{type(e.value).__name__}: {e.value}"


def _node_files(lh: Lakehouse) -> list[str]:
    root = lh.storage.root[len("file://"):]
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.join(d, f) for f in files if f.endswith(".arrow")]
    return sorted(out)


def test_every_node_file_of_a_history_decodes_as_the_oracle_reads_it(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False)
    build_history(lh, seed=3, ops=80)
    paths = _node_files(lh)
    datas = [open(p, "rb").read() for p in paths]
    got = _decoded(datas)
    expected = [_oracle(d, 4) for d in datas]
    assert got == expected
    # The fixture has what the decoder must handle: internal nodes, write buffers (with
    # deletes), roots with their lakehouse_def.
    assert sum(bool(e[0]) for e in expected) > 3
    assert sum(bool(e[2]) for e in expected) > 3
    assert any(len(parse_node(d, 4, "x").messages) > len(e[2]) for d, e in zip(datas, expected, strict=True))
    assert sum(e[3] is not None for e in expected) == lh.latest_version() + 1


def test_the_java_reference_root_decodes_as_the_oracle_reads_it(tmp_path):
    write_java_lakehouse(tmp_path / "j", [f"n{i:02d}" for i in range(30)], [("n00", f"t{i}") for i in range(5)],
                         extra_keys=["B===zz      "])
    data = (tmp_path / "j" / root_name(0)).read_bytes()
    assert pa.ipc.open_file(pa.BufferReader(data)).schema.names == ["key", "value"]
    got = _decoded([data])
    assert got == [_oracle(data, 4)]
    assert len(got[0][1]) == 36 and got[0][0] == [] and got[0][3].startswith("_lakehouse_def_")


def _hand_made() -> list[tuple[str, bytes, int]]:
    """Valid files of unusual shapes: (label, bytes, key-table rows for the oracle)."""
    ld = "_lakehouse_def_a.binpb"
    out = []
    out.append(("two columns with a separator",
                _rows([("n_keys", "1"), (None, None), ("a", "d/a.binpb"), (None, None)], SCHEMA_2), 3))
    out.append(("java layout, a system row between keys",
                _rows([("created_at_millis", "1"), ("B===a", "d/a"), ("lakehouse_def", ld), ("B===b", "d/b"),
                       ("n_keys", "9")], SCHEMA_2), 0))
    out.append(("java layout in four columns",
                _rows([("lakehouse_def", ld, None, None), ("B===a", "d/a", None, None), ("B===b", "d/b", None, None)]),
                0))
    out.append(("an empty file", _rows([]), 0))
    nonnull = pa.schema([pa.field(f.name, f.type, nullable=False) for f in SCHEMA_2])
    out.append(("non-nullable fields, metadata",
                _ipc(pa.table({"key": ["lakehouse_def", "C===x"], "value": [ld, "d/x"]}, schema=nonnull)
                     .replace_schema_metadata({"writer": "java"})), 0))
    out.append(("unknown system rows, a later lakehouse_def wins",
                _rows([("lakehouse_def", "first", None, None), ("x-future", "y", None, None),
                       ("lakehouse_def", "second", None, None), ("n_keys", "1", None, None),
                       (None, None, None, None), ("a", "d/a", None, None), (None, None, None, None)]), 3))
    node = Node(system={"created_at_millis": "5"}, keys=["a", "b", "c"], values=["d/1", "d/1", "c1"],
                children=["c0", "c1", "c2", "c3"],
                buffer=[Message("e", "d/1", "t1"), Message("f", None, "t1"), Message("g", "c0", "t2")])
    out.append(("repeated pointers, a child that is also a value", serialize(node, 5), 5))
    out.append(("record batches of two rows each",
                _rows([(r["key"], r["value"], r["pnode"], r["txn"]) for r in
                       pa.ipc.open_file(pa.BufferReader(serialize(node, 6))).read_all().to_pylist()],
                      max_chunksize=2), 6))
    gap = [("n_keys", "2", None, None), (None, None, None, None), ("a", "d/a", None, None),
           (None, None, None, None), ("b", "d/b", None, None), ("m", "d/m", None, "t")]
    out.append(("a NULL row inside the key table", _rows(gap), 4))
    out.append(("n_keys spelled with a leading zero",
                _rows([("n_keys", "01", None, None), (None, None, None, None), ("a", "d/a", None, None)]), 2))
    return out


def test_hand_made_layouts_decode_as_the_oracle_reads_them():
    cases = _hand_made()
    got = _decoded([d for _, d, _ in cases])
    for (label, data, order), g in zip(cases, got, strict=True):
        assert g == _oracle(data, order), label
    by_label = dict(zip([c[0] for c in cases], got, strict=True))
    assert by_label["unknown system rows, a later lakehouse_def wins"][3] == "second"
    assert by_label["java layout, a system row between keys"][1] == ["d/a", "d/b"]


def _corrupt() -> list[tuple[str, bytes]]:
    good = serialize(Node(system={"lakehouse_def": "_ld"}, keys=["a", "b"], values=["d/a", "d/b"],
                          buffer=[Message("c", "d/c", "t1")]), 4)
    rows = [(r["key"], r["value"], r["pnode"], r["txn"])
            for r in pa.ipc.open_file(pa.BufferReader(good)).read_all().to_pylist()]
    sep = next(i for i, r in enumerate(rows) if r[0] is None and r[1] is None)

    def edit(i: int, **kw: object) -> bytes:
        r = list(rows)
        cols = {"key": 0, "value": 1, "pnode": 2, "txn": 3}
        row = list(r[i])
        for k, v in kw.items():
            row[cols[k]] = v
        r[i] = tuple(row)
        return _rows(r)

    internal = serialize(Node(keys=["a", "b"], values=["1", "2"], children=["c0", "c1", "c2"]), 4)
    irows = [(r["key"], r["value"], r["pnode"], r["txn"])
             for r in pa.ipc.open_file(pa.BufferReader(internal)).read_all().to_pylist()]
    isep = next(i for i, r in enumerate(irows) if r[0] is None and r[1] is None)
    no_left = list(irows)
    no_left[isep] = (None, None, None, None)
    missing_child = list(irows)
    missing_child[isep + 2] = (irows[isep + 2][0], irows[isep + 2][1], None, None)
    return [
        ("empty bytes", b""),
        ("garbage", b"not an arrow file at all"),
        ("truncated", good[: len(good) // 2]),
        ("tail cut", good[:-9]),
        ("wrong column type", _ipc(pa.table({"key": pa.array([1, 2]), "value": ["a", "b"]}))),
        ("no value column", _ipc(pa.table({"key": ["a"]}))),
        ("duplicate columns", _ipc(pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"]), pa.array(["c"])],
                                                        names=["key", "value", "key"]))),
        ("unsorted keys", edit(sep + 1, key="z")),
        ("equal keys", edit(sep + 2, key="a")),
        ("key without value", edit(sep + 1, value=None)),
        ("value without key", edit(sep + 3, value="d/x")),
        ("buffer row without txn", edit(len(rows) - 1, txn=None)),
        ("buffer row without key", edit(len(rows) - 1, key=None)),
        ("n_keys disagrees", edit(next(i for i, r in enumerate(rows) if r[0] == "n_keys"), value="7")),
        ("system row with a NULL value", edit(0, value=None)),
        ("system row with a NULL key", edit(0, key=None)),
        ("child pointer in a leaf", _rows(no_left)),
        ("internal key without child", _rows(missing_child)),
        ("unsorted across a NULL row", _rows([("n_keys", "2", None, None), (None, None, None, None),
                                               ("b", "d/b", None, None), (None, None, None, None),
                                               ("a", "d/a", None, None)])),
        ("java layout unsorted across a system row", _rows([("B===b", "1"), ("n_keys", "2"), ("B===a", "2")],
                                                           SCHEMA_2)),
        ("java layout unsorted", _rows([("lakehouse_def", "x"), ("B===b", "1"), ("B===a", "2")], SCHEMA_2)),
        ("java layout with a NULL value", _rows([("lakehouse_def", "x"), ("B===b", None), ("B===c", "2")],
                                                SCHEMA_2)),
        ("a column name that is not UTF-8", good.replace(b"pnode", b"pn\xffde")),
        ("large_string columns", _ipc(pa.table({"key": pa.array(["a"], pa.large_utf8()),
                                                "value": pa.array(["b"], pa.large_utf8())}))),
    ]


def test_corrupt_files_fail_with_the_error_deserialize_raises_wherever_they_sit():
    cases = _corrupt()
    good = serialize(Node(system={"lakehouse_def": "_ld"}, keys=["k"], values=["d/k"], children=[]), 4)
    # Good files around and between the corrupt ones: one batch, each file judged on its own.
    datas = [good] + [d for _, d in cases for d in (d, good)]
    got = _decoded(datas)
    assert got[0] == _oracle(good, 4)
    for j, (label, data) in enumerate(cases):
        i = 1 + 2 * j
        expected = _deserialize_error(data, f"file-{i}.arrow")
        assert got[i] == expected, label
        assert f"file-{i}.arrow" in got[i] and got[i].startswith("CorruptNodeError: "), label
        assert got[i + 1] == _oracle(good, 4), f"the good file after {label!r}"


def test_a_corrupt_offset_fails_its_file_only():
    """Offsets that point outside the buffers: found by full validation of the batch, then
    of each file (never read out of bounds)."""
    t = pa.table({"key": ["n_keys", None, "a", None], "value": ["1", None, "d/a", None]}, schema=SCHEMA_2)
    data = bytearray(_ipc(t))
    pattern = struct.pack("<5i", 0, 1, 1, 4, 4)  # the value column's offsets
    at = data.find(pattern)
    assert at > 0
    bad = bytes(data[:at]) + struct.pack("<5i", 0, 1, 9999, 4, 4) + bytes(data[at + 20:])
    got = _decoded([bytes(data), bad, bytes(data)])
    assert got[0] == got[2] == _oracle(bytes(data), 3)
    assert got[1] == _deserialize_error(bad, "file-1.arrow") and "not a readable Arrow IPC file" in got[1]


def _mutations(rng: random.Random, data: bytes) -> bytes:
    """A random edit of a valid file: bytes flipped, or a cell of the table changed."""
    if rng.random() < 0.3:
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    t = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    rows = [list(r.values()) for r in t.to_pylist()]
    if not rows:
        return data
    r, c = rng.randrange(len(rows)), rng.randrange(len(t.column_names))
    choice = rng.random()
    if choice < 0.4:
        rows[r][c] = None
    elif choice < 0.7:
        rows[r][c] = rng.choice(["", "a", "zz", "n_keys", "lakehouse_def", "0", "../x", rows[rng.randrange(len(rows))][c]])
    else:
        rows.insert(rng.randrange(len(rows) + 1), [rng.choice([None, "k", "txn"]) for _ in t.column_names])
    return _rows([tuple(x) for x in rows], t.schema)


def test_random_edits_decode_as_deserialize_reads_them(tmp_path):
    """Differential fuzzing (deserialize is the error contract; the oracle checks less):
    every edited file either fails with deserialize's error or decodes to its pointers."""
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False)
    build_history(lh, seed=9, ops=30)
    sources = [open(p, "rb").read() for p in _node_files(lh)]
    sources.append(_hand_made()[0][1])
    sources.append(_hand_made()[1][1])
    rng = random.Random(2024)
    datas = [_mutations(rng, rng.choice(sources)) for _ in range(600)]
    got = _decoded(datas)
    failed = 0
    for i, (data, g) in enumerate(zip(datas, got, strict=True)):
        try:
            node = deserialize(data, None, f"file-{i}.arrow")
        except CorruptNodeError as e:
            failed += 1
            assert g == f"{type(e).__name__}: {e}", i
            continue
        expected = (node.children, node.values, [m.value for m in node.buffer if m.value is not None],
                    node.system.get("lakehouse_def"))
        assert g == expected, i
    assert 100 < failed < 550, "the edits make both good and bad files"
