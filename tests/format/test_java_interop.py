"""Lakehouses as the Java reference writes them: one unbounded root of any size, and names
padded by UTF-16 code units. Built by hand here (2-column Arrow root, Java key padding)."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest

from tests.format import oracle
from tests.oracle import expect as E
from tests.oracle.reader import parse_node
from tests.support.faults import FaultSpec, injected
from trinitylake.errors import StoragePermissionError, UndecodableKeyError
from trinitylake.format import definitions as D
from trinitylake.format.paths import is_format_owned, root_name
from trinitylake.lakehouse import Lakehouse

NS_MAX = T_MAX = 8


def _utf16(name: str) -> int:
    return len(name.encode("utf-16-le")) // 2


def java_ns_key(ns: str) -> str:
    return "B===" + ns + " " * (NS_MAX - _utf16(ns))  # ObjectKeys: pads by String.length()


def java_table_key(ns: str, t: str) -> str:
    return "C===" + ns + " " * (NS_MAX - _utf16(ns)) + t + " " * (T_MAX - _utf16(t))


def write_java_lakehouse(root, namespaces: list[str], tables: list[tuple[str, str]], extra_keys=()) -> None:
    """A Java-layout lakehouse: every key in one root file of 2 columns (key, value)."""
    root.mkdir()
    d = D.new_lakehouse_def(order=4, node_max_bytes=1 << 20, namespace_max=NS_MAX, table_max=T_MAX)
    def_name = "_lakehouse_def_11111111-2222-4333-8444-555555555555.binpb"
    (root / def_name).write_bytes(D.dumps(d))

    def put(original: str, msg) -> str:
        rel = oracle.hashed_path(original)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(D.dumps(msg))
        return rel

    entries = {java_ns_key(ns): put(f"{ns}-00000000-0000-4000-8000-{i:012d}.binpb", D.NamespaceDef(id=ns))
               for i, ns in enumerate(namespaces)}
    for i, (ns, t) in enumerate(tables):
        entries[java_table_key(ns, t)] = put(f"{ns}-{t}-00000000-0000-4000-9000-{i:012d}.binpb",
                                             D.TableDef(id=t, table_type="EXTERNAL", table_format="ICEBERG"))
    for k in extra_keys:
        entries[k] = put(f"x-00000000-0000-4000-a000-{len(entries):012d}.binpb", D.NamespaceDef(id="x"))
    rows = [("created_at_millis", "1700000000000"), ("lakehouse_def", def_name), ("n_keys", str(len(entries)))]
    rows += sorted(entries.items())
    table = pa.table({"key": [k for k, _ in rows], "value": [v for _, v in rows]},
                     schema=pa.schema([("key", pa.utf8()), ("value", pa.utf8())]))
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    (root / root_name(0)).write_bytes(sink.getvalue())


def _owned(lh) -> set[str]:
    return {f.path for f in lh.storage.list("") if is_format_owned(f.path)}


def test_first_commit_on_an_oversized_java_root_builds_a_proper_tree(tmp_path):
    names = [f"n{i:02d}" for i in range(40)]  # 40 keys in one root of order 4
    write_java_lakehouse(tmp_path / "j", names, [("n00", f"t{i}") for i in range(10)])
    lh = Lakehouse.open(str(tmp_path / "j"), audit=False)
    assert len(lh.load_root(0).node.keys) == 50
    assert lh.create_namespace("new") == 1
    assert lh.view().list_namespaces() == sorted([*names, "new"])
    assert lh.view().list_tables("n00") == sorted(f"t{i}" for i in range(10))
    assert lh.view(version=0).list_namespaces() == names
    # Every node of version 1 reads back in the spec layout with at most order - 1 keys (the
    # oracle's walk and node parser, written from the spec).
    o = E.oracle_of(lh)
    walk = E.walk(o, [(1, f"{o.root}/{oracle.root_name(1)}")], sizes=False, tolerate_missing=False)
    nodes = walk.paths("root") | walk.paths("node")
    assert len(nodes) > 10
    for p in nodes:
        n = parse_node(o.files.read(f"{o.root}/{p}"), 4, p)
        assert len(n.entries) <= 3 and (not n.children or len(n.children) == len(n.entries) + 1)
    lh.drop_table("n00", "t3")
    assert "t3" not in lh.view().list_tables("n00") and lh.view(version=1).table_exists("n00", "t3")


def test_a_failed_commit_on_a_java_root_leaves_no_file_behind(tmp_path):
    write_java_lakehouse(tmp_path / "j", [f"n{i:02d}" for i in range(30)], [])
    lh = Lakehouse.open(str(tmp_path / "j"), audit=False)
    before = _owned(lh)
    txn = lh.begin()
    txn.create_namespace("new")  # its definition file is written now
    assert _owned(lh) - before
    # The split's node files cannot be written: the commit fails typed, and cleans up.
    with injected(FaultSpec(permanent_paths=r"node-[^/]*\.arrow$", permanent_ops=("write",))):
        with pytest.raises(StoragePermissionError):
            txn.commit()
    assert _owned(lh) == before and lh.latest_version() == 0
    lh.create_namespace("new")  # and the next commit succeeds
    assert "new" in lh.view().list_namespaces()


def test_java_padded_non_ascii_names_list_and_resolve(tmp_path):
    namespaces = ["café", "n1", "日本", "𝄞x"]
    write_java_lakehouse(tmp_path / "j", namespaces, [("café", "tëst"), ("日本", "t1"), ("𝄞x", "𝄞")])
    lh = Lakehouse.open(str(tmp_path / "j"), audit=False)
    v = lh.view()
    assert v.list_namespaces() == sorted(namespaces)
    assert v.list_tables("café") == ["tëst"] and v.list_tables("𝄞x") == ["𝄞"]
    assert v.describe_table("café", "tëst")["table_type"] == "external"
    assert v.namespace_exists("日本") and v.table_exists("日本", "t1")
    # Writes go to the keys as stored: alter and drop hit the Java keys, creates never
    # duplicate one, and new objects in a Java-written namespace list with the old ones.
    lh.create_table("café", "new")
    assert lh.view().list_tables("café") == ["new", "tëst"]
    from trinitylake.errors import AlreadyExistsError

    with pytest.raises(AlreadyExistsError):
        lh.create_namespace("日本")
    with pytest.raises(AlreadyExistsError):
        lh.create_table("café", "tëst")
    lh.drop_table("日本", "t1")
    lh.drop_namespace("café", cascade=True)
    assert lh.view().list_namespaces() == ["n1", "日本", "𝄞x"]
    assert lh.view().list_tables("日本") == []


def test_undecodable_key_is_named_and_the_rest_still_listed(tmp_path):
    bad = "B===bad"  # neither 8 UTF-8 bytes nor 8 UTF-16 units after the prefix
    write_java_lakehouse(tmp_path / "j", ["a", "z"], [], extra_keys=[bad])
    lh = Lakehouse.open(str(tmp_path / "j"), audit=False)
    with pytest.raises(UndecodableKeyError, match="'B===bad'") as e:
        lh.view().list_namespaces()
    assert e.value.keys == [bad] and e.value.listed == ["a", "z"]
    assert lh.view().describe_namespace("z")["name"] == "z"  # point lookups are unaffected


def test_cli_lists_the_rest_and_names_the_undecodable_key(tmp_path):
    from click.testing import CliRunner

    from trinitylake.cli import cli

    write_java_lakehouse(tmp_path / "j", ["a", "z"], [], extra_keys=["B===bad"])
    r = CliRunner().invoke(cli, ["--lakehouse", str(tmp_path / "j"), "--no-audit", "namespace", "list", "--json"])
    assert r.exit_code == 1
    assert '"a"' in r.stdout and '"z"' in r.stdout and "UndecodableKeyError" in r.stderr and "B===bad" in r.stderr


def test_a_commit_whose_root_create_fails_names_the_files_left_for_the_orphan_job(tmp_path):
    # A failed create of the root may have taken effect (a lost answer): nothing may be deleted,
    # and the error says which files the orphan job collects if the version is not ours.
    write_java_lakehouse(tmp_path / "j", [f"n{i:02d}" for i in range(30)], [])
    lh = Lakehouse.open(str(tmp_path / "j"), audit=False)
    before = _owned(lh)
    txn = lh.begin()
    txn.create_namespace("new")
    with injected(FaultSpec(permanent_paths=r"^_[01]{64}\.arrow$", permanent_ops=("create_exclusive",))):
        with pytest.raises(StoragePermissionError, match="orphan job collects its files") as e:
            txn.commit()
    left = _owned(lh) - before
    assert left and all(p in str(e.value) for p in left)
    assert lh.latest_version() == 0
