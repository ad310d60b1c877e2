"""The engine-agnostic half of export: pointer rewriting, plan files, verification, targets,
and the definition mutations that record and drop exports. No Spark here."""

from __future__ import annotations

import pytest

from tests.oracle import expect as E
from tests.oracle.reader import parse_node
from trinitylake.errors import AlreadyExistsError, SnapshotNotFoundError, UnsafeOperationError, ValidationError
from trinitylake.format import keys as K
from trinitylake.format.node import Message, Node
from trinitylake.format.paths import owning_root, root_name
from trinitylake.jobs.export import copying as XC
from trinitylake.jobs.export import plan as XP
from trinitylake.jobs.export import rules as X
from trinitylake.jobs.export import target as XT
from trinitylake.storage import Storage


def _spec(mode: str, depth: int | None = None, source: str = "file:///src", target: str = "file:///tgt") -> X.ExportSpec:
    return X.ExportSpec.make(name="e", version=7, mode=mode, depth=depth, source_uri=source, target_uri=target,
                             source_id="id-1", order=4)


def _node() -> Node:
    return Node(
        system={K.SYS_CREATED_AT: "1", K.SYS_LAKEHOUSE_DEF: "_lakehouse_def_x.binpb", K.SYS_PREVIOUS_ROOT: root_name(6),
                K.SYS_TXN_ID: "t1", K.SYS_TXN_SEQ: "12"},
        keys=["B===a", "B===b"],
        values=["0000/0000/0000/00000001-a.binpb", "0000/0000/0000/00000002-b.binpb"],
        children=["0000/0000/0000/00000003-node-1.arrow", "0000/0000/0000/00000004-node-2.arrow",
                  "0000/0000/0000/00000005-node-3.arrow"],
        buffer=[Message("B===c", "0000/0000/0000/00000006-c.binpb", "t1"), Message("B===d", None, "t1")],
    )


@pytest.mark.parametrize(
    ("mode", "depth", "children_copied", "odfs_copied"),
    [("full", None, True, True), ("partial", 0, False, True), ("partial", 1, True, True), ("minimal", None, False, False)],
)
def test_root_pointers_by_mode(mode, depth, children_copied, odfs_copied):
    src = Storage("file:///src")
    spec = _spec(mode, depth)
    node = _node()
    out, refs, changed = X.export_node(node, 0, spec, src)

    assert changed  # the root always loses previous_root
    assert K.SYS_PREVIOUS_ROOT not in out.system and out.system[K.SYS_LAKEHOUSE_DEF] == "_lakehouse_def_x.binpb"
    assert K.SYS_TXN_SEQ not in out.system and out.system[K.SYS_TXN_ID] == "t1"  # not the source control table's numbering
    if children_copied:
        assert out.children == node.children and refs.children == node.children
    else:
        assert out.children == ["file:///src/" + c for c in node.children] and refs.children == []
    odf_values = [*out.values, out.buffer[0].value]
    if odfs_copied:
        assert odf_values == [*node.values, node.buffer[0].value] and len(refs.odfs) == 3
    else:
        assert all(v.startswith("file:///src/") for v in odf_values) and refs.odfs == []
    assert out.buffer[1].value is None  # deletes stay deletes
    assert refs.external == (0 if children_copied else 3) + (0 if odfs_copied else 3)
    assert node.children[0] == "0000/0000/0000/00000003-node-1.arrow"  # the input is not modified
    assert node.buffer[0].value == "0000/0000/0000/00000006-c.binpb"


def test_inner_nodes_are_copied_verbatim_above_the_cut_and_rewritten_at_it():
    src = Storage("file:///src")
    node = _node()
    node.system = {K.SYS_CREATED_AT: "1"}
    spec = _spec("partial", 2)
    assert X.export_node(node, 1, spec, src)[2] is False  # depth 1 < 2: children copied
    out, refs, changed = X.export_node(node, 2, spec, src)  # at the cut
    assert changed and refs.children == [] and refs.external == 3 and len(refs.odfs) == 3
    assert X.export_node(node, 5, _spec("full"), src)[2] is False


