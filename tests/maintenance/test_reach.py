"""What a node references, how pointers become keys, which roots a walk starts from, and the
library's walk (`treewalk.walker`, on the driver) against the oracle's (`tests.oracle.expect`)."""

from __future__ import annotations

import os

import pytest

from tests.maintenance.helpers import build_history, oracle_reads, write_minimal_export
from tests.oracle import expect as E
from trinitylake.errors import CorruptNodeError, InvalidURIError, UnsafeOperationError, VersionNotFoundError
from trinitylake.format.node import Message, Node
from trinitylake.format.paths import root_name
from trinitylake.spark.execution import Execution
from trinitylake.treewalk import reach as R
from trinitylake.treewalk import walk_roots as WR
from trinitylake.treewalk.walker import walk_reachable_with_stats


def test_node_references_cover_children_values_and_buffer_sets_only():
    node = Node(
        system={"created_at_millis": "1"},
        keys=["C===a", "C===b"],
        values=["d/1.binpb", "d/2.binpb"],
        children=["n/0.arrow", "n/1.arrow", "n/2.arrow"],
        buffer=[Message("C===c", "d/3.binpb", "t1"), Message("C===a", None, "t2"), Message("C===d", "d/1.binpb", "t2")],
    )
    refs = R.node_references(node, is_root=False)
    assert refs == [
        ("n/0.arrow", "node"), ("n/1.arrow", "node"), ("n/2.arrow", "node"),
        ("d/1.binpb", "definition"), ("d/2.binpb", "definition"), ("d/3.binpb", "definition"),
    ]


def test_root_references_its_lakehouse_def_but_not_older_roots():
    root = Node(system={"lakehouse_def": "_lakehouse_def_x.binpb", "previous_root": root_name(3),
                        "rollback_from_root": root_name(2), "created_at_millis": "5"})
    assert R.node_references(root, is_root=True) == [("_lakehouse_def_x.binpb", "lakehouse_def")]
    with pytest.raises(CorruptNodeError, match="lakehouse_def"):
        R.node_references(Node(system={"created_at_millis": "5"}), is_root=True, where="file:///x/_0.arrow")


def test_locator_keys_are_relative_inside_and_canonical_outside():
    loc = R.Locator.for_root("s3a://bucket/lh/")
    assert loc.root == "s3://bucket/lh"
    assert loc.key("0000/1111/0000/00001111-node-a.arrow", loc.root) == "0000/1111/0000/00001111-node-a.arrow"
    assert loc.key("a//b/./c.binpb", loc.root) == "a/b/c.binpb"
    # Absolute URIs inside the root (any alias spelling) become relative.
    assert loc.key("s3a://bucket/lh/0000/x.arrow", loc.root) == "0000/x.arrow"
    assert loc.key("s3://bucket//lh/0000/x.arrow", loc.root) == "0000/x.arrow"
    # Outside the root: canonical URIs, never relative (so never deletable).
    assert loc.key("s3a://bucket/lh2/0000/x.arrow", loc.root) == "s3://bucket/lh2/0000/x.arrow"
    assert loc.key("s3://other/lh/0000/x.arrow", loc.root) == "s3://other/lh/0000/x.arrow"
    # A relative pointer in an export's tree resolves against the export's root.
    assert loc.key("0000/x.arrow", "s3://backup/e1") == "s3://backup/e1/0000/x.arrow"
    assert loc.base_for("s3://backup/e1/0000/x.arrow", "s3://backup/e1") == "s3://backup/e1"
    assert loc.base_for("0000/x.arrow", "s3://backup/e1") == loc.root
    with pytest.raises(InvalidURIError):
        loc.key("../escape.arrow", loc.root)
    assert loc.root_entry(7, root_name(7)) == (root_name(7), loc.root)
    assert loc.root_entry(7, "s3://backup/e1/" + root_name(7)) == ("s3://backup/e1/" + root_name(7), "s3://backup/e1")
    assert loc.uri("0000/x.arrow") == "s3://bucket/lh/0000/x.arrow"


def _walk(lh, roots, **kw):
    """The library's walk (`treewalk.walker`: the one walker, here on the driver) and its stats."""
    return walk_reachable_with_stats(Execution("local"), lh, roots, **kw)


def _rows(reached) -> list[tuple]:
    t = reached.rows.to_table()
    return sorted(zip(*(t.column(c).to_pylist() for c in ("path", "kind", "size", "depth", "first_version")),
                      strict=True))


def _oracle_walk(lh, roots, **kw) -> E.Walk:
    """The oracle's walk of `roots` ((version, root pointer) as the library takes them)."""
    o = E.oracle_of(lh)
    return E.walk(o, [(v, p if "://" in p else f"{o.root}/{p}") for v, p in roots], **kw)


