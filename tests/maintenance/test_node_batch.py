"""Node files expanded in batches (`maintenance.node_batch`): the references of every node
against the independent oracle, the rows and errors of `reach.expand_node` (the one-file
reader), and the driver's walk built on it against the oracle's walk (`tests.oracle.expect`)."""

from __future__ import annotations

import os
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.format.test_java_interop import write_java_lakehouse
from tests.format.test_node_arrow import _ipc
from tests.maintenance.helpers import build_history, write_minimal_export
from tests.oracle import expect as E
from tests.oracle.reader import Oracle, base_of, parse_node
from tests.support.faults import FaultSpec, injected
from trinitylake.errors import CorruptNodeError
from trinitylake.format import node_arrow
from trinitylake.format.node import Message, Node, serialize
from trinitylake.format.paths import root_name
from trinitylake.lakehouse import Lakehouse
from trinitylake.spark.execution import Execution
from trinitylake.storage.uri import is_plain_relative
from trinitylake.treewalk import node_batch as NB
from trinitylake.treewalk import reach as R
from trinitylake.treewalk import walk_roots as WR
from trinitylake.treewalk.walker import walk_reachable_with_stats


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A history with buffers, rollbacks, a multi-level tree and a minimal export (whose root
    points at source files by full URI, resolved against another base)."""
    base = tmp_path_factory.mktemp("nb")
    lh = Lakehouse.create(str(base / "lh"), order=4, node_max_bytes=4096, audit=False)
    build_history(lh, seed=11, ops=60)
    write_minimal_export(lh, lh.latest_version() - 4, str(base / "exports" / "e1"), "e1")
    return lh


def _frontier(lh: Lakehouse) -> list[tuple[str, str, int, int, bool]]:
    """Every node file the walk reads, as frontier rows (key, base, first_version, depth,
    is_root): the oracle's live roots and walk, bases in the library's canonical spelling."""
    reader = R.Reader(lh.storage.root)
    o = E.oracle_of(lh)
    bases = {}
    for v, uri in E.live_entries(o):
        key, base = reader.locator.root_entry(v, uri)
        bases[key] = base
    walk = E.live_walk(o, sizes=False)
    return [(k, bases.get(k, reader.locator.root), r.first_version, r.depth, r.kind == "root")
            for k, r in sorted(walk.rows.items()) if r.kind in ("root", "node")]


def _refs(batch: NB.NodeBatch) -> list[list[tuple[str, str, str | None]]]:
    """Per node: (key, kind, child base) of its references, in order."""
    keys = batch.ref_keys.take(batch.ref_id).to_pylist() if len(batch.ref_id) else []
    bases = (batch.ref_base.to_pylist() if batch.ref_base is not None
             else [batch.root if k == NB.NODE else None for k in batch.ref_kind])
    out: list[list] = [[] for _ in range(len(batch))]
    for n, k, key, b in zip(batch.ref_node.tolist(), batch.ref_kind.tolist(), keys, bases, strict=True):
        out[n].append((key, NB.KINDS[k], b))
    return out


def _oracle_refs(o: Oracle, data: bytes, order: int, base: str, is_root: bool) -> list[tuple[str, str, str | None]]:
    """What the oracle says a node references: its rules, its resolution of pointers; each
    pointer once, the first kind winning (children, values, buffer values, lakehouse_def)."""
    n = parse_node(data, order, "oracle")
    found: dict[str, str] = {}
    for c in n.children:
        found.setdefault(c, R.KIND_NODE)
    for _, v in n.entries + [m for m in n.messages if m[1] is not None]:
        found.setdefault(v, R.KIND_DEFINITION)
    if is_root:
        found.setdefault(n.system["lakehouse_def"], R.KIND_LAKEHOUSE_DEF)
    out = []
    for p, kind in found.items():
        uri = o.resolve(p, base)
        rel = o.relative(uri)
        out.append((rel if rel is not None else uri, kind, base_of(p, base) if kind == R.KIND_NODE else None))
    return out


def _oracle_base(o: Oracle, base: str) -> str:
    return o.root if base == R.Locator.for_root(o.root).root else base


def test_every_node_expands_to_what_the_oracle_reads(exported):
    lh = exported
    reader = R.Reader(lh.storage.root)
    rows = _frontier(lh)
    batch = NB.expand_nodes(reader, rows)
    assert (batch.role == NB.SELF).all() and batch.reads == len(rows) and not batch.bad_pointers
    o = Oracle(lh.uri)
    got = _refs(batch)
    for i, (key, base, _, _, is_root) in enumerate(rows):
        data = reader.read(key)
        expected = _oracle_refs(o, data, 4, _oracle_base(o, base), is_root)
        # The oracle writes a child's base as it found it; ours are canonical URIs.
        assert [(k, kind, b and R.Locator.for_root(b).root) for k, kind, b in got[i]] == [
            (k, kind, b and R.Locator.for_root(b).root) for k, kind, b in expected], key
        assert batch.size[i] == len(data)
    export_root = next(i for i, r in enumerate(rows) if "://" in r[0])
    assert any(k == R.KIND_LAKEHOUSE_DEF for _, k, _ in got[export_root])


def test_the_java_reference_root_expands_to_what_the_oracle_reads(tmp_path):
    write_java_lakehouse(tmp_path / "j", [f"n{i:02d}" for i in range(20)], [("n00", f"t{i}") for i in range(4)])
    lh = Lakehouse.open(str(tmp_path / "j"), audit=False)
    reader = R.Reader(lh.storage.root)
    batch = NB.expand_nodes(reader, [(root_name(0), reader.locator.root, 0, 0, True)])
    o = Oracle(lh.uri)
    expected = _oracle_refs(o, reader.read(root_name(0)), 4, o.root, True)
    assert _refs(batch) == [expected] and len(expected) == 25


def _rows_of(batches) -> Counter:
    return Counter(tuple(r.values()) for b in batches for r in b.to_pylist())


def _old_rows(reader, rows) -> Counter:
    return Counter(row for r in rows for row in R.expand_node(reader, r)[0])


def _plant(root: str, name: str, data: bytes) -> str:
    rel = f"0000/0000/0000/00000000-{name}"
    os.makedirs(os.path.join(root, "0000/0000/0000"), exist_ok=True)
    with open(os.path.join(root, rel), "wb") as f:
        f.write(data)
    return rel


def _odd_files(lh: Lakehouse) -> list[tuple[str, bool]]:
    """Node files of every kind of trouble, planted in the lakehouse: (key, read as a root)."""
    root = lh.storage.root[len("file://"):]
    good = lh.storage.read(root_name(lh.latest_version()))
    out = [
        (_plant(root, "node-truncated.arrow", good[: len(good) // 2]), False),
        (_plant(root, "node-garbage.arrow", b"garbage"), False),
        (_plant(root, "node-unsorted.arrow", _unsorted()), False),
        (_plant(root, "root-no-def.arrow", serialize(Node(system={"created_at_millis": "1"}, keys=["a"],
                                                          values=["d/a"]), 4)), True),
        (_plant(root, "root-empty-def.arrow", serialize(Node(system={"lakehouse_def": ""}, keys=["a"],
                                                             values=["d/a"]), 4)), True),
        (_plant(root, "node-bad-pointers.arrow", serialize(Node(
            keys=["a", "b", "c"], values=["../escape", "", "d/ok"], children=["x/./y", "ok/c", "a//b", "s3a://b/k"],
            buffer=[Message("d", "file:///tmp/elsewhere/x.binpb", "t"), Message("e", "/abs/path", "t")]), 5)),
         False),
        (_plant(root, "node-repeats.arrow", serialize(Node(
            keys=["a", "b", "c"], values=["d/1", "d/1", "c1"], children=["c0", "c1", "c2", "c0"],
            buffer=[Message("e", "d/1", "t1"), Message("f", None, "t1"), Message("g", "c0", "t2")]), 5)), False),
        (_plant(root, "root-def-is-a-value.arrow", serialize(Node(
            system={"lakehouse_def": "d/1"}, keys=["a"], values=["d/1"]), 4)), True),
        ("0000/0000/0000/00000000-node-missing.arrow", False),
        ("file:///nonexistent/dir/node-x.arrow", False),
        ("0000/0000/0000", False),  # a directory: the storage's own error
        (_plant(root, "node-big.arrow", serialize(Node(  # over the first read of a local file
            keys=["k"], values=["d/k"], buffer=[Message(f"m{i:05d}", f"d/{'x' * 200}-{i}", "t") for i in range(500)]),
            4)), False),
        (root_name(lh.latest_version()), True),
        (root_name(lh.latest_version()), False),  # the same file, read as a non-root
    ]
    return out


def _unsorted() -> bytes:
    t = pa.ipc.open_file(pa.BufferReader(serialize(Node(keys=["a", "b"], values=["d/1", "d/2"]), 4))).read_all()
    rows = t.to_pylist()
    sep = next(i for i, r in enumerate(rows) if r["key"] is None and r["value"] is None)
    rows[sep + 1]["key"], rows[sep + 2]["key"] = "b", "a"
    return _ipc(pa.Table.from_pylist(rows, schema=t.schema))


def test_rows_and_errors_are_the_ones_expand_node_writes(exported, tmp_path):
    lh = Lakehouse.create(str(tmp_path / "odd"), order=4, node_max_bytes=4096, audit=False)
    build_history(lh, seed=2, ops=12)
    reader = R.Reader(lh.storage.root)
    odd = _odd_files(lh)
    rows = [(k, reader.locator.root, 7 + i, 2, is_root) for i, (k, is_root) in enumerate(odd)]
    rows += [(k, b, fv, d, r) for k, b, fv, d, r in _frontier(lh)]
    # Files of another tree (a full export's): their relative pointers resolve against its root.
    rows += [(k, "file:///elsewhere/export", 3, d, r) for k, _, _, d, r in _frontier(lh)[-3:]]
    batches = list(NB.expand_rows(reader, rows))
    assert _rows_of(batches) == _old_rows(reader, rows)
    batch = NB.expand_nodes(reader, rows)
    roles = dict(zip([r[0] for r in rows], batch.role.tolist(), strict=False))
    texts = {rows[i][0]: t for i, t in batch.errors.items()}
    assert roles[odd[8][0]] == NB.MISSING and "no such file" in texts[odd[8][0]]
    assert roles[odd[10][0]] == NB.ERROR and roles[odd[11][0]] == NB.SELF
    big = [i for i, r in enumerate(rows) if r[0] == odd[11][0]][0]
    assert batch.size[big] == len(reader.read(odd[11][0])) > NB._READ_CAP
    assert "node-truncated.arrow" in texts[odd[0][0]] and texts[odd[0][0]].startswith("CorruptNodeError: ")
    assert "not sorted" in texts[odd[2][0]]
    assert "has no lakehouse_def system row" in texts[odd[3][0]] and roles[odd[4][0]] == NB.ERROR
    bad = [t for i, t in batch.bad_pointers if rows[i][0] == odd[5][0]]
    assert len(bad) == 2 and all("node-bad-pointers.arrow" in t for t in bad)
    assert len(batch.failures()) == len(batch.errors) + 2
    missing = int((batch.role == NB.MISSING).sum())
    assert missing == 2 and roles[odd[9][0]] == NB.MISSING  # a relative key and a URI elsewhere
    assert len(batch.failures(tolerate_missing=True)) == len(batch.errors) + 2 - missing
    # Each pointer once per node, the first kind winning.
    repeats = _refs(batch)[[r[0] for r in rows].index(odd[6][0])]
    assert [(k, kind) for k, kind, _ in repeats] == [("c0", "node"), ("c1", "node"), ("c2", "node"),
                                                     ("d/1", "definition")]
    ld_root = _refs(batch)[[r[0] for r in rows].index(odd[7][0])]
    assert [(k, kind) for k, kind, _ in ld_root] == [("d/1", "definition")]
    elsewhere = [ref for refs in _refs(batch)[-3:] for ref in refs]
    assert elsewhere and all(k.startswith("file:///elsewhere/export/") for k, _, _ in elsewhere)
    assert {b for _, kind, b in elsewhere if kind == "node"} <= {"file:///elsewhere/export"}
    # The exported lakehouse: every node, the export's root with its other base.
    reader = R.Reader(exported.storage.root)
    rows = _frontier(exported)
    assert _rows_of(NB.expand_rows(reader, rows)) == _old_rows(reader, rows)


def test_batches_of_any_size_give_the_same_rows(exported):
    reader = R.Reader(exported.storage.root)
    rows = _frontier(exported)
    whole = _rows_of(NB.expand_rows(reader, rows))
    small = []
    for b in NB.iter_expand(reader, rows, max_files=3, max_bytes=1):
        assert len(b) == 1  # max_bytes: every file is over it
        small += b.level_batches()
    assert _rows_of(small) == whole
    assert sum(len(b) for b in NB.iter_expand(reader, rows, max_files=5)) == len(rows)


def test_read_faults_on_the_plain_file_path_are_retried_through_the_storage(exported):
    """The plain-file path (``open`` relative to the root's descriptor) meets the faults the
    disk answers (injected at the system call, and at the storage below its retries): a failed
    read is asked again through the storage, whose retries take it; the rows stay the same."""
    rows = _frontier(exported)
    expected = _rows_of(NB.expand_rows(R.Reader(exported.storage.root), rows))
    with injected(FaultSpec(transient_rate=0.3, ops=("read",), seed=5)) as inj:
        reader = R.Reader(exported.storage.root)
        assert not NB.wants_threads(reader)  # the production path, faults or not
        with ThreadPoolExecutor(4) as pool:
            got = _rows_of(NB.expand_rows(reader, rows, pool))
        assert inj.injected > 0
    assert got == expected


def test_the_decoder_takes_the_vectorized_path_for_library_files(exported, monkeypatch):
    """Library-written node files never need `deserialize` (its per-row lists are what the
    batch reader exists to avoid)."""
    calls = []
    real = node_arrow.deserialize
    monkeypatch.setattr(node_arrow, "deserialize", lambda *a: calls.append(a[2]) or real(*a))
    reader = R.Reader(exported.storage.root)
    rows = _frontier(exported)
    NB.expand_nodes(reader, rows)
    assert calls == []
    NB.expand_nodes(reader, [(_plant(exported.storage.root[len("file://"):], "node-bad.arrow", b"x"),
                              reader.locator.root, 0, 1, False)])
    assert len(calls) == 1


@pytest.mark.parametrize("seed", [1, 2])
def test_plain_relative_regex_is_the_library_rule(seed):
    rng = random.Random(seed)
    tricky = ["", ".", "..", "a", "a/b", "a//b", "/a", "a/", "./a", "a/.", "a/..", "a/.b", "a/..b", "a/...", ".a",
              "..a", "a/./b", "a/../b", "0110/0000/1011/01111000-node-6fcb514b.arrow", "_0101.arrow", "a b",
              "a\n", "a/\n", "é", "a:b", "s3://b/k", "a\\b", "-a", "=a", "+a", "_a", "a.b/c.d", "a/b/",
              "C===ns0  t1"]
    alphabet = "ab./_-=+:é \n\\"
    tricky += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(3000)]
    got = pc.match_substring_regex(pa.array(tricky, pa.string()), NB.PLAIN_RELATIVE_RE2).to_pylist()
    assert got == [is_plain_relative(s) for s in tricky]
    assert sum(got) > 100


def test_a_local_walk_in_many_small_batches_equals_the_oracles_walk(exported, monkeypatch):
    """Batches split levels: children and definitions met in several batches of one level
    (and in later levels) keep the smallest depth, first version and kind."""
    lh = exported
    inp = WR.walk_input(lh)
    ref = E.live_walk(E.oracle_of(lh))
    expected = ref.tuples()
    for max_files, roots in ((1, inp.roots), (1, inp.roots[::-1]), (7, inp.roots), (NB.MAX_FILES, inp.roots)):
        monkeypatch.setattr(NB, "MAX_FILES", max_files)
        # Newest roots first: a shared child or definition is met first from a later version.
        reached, st = walk_reachable_with_stats(Execution("local"), lh, roots)
        got = sorted(zip(*(reached.rows.to_table().column(c).to_pylist() for c in reached.rows.to_table().column_names), strict=True))
        assert got == expected, max_files
        assert st.node_reads == st.unique_nodes == ref.node_reads


def test_a_walk_reports_every_failure_of_a_level(exported, tmp_path):
    lh = Lakehouse.create(str(tmp_path / "broken"), order=4, node_max_bytes=4096, audit=False)
    build_history(lh, seed=4, ops=20)
    inp = WR.walk_input(lh)
    rows = E.live_walk(E.oracle_of(lh), sizes=False).rows
    deepest = max(r.depth for r in rows.values() if r.kind == "node")
    nodes = sorted(k for k, r in rows.items() if r.kind == "node" and r.depth == deepest)  # one level: both are read
    assert len(nodes) >= 2
    root = lh.storage.root[len("file://"):]
    os.unlink(os.path.join(root, nodes[0]))
    with open(os.path.join(root, nodes[1]), "wb") as f:
        f.write(b"broken")
    with pytest.raises(CorruptNodeError) as e:
        walk_reachable_with_stats(Execution("local"), lh, inp.roots)
    assert nodes[0] in str(e.value) and nodes[1] in str(e.value) and "no such file" in str(e.value)
    with pytest.raises(CorruptNodeError, match=nodes[1].rsplit("/", 1)[-1]):
        walk_reachable_with_stats(Execution("local"), lh, inp.roots, tolerate_missing=True)
    os.unlink(os.path.join(root, nodes[1]))
    reached, st = walk_reachable_with_stats(Execution("local"), lh, inp.roots, tolerate_missing=True)
    assert st.missing == 2 and nodes[0] not in reached.keys()


def test_the_walk_of_a_node_naming_a_pointer_twice_equals_the_oracles_walk(tmp_path):
    """The driver's walk takes the batch reader's references without per-node deduplication
    (its merges keep the smallest per key): a node naming one file as child and definition,
    and a root naming its lakehouse definition as a value too, walk as the oracle walks them
    (a file named as a child is a node; the smallest depth, then first version, wins)."""
    lh = Lakehouse.create(str(tmp_path / "twice"), order=4, node_max_bytes=4096, audit=False)
    root = lh.storage.root[len("file://"):]
    ld_path = parse_node(lh.storage.read(root_name(0)), 4, "r").system["lakehouse_def"]
    child = _plant(root, "node-child.arrow", serialize(Node(keys=["k"], values=["d/k.binpb"]), 4))
    top = _plant(root, "node-top.arrow", serialize(Node(
        system={"lakehouse_def": ld_path}, keys=["a", "b"], values=[child, ld_path], children=[child, child, child],
        buffer=[Message("c", child, "t"), Message("d", "d/k.binpb", "t")]), 4))
    roots = [(3, top), (0, root_name(0))]
    o = E.oracle_of(lh)
    ref = E.walk(o, [(v, f"{o.root}/{p}") for v, p in roots])
    reached, st = walk_reachable_with_stats(Execution("local"), lh, roots)
    got = sorted(zip(*(reached.rows.to_table().column(c).to_pylist() for c in reached.rows.to_table().column_names), strict=True))
    assert got == ref.tuples()
    assert ref.rows[child].kind == "node" and ref.rows[ld_path].kind == "lakehouse_def"


def test_the_second_process_sizes_a_walk_read_in_many_batches(exported, monkeypatch):
    """The stat worker gets each new definition once, in the order `leaves` takes them,
    however the levels are cut into batches."""
    from trinitylake.storage import background_sizes as BS

    lh = exported
    inp = WR.walk_input(lh)
    ref = E.live_walk(E.oracle_of(lh))
    fed: list[str] = []
    add = BS.BackgroundSizes.add
    monkeypatch.setattr(BS.BackgroundSizes, "add", lambda self, keys: (fed.extend(keys), add(self, keys))[1])
    monkeypatch.setattr(BS, "START_AFTER_KEYS", 1)
    monkeypatch.setattr(R, "sizes_of", lambda *a, **k: pytest.fail("sized in process, not by the child"))
    monkeypatch.setattr(NB, "MAX_FILES", 2)
    reached, _ = walk_reachable_with_stats(Execution("local"), lh, inp.roots[::-1])
    got = sorted(zip(*(reached.rows.to_table().column(c).to_pylist() for c in reached.rows.to_table().column_names), strict=True))
    assert got == ref.tuples()
    assert len(fed) == len(set(fed)) and set(fed) >= ref.paths("definition")


def test_a_driver_walk_holds_each_definition_once_and_lets_each_level_go(exported, monkeypatch):
    """Nodes of many versions name the same definition files (a buffered message, then the same
    pointer in the child it was flushed to): the driver keeps each definition once, from the
    level that met it first, with the oracle's depth and first_version, and lets each level's
    own rows go when the level is done (a 1.1M-file walk held 3.4M definition rows, and every
    level's table, until its end)."""
    from trinitylake.rowsets import arrow_rows
    from trinitylake.treewalk import walker as W

    met_raw: list[int] = []
    released: list[int] = []
    per_level: list[list[int]] = []
    met, release, read_level = W.Walk._met, arrow_rows.ArrowRows.release, W.Walk.read_level

    def level(self, *args):
        before = len(released)
        try:
            return read_level(self, *args)
        finally:
            per_level.append(released[before:])

    monkeypatch.setattr(W.Walk, "_met", lambda self, leaves: (met_raw.append(leaves.totals()[0]), met(self, leaves))[1])
    monkeypatch.setattr(W.Walk, "read_level", level)
    monkeypatch.setattr(arrow_rows.ArrowRows, "release",
                        lambda self: (released.append(self._table.num_rows if self._table is not None else -1),
                                      release(self))[1])
    inp = WR.walk_input(exported)
    ref = E.live_walk(E.oracle_of(exported))
    walk = W.Walk(Execution("local"), exported, 256, 0, None, False, 1, "walk", "walk")
    reached = walk.run(inp.roots, True)
    got = sorted(zip(*(reached.rows.to_table().column(c).to_pylist() for c in reached.rows.to_table().column_names),
                     strict=True))
    assert got == ref.tuples()
    definitions = sum(1 for r in got if r[1] in ("definition", "lakehouse_def"))
    assert sum(met_raw) > definitions  # definitions met more than once, at several levels
    assert walk.met == definitions
    # Each level's own rows (its nodes, children and definitions), let go as the level ends.
    assert [len(r) for r in per_level] == [1] * len(walk.stats.levels) and all(r[0] > 0 for r in per_level)
    assert len(walk.stats.levels) > 1