def test_foreign_absolute_pointers_are_kept_and_not_followed():
    src = Storage("file:///src")
    node = Node(system={K.SYS_CREATED_AT: "1"}, keys=["B===a"], values=["s3://elsewhere/x.binpb"],
                children=["file:///src/0000/0000/0000/00000003-node-1.arrow", "s3://elsewhere/n.arrow"])
    out, refs, changed = X.export_node(node, 1, _spec("full"), src)
    # An absolute pointer into the source becomes relative when its file is copied.
    assert out.children == ["0000/0000/0000/00000003-node-1.arrow", "s3://elsewhere/n.arrow"]
    assert changed and refs.children == ["0000/0000/0000/00000003-node-1.arrow"]
    assert refs.foreign == 2 and refs.external == 0 and out.values == ["s3://elsewhere/x.binpb"]


def test_exported_node_bytes_round_trip(make_lakehouse):
    lh = make_lakehouse()
    lh.create_namespace("n")
    for i in range(8):
        lh.create_table("n", f"t{i}")
    v = lh.latest_version()
    data = lh.storage.read(root_name(v))
    spec = _spec("minimal", source=lh.storage.root)
    out, refs, changed = X.exported_node_bytes(data, 0, spec, lh.storage, "root")
    assert changed and refs.external > 0
    # Read back by the oracle's parser (tests.oracle), not the library's.
    o = E.oracle_of(lh)
    node = parse_node(out, int(E.definition_of(o, v).order), "exported")
    pointers = [*node.children, *(p for _, p in node.entries), *(p for _, p in node.messages if p)]
    assert pointers and all(o.relative(p) is not None and "://" in p for p in pointers)
    # Deterministic: the plan's checksum can be recomputed at copy time.
    assert X.exported_node_bytes(data, 0, spec, lh.storage, "root")[0] == out


def test_spec_validation():
    with pytest.raises(ValidationError):
        _spec("partial", None)
    with pytest.raises(ValidationError):
        _spec("partial", -1)
    with pytest.raises(ValidationError):
        _spec("sideways")
    for bad in ("", "123", "a b", "../x", "-x", "x" * 129):
        with pytest.raises(ValidationError):
            X.validate_name(bad)
    assert X.validate_name("weekly-2026.11_22") == "weekly-2026.11_22"
    assert _spec("full").root_uri == "file:///tgt/" + root_name(7)
    assert _spec("full", target="s3://b/x/").root_uri == "s3://b/x/" + root_name(7)


def test_plan_part_round_trip():
    rows = [X.PlanRow("a/b.arrow", "file:///src/a/b.arrow", X.KIND_NODE, 2, X.ACTION_REWRITE, 10, "0" * 32, 3,
                      b"0123456789"),
            X.PlanRow("c.binpb", "file:///src/c.binpb", X.KIND_ODF, 1, X.ACTION_COPY)]
    assert XP.read_plan_part(XP.plan_part_bytes(rows)) == rows
    assert X.part_summary("p", rows) == {"name": "p", "rows": 2, "bytes": 10, "unsized": 1, "rewritten": 1,
                                         "external": 3}


class _CountingStorage(Storage):
    """Counts read attempts per path (a counter at the storage's I/O seam)."""

    def __init__(self, root):
        super().__init__(root)
        self.reads: dict[str, int] = {}

    def _io(self, op, path, fn, *args):
        if op == "read":
            self.reads[path] = self.reads.get(path, 0) + 1
        return fn(*args)


