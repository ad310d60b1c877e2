"""What a node references, how pointers become keys, and the single-process reference walk."""

from __future__ import annotations

import os

import pytest

from tests.maintenance.helpers import build_history, oracle_reads, write_minimal_export
from trinitylake.errors import CorruptNodeError, InvalidURIError, UnsafeOperationError, VersionNotFoundError
from trinitylake.format.node import Message, Node
from trinitylake.format.paths import is_format_owned, root_name
from trinitylake.maintenance import reach as R
from trinitylake.maintenance import walk_roots as WR


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


def _owned_files(lh) -> set[str]:
    return {f.path for f in lh.storage.list("") if is_format_owned(f.path)}


def test_reference_walk_reaches_every_file_of_a_history_and_reads_each_node_once(make_lakehouse):
    lh = make_lakehouse()
    build_history(lh, seed=3, ops=30)
    inp = WR.walk_input(lh)
    assert inp.roots == [(v, root_name(v)) for v in range(lh.latest_version() + 1)]
    w = R.reference_walk(lh, inp.roots, sizes=True)
    # Nothing has expired: the walk reaches what the oracle reads to list every version (and any
    # definition a node still names); every one of those files exists.
    nodes, defs = oracle_reads(lh)
    assert w.paths("node") | w.paths("root") == nodes
    assert defs <= w.paths() <= _owned_files(lh)
    nodes = w.paths("node") | w.paths("root")
    assert w.node_reads == len(nodes)
    assert w.paths("node"), "the history should build a multi-level tree"
    for r in w.rows.values():
        assert r.size == os.path.getsize(os.path.join(lh.storage.root[len("file://"):], r.path))
        if r.kind == "root":
            assert (r.depth, r.first_version) == (0, int(r.first_version))
    ld = [r for r in w.rows.values() if r.kind == "lakehouse_def"]
    assert len(ld) == 1 and ld[0].first_version == 0 and ld[0].depth == 1


def test_reference_walk_with_threads_matches_the_serial_walk(history_lakehouse):
    roots = WR.walk_input(history_lakehouse).roots
    assert R.reference_walk(history_lakehouse, roots, threads=8).rows == R.reference_walk(history_lakehouse, roots).rows


def test_exclude_prunes_to_the_set_difference(history_lakehouse):
    lh = history_lakehouse
    latest = lh.latest_version()
    old = [(v, root_name(v)) for v in range(0, latest // 2)]
    new = [(v, root_name(v)) for v in range(latest // 2, latest + 1)]
    keep = R.reference_walk(lh, new)
    full_old = R.reference_walk(lh, old)
    diff = R.reference_walk(lh, old, exclude=keep.paths())
    assert diff.paths() == full_old.paths() - keep.paths()
    assert diff.node_reads < full_old.node_reads, "shared nodes are not read again"


def test_missing_and_corrupt_nodes_fail_the_walk_with_the_file_named(history_lakehouse):
    lh = history_lakehouse
    roots = WR.walk_input(lh).roots
    node = sorted(R.reference_walk(lh, roots).paths("node"))[0]
    path = lh.storage.root[len("file://"):] + "/" + node
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(CorruptNodeError, match=node.split("/")[-1]):
        R.reference_walk(lh, roots)
    os.unlink(path)
    with pytest.raises(CorruptNodeError, match="no such file"):
        R.reference_walk(lh, roots)
    w = R.reference_walk(lh, roots, tolerate_missing=True)
    assert w.missing == [node]


def test_minimal_export_makes_its_source_files_reachable(make_lakehouse, tmp_path):
    lh = make_lakehouse()
    build_history(lh, seed=5, ops=12)
    v = lh.latest_version() - 3
    loc = write_minimal_export(lh, v, str(tmp_path / "exports" / "e1"), "e1")
    inp = WR.walk_input(lh)
    assert inp.export_roots == {"e1": loc} and inp.pinned_versions == {"e1": v}
    assert inp.self_contained_exports == {}, "a pinned export is walked"
    export_only = R.reference_walk(lh, [(v, loc)])
    source_only = R.reference_walk(lh, [(v, root_name(v))])
    assert export_only.paths("root") == {loc}
    # Every file the export reaches, except its own root, is a source file (relative key).
    assert export_only.paths() - {loc} == source_only.paths() - {root_name(v)}


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