def test_the_walk_reaches_every_file_of_a_history_and_reads_each_node_once(make_lakehouse):
    lh = make_lakehouse()
    build_history(lh, seed=3, ops=30)
    inp = WR.walk_input(lh)
    assert inp.roots == [(v, root_name(v)) for v in range(lh.latest_version() + 1)]
    reached, st = _walk(lh, inp.roots)
    ref = _oracle_walk(lh, inp.roots)
    assert _rows(reached) == ref.tuples()  # paths, kinds, sizes, depths and first versions
    # Nothing has expired: the walk reaches what the oracle reads to list every version (and any
    # definition a node still names).
    nodes, defs = oracle_reads(lh)
    assert ref.paths("node") | ref.paths("root") == nodes and defs <= ref.paths()
    assert st.node_reads == st.unique_nodes == len(nodes) == ref.node_reads
    assert ref.paths("node"), "the history should build a multi-level tree"
    ld = [r for r in ref.rows.values() if r.kind == "lakehouse_def"]
    assert len(ld) == 1 and (ld[0].first_version, ld[0].depth) == (0, 1)


def test_exclude_prunes_to_the_set_difference(history_lakehouse):
    lh = history_lakehouse
    latest = lh.latest_version()
    old = [(v, root_name(v)) for v in range(0, latest // 2)]
    new = [(v, root_name(v)) for v in range(latest // 2, latest + 1)]
    keep = _oracle_walk(lh, new, sizes=False).paths()
    full_old = _oracle_walk(lh, old, sizes=False)
    diff, st = _walk(lh, old, exclude=keep, sizes=False)
    assert diff.keys() == full_old.paths() - keep and diff.keys()
    assert st.node_reads < full_old.node_reads, "shared nodes are not read again"


def test_missing_and_corrupt_nodes_fail_the_walk_with_the_file_named(history_lakehouse):
    lh = history_lakehouse
    roots = WR.walk_input(lh).roots
    node = sorted(_oracle_walk(lh, roots, sizes=False).paths("node"))[0]
    path = lh.storage.root[len("file://"):] + "/" + node
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(CorruptNodeError, match=node.split("/")[-1]):
        _walk(lh, roots)
    os.unlink(path)
    with pytest.raises(CorruptNodeError, match="no such file"):
        _walk(lh, roots)
    reached, st = _walk(lh, roots, tolerate_missing=True)
    assert st.missing == 1 and node not in reached.keys()
    assert reached.keys() == _oracle_walk(lh, roots, sizes=False).paths() - set(_oracle_walk(lh, roots).missing)


def test_minimal_export_makes_its_source_files_reachable(make_lakehouse, tmp_path):
    lh = make_lakehouse()
    build_history(lh, seed=5, ops=12)
    v = lh.latest_version() - 3
    loc = write_minimal_export(lh, v, str(tmp_path / "exports" / "e1"), "e1")
    inp = WR.walk_input(lh)
    assert inp.export_roots == {"e1": loc} and inp.pinned_versions == {"e1": v}
    assert inp.self_contained_exports == {}, "a pinned export is walked"
    export_only, _ = _walk(lh, [(v, loc)])
    assert _rows(export_only) == _oracle_walk(lh, [(v, loc)]).tuples()
    source_only = _oracle_walk(lh, [(v, root_name(v))], sizes=False)
    assert {k for k in export_only.keys() if "://" in k} == {loc}
    # Every file the export reaches, except its own root, is a source file (relative key).
    assert export_only.keys() - {loc} == source_only.paths() - {root_name(v)}


def test_walk_input_edge_cases(make_lakehouse, tmp_path):
    lh = make_lakehouse()
    build_history(lh, seed=9, ops=6)
    with pytest.raises(VersionNotFoundError, match="999"):
        WR.walk_input(lh, [1, 999])
    assert WR.walk_input(lh, [2, 1]).roots == [(1, root_name(1)), (2, root_name(2))]
    # An unpinned export is self-contained: recorded as such, never walked, and not even
    # probed (its root being gone goes unnoticed: no warning).
    loc = write_minimal_export(lh, 2, str(tmp_path / "e_full"), "full", pin=False)
    inp = WR.walk_input(lh)
    assert inp.self_contained_exports == {"full": loc} and "full" not in inp.export_roots
    assert loc not in {r for _, r in inp.roots}
    os.unlink(loc[len("file://"):])
    inp = WR.walk_input(lh)
    assert inp.self_contained_exports == {"full": loc} and "full" not in inp.export_roots
    assert not any("full" in w for w in inp.warnings)
    # A pinned export whose root and pinned version are both gone cannot be enumerated.
    loc = write_minimal_export(lh, 1, str(tmp_path / "e_min"), "min")
    os.unlink(loc[len("file://"):])
    assert WR.walk_input(lh).pinned_versions == {"min": 1}
    os.unlink(lh.storage.root[len("file://"):] + "/" + root_name(1))
    with pytest.raises(UnsafeOperationError, match="min"):
        WR.walk_input(lh)