def test_plan_file_reads_nothing_and_copy_one_reads_the_source_once(tmp_path):
    src = _CountingStorage(str(tmp_path / "src"))
    tgt = Storage(str(tmp_path / "tgt"))
    path = "0000/0000/0000/00000001-a.binpb"
    src.write(path, b"hello")
    spec = _spec("full", source=src.root, target=tgt.root)
    row = X.plan_file(src, path, X.KIND_ODF, 0)
    assert (row.size, row.md5, row.data) == (-1, "", None) and src.reads == {}  # planned without a read
    assert XC.verify_file(tgt, row.target, 5, X.md5_hex(b"hello")) == XC.MISSING

    st, done = XC.copy_one(row, src, tgt, spec)
    assert (st.copied, st.verified, st.skipped, st.source_reads) == (1, 1, 0, 1) and src.reads == {path: 1}
    assert done == (5, X.md5_hex(b"hello")) and tgt.read(path) == b"hello"
    st, done = XC.copy_one(row, src, tgt, spec)  # the exclusive create finds it: verified, skipped
    assert (st.copied, st.skipped, st.verified) == (0, 1, 1) and done == (5, X.md5_hex(b"hello"))
    st, done = XC.copy_one(row, src, tgt, spec, recorded=done)  # a manifest: no source read at all
    assert (st.copied, st.skipped, st.source_reads) == (0, 1, 0) and src.reads == {path: 2}

    tgt.write(row.target, b"HELLO")  # same size, other bytes: a conflict, never overwritten
    assert XC.verify_file(tgt, row.target, 5, X.md5_hex(b"hello")) == XC.MISMATCH
    assert XC.verify_file(tgt, row.target, 5, X.md5_hex(b"hello"), checksum=False) == XC.OK
    st, done = XC.copy_one(row, src, tgt, spec)
    assert st.conflicts and st.copied == 0 and done is None and tgt.read(row.target) == b"HELLO"
    st, _ = XC.copy_one(row, src, tgt, spec, recorded=(5, X.md5_hex(b"hello")))
    assert st.conflicts and tgt.read(row.target) == b"HELLO"

    # A node comes with its bytes in the plan: copied without reading the source.
    node = X.PlanRow("n.arrow", src.uri("n.arrow"), X.KIND_NODE, 1, X.ACTION_REWRITE, 3, X.md5_hex(b"abc"), 0, b"abc")
    st, done = XC.copy_one(node, src, tgt, spec)
    assert (st.copied, st.rewritten, st.source_reads) == (1, 1, 0) and tgt.read("n.arrow") == b"abc"
    bad = X.PlanRow("m.arrow", src.uri("m.arrow"), X.KIND_NODE, 1, X.ACTION_COPY, 3, "0" * 32, 0, b"abc")
    st, _ = XC.copy_one(bad, src, tgt, spec)
    assert st.errors and not tgt.exists("m.arrow")  # bytes that do not match their plan row
    src.delete([path])
    tgt.delete([path])
    assert XC.copy_one(row, src, tgt, spec)[0].missing_sources == [row.source]


def test_result_manifest_round_trip(tmp_path):
    tgt = Storage(str(tmp_path / "tgt"))
    files = {"a/b.binpb": (5, "0" * 32), "c.arrow": (7, "1" * 32)}
    path = X.manifest_path("_export/e", "part-00003.parquet")
    assert path == "_export/e/copied/part-00003.json"
    assert XP.read_manifest(tgt, path) is None
    tgt.write(path, XP.manifest_bytes("part-00003.parquet", files))
    assert XP.read_manifest(tgt, path) == files
    tgt.write(path, b"{not json")
    assert XP.read_manifest(tgt, path) is None


def test_locations_that_overlap_are_refused():
    XT.check_locations("file:///data/lh", "file:///data/lh-export")  # a sibling with a common prefix is fine
    XT.check_locations("s3://b/lh", "file:///data/lh")
    for target in ("file:///data/lh", "file:///data/lh/exports/x", "file:///data"):
        with pytest.raises(UnsafeOperationError):
            XT.check_locations("file:///data/lh", target)
    with pytest.raises(UnsafeOperationError):
        XT.check_locations("s3://b/lh", "s3a://b/lh/x/")


def test_inspect_target(tmp_path):
    tgt = Storage(str(tmp_path / "t"))
    assert XT.inspect_target(tgt, "id-1", "file:///src").empty
    tgt.write("notes.txt", b"hi")
    with pytest.raises(ValidationError, match="not empty"):
        XT.inspect_target(tgt, "id-1", "file:///src")
    tgt.write("_export/e/export.json", XP.json_bytes({**_spec("full").describe(), "status": "planning"}))
    state = XT.inspect_target(tgt, "id-1", "file:///src")
    assert not state.empty and set(state.exports) == {"e"}
    with pytest.raises(ValidationError, match="another lakehouse"):
        XT.inspect_target(tgt, "id-2", "file:///src")


def test_record_and_drop_mutations():
    from trinitylake.format.definitions import new_lakehouse_def

    d = new_lakehouse_def()
    XT.record_export("a", "file:///t/" + root_name(3), 3)(d)
    XT.record_export("b", "file:///u/" + root_name(4), None)(d)
    assert dict(d.exported_snapshots) == {"a": "file:///t/" + root_name(3), "b": "file:///u/" + root_name(4)}
    assert dict(d.exported_snapshot_pins) == {"a": 3}
    with pytest.raises(AlreadyExistsError):
        XT.record_export("a", "file:///v/" + root_name(5), None)(d)
    assert XT.check_name_free(d, "a", "file:///t/" + root_name(3)) is False  # this very export: done
    assert XT.check_name_free(d, "c", "x") is True
    with pytest.raises(AlreadyExistsError):
        XT.check_name_free(d, "a", "file:///other/" + root_name(3))
    assert [r["name"] for r in XT.list_exports(d)] == ["a", "b"]
    assert XT.list_exports(d)[0]["pinned_version"] == 3 and XT.list_exports(d)[1]["version"] == 4
    XT.drop_export("a")(d)
    assert "a" not in d.exported_snapshots and "a" not in d.exported_snapshot_pins
    with pytest.raises(SnapshotNotFoundError):
        XT.drop_export("a")(d)


def test_export_names_stay_unique_under_a_commit_race(make_lakehouse):
    lh = make_lakehouse()
    t1 = lh.begin()
    t1.mutate_definition(XT.record_export("same", "file:///x/" + root_name(0), None), "export same")
    t2 = lh.begin()
    t2.mutate_definition(XT.record_export("same", "file:///y/" + root_name(0), None), "export same")
    t2.commit()
    with pytest.raises(AlreadyExistsError):
        t1.commit()  # re-applied on the latest definition, which has the name now
    assert lh.definition().exported_snapshots["same"] == "file:///y/" + root_name(0)


def test_owning_root_of_format_files():
    assert owning_root("s3://b/lh/0110/0000/1011/01111000-node-x.arrow") == "s3://b/lh"
    assert owning_root("file:///a/b/" + root_name(3)) == "file:///a/b"
    assert owning_root("file:///a/_lakehouse_def_6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8.binpb") == "file:///a"
    assert owning_root("file:///a/other.txt") is None


def test_a_plan_part_merges_the_duplicates_of_a_file():
    """What a plan part keeps of the rows its task got, in any order: one per file, sorted by
    target, a node over a definition file of the same path, then the smallest depth."""
    from trinitylake.jobs.export.planner import dedupe_targets, table_summary

    def row(target, kind, depth, size=-1):
        return X.PlanRow(target, "file:///s/" + target, kind, depth, X.ACTION_COPY, size)

    rows = [row("c", X.KIND_NODE, 2, 7), row("a", X.KIND_ODF, 3), row("b", X.KIND_ODF, 0), row("a", X.KIND_ODF, 1),
            row("b", X.KIND_NODE, 4, 5), row("a", X.KIND_ODF, 2)]
    kept = dedupe_targets(XP.plan_table(rows))
    assert [(r["target"], r["kind"], r["depth"]) for r in kept.to_pylist()] == [
        ("a", X.KIND_ODF, 1), ("b", X.KIND_NODE, 4), ("c", X.KIND_NODE, 2)]
    assert dedupe_targets(XP.plan_table([])).num_rows == 0
    # The Arrow summary of a part says what the rules' summary says of the same rows.
    kept_rows = [r for r in rows if (r.target, r.depth) in {("a", 1), ("b", 4), ("c", 2)}]
    assert table_summary("p", kept) == X.part_summary("p", sorted(kept_rows))
