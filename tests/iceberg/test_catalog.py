"""The PyIceberg catalog on a lakehouse: tables and namespaces are the lakehouse's, commits are
lakehouse transactions, time travel gives read-only catalogs, multi-table transactions."""

from __future__ import annotations

import multiprocessing as mp

import pytest
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)

from tests.iceberg.conftest import SCHEMA, ids, open_catalog, rows
from trinitylake.format import definitions as D
from trinitylake.iceberg import ReadOnlyCatalogError, TrinityLakeCatalog


def test_tables_are_lakehouse_tables_pointing_at_their_metadata(catalog, lakehouse):
    catalog.create_namespace("sales", {"owner": "finance"})
    t = catalog.create_table("sales.orders", schema=SCHEMA)
    first = t.metadata_location
    t.append(rows([1, 2, 3]))
    d = lakehouse.view().load_table("sales", "orders")
    assert (D.table_format_name(d), D.table_type_name(d)) == ("ICEBERG", "MANAGED")
    assert d.format_properties["metadata_location"] == t.metadata_location != first
    assert d.format_properties["previous_metadata_location"] == first
    assert t.metadata_location.startswith(lakehouse.uri + "/warehouse/sales/orders/metadata/")
    assert ids(catalog.load_table("sales.orders")) == [1, 2, 3]
    assert catalog.list_tables("sales") == [("sales", "orders")]
    assert isinstance(catalog, TrinityLakeCatalog)


def test_a_stale_commit_is_refused_and_nothing_is_lost(catalog):
    catalog.create_namespace("sales")
    t = catalog.create_table("sales.orders", schema=SCHEMA)
    t.append(rows([1, 2, 3]))
    stale = catalog.load_table("sales.orders")
    t.append(rows([4]))
    with pytest.raises(CommitFailedException, match="changed by a concurrent commit"):
        stale.append(rows([99]))
    assert ids(catalog.load_table("sales.orders")) == [1, 2, 3, 4]
    stale.refresh().append(rows([5]))  # reloaded, it commits
    assert ids(catalog.load_table("sales.orders")) == [1, 2, 3, 4, 5]


def test_namespaces(catalog):
    catalog.create_namespace("a", {"k": "v"})
    catalog.create_namespace("b")
    with pytest.raises(NamespaceAlreadyExistsError):
        catalog.create_namespace("a")
    assert catalog.list_namespaces() == [("a",), ("b",)]
    assert catalog.list_namespaces("a") == []
    summary = catalog.update_namespace_properties("a", removals={"k", "gone"}, updates={"x": "1"})
    assert (summary.removed, summary.updated, summary.missing) == (["k"], ["x"], ["gone"])
    assert catalog.load_namespace_properties("a") == {"x": "1"}
    catalog.create_table("a.t", schema=SCHEMA)
    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace("a")
    catalog.drop_namespace("b")
    with pytest.raises(NoSuchNamespaceError):
        catalog.load_namespace_properties("b")
    with pytest.raises(NoSuchNamespaceError):
        catalog.create_table("b.t", schema=SCHEMA)
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_tables("b")


def test_rename_register_drop(catalog, tmp_path):
    catalog.create_namespace("s")
    t = catalog.create_table("s.t", schema=SCHEMA)
    t.append(rows([1, 2]))
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("s.t", schema=SCHEMA)
    moved = catalog.rename_table("s.t", "s.u")
    assert ids(moved) == [1, 2] and catalog.list_tables("s") == [("s", "u")]
    with pytest.raises(NoSuchTableError):
        catalog.load_table("s.t")
    reg = catalog.register_table("s.copy", moved.metadata_location)
    assert ids(reg) == [1, 2]
    catalog.drop_table("s.copy")
    assert not catalog.table_exists("s.copy")
    with pytest.raises(NoSuchTableError):
        catalog.drop_table("s.copy")


def test_time_travel_catalogs_are_read_only(catalog, lakehouse):
    catalog.create_namespace("s")
    t = catalog.create_table("s.t", schema=SCHEMA)
    t.append(rows([1]))
    v1 = lakehouse.latest_version()
    t.append(rows([2]))
    old = catalog.at_version(v1)
    assert ids(old.load_table("s.t")) == [1]
    assert len(old.load_table("s.t").metadata.snapshots) == 1
    created = lakehouse.load_root(v1).created_at_millis
    assert ids(catalog.as_of(created).load_table("s.t")) == [1]
    assert ids(open_catalog(lakehouse.uri, version=str(v1)).load_table("s.t")) == [1]
    with pytest.raises(ReadOnlyCatalogError):
        old.create_namespace("x")
    with pytest.raises(ReadOnlyCatalogError):
        old.load_table("s.t").append(rows([3]))
    assert ids(catalog.load_table("s.t")) == [1, 2]


def test_multi_table_transaction_commits_one_version(catalog, lakehouse):
    catalog.create_namespace("s")
    catalog.create_table("s.a", schema=SCHEMA)
    catalog.create_table("s.b", schema=SCHEMA)
    before = lakehouse.latest_version()
    with catalog.multi_table_transaction() as mtx:
        mtx.load_table("s.a").append(rows([1]))
        b = mtx.load_table("s.b")
        b.append(rows([2]))
        b.append(rows([3]))  # two commits to one table in the transaction
        mtx.create_table("s.c", schema=SCHEMA).append(rows([4]))
        assert lakehouse.latest_version() == before  # nothing published yet
    assert lakehouse.latest_version() == before + 1 == mtx.version
    assert [ids(catalog.load_table(f"s.{n}")) for n in "abc"] == [[1], [2, 3], [4]]


def test_multi_table_transaction_is_all_or_nothing(catalog, lakehouse):
    catalog.create_namespace("s")
    catalog.create_table("s.a", schema=SCHEMA)
    catalog.create_table("s.b", schema=SCHEMA)
    before = lakehouse.latest_version()
    with pytest.raises(RuntimeError, match="boom"), catalog.multi_table_transaction() as mtx:
        mtx.load_table("s.a").append(rows([1]))
        raise RuntimeError("boom")
    assert lakehouse.latest_version() == before and ids(catalog.load_table("s.a")) == []
    # A concurrent commit to one of its tables fails the whole transaction.
    mtx = catalog.multi_table_transaction()
    mtx.load_table("s.a").append(rows([1]))
    mtx.load_table("s.b").append(rows([2]))
    catalog.load_table("s.b").append(rows([7]))
    with pytest.raises(CommitFailedException):
        mtx.commit()
    assert ids(catalog.load_table("s.a")) == [] and ids(catalog.load_table("s.b")) == [7]


def _append_worker(uri: str, table: str, values: list[int], barrier, out) -> None:
    cat = open_catalog(uri)
    t = cat.load_table(table)
    barrier.wait()
    for v in values:
        for _ in range(20):
            try:
                t.append(rows([v]))
                out.put(("ok", v))
                break
            except CommitFailedException:
                out.put(("conflict", v))
                t.refresh()
    out.put(("done", None))


def test_concurrent_commits_from_processes(catalog, lakehouse):
    """Processes commit to their own tables and to one shared table at once: every commit to its
    own table lands (rebased over the others'), on the shared table a stale commit is refused
    and retried by its writer, and no row is lost."""
    catalog.create_namespace("s")
    for n in ("a", "b", "shared"):
        catalog.create_table(f"s.{n}", schema=SCHEMA)
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    jobs = [("s.a", [1, 2, 3]), ("s.b", [10, 11, 12]), ("s.shared", [100, 101, 102]), ("s.shared", [200, 201, 202])]
    procs = [ctx.Process(target=_append_worker, args=(lakehouse.uri, t, v, barrier, out)) for t, v in jobs]
    for p in procs:
        p.start()
    events = []
    done = 0
    while done < len(procs):
        e = out.get(timeout=300)
        done += e[0] == "done"
        events.append(e)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert ids(catalog.load_table("s.a")) == [1, 2, 3]
    assert ids(catalog.load_table("s.b")) == [10, 11, 12]
    assert ids(catalog.load_table("s.shared")) == [100, 101, 102, 200, 201, 202]
    assert sorted(v for k, v in events if k == "ok") == [1, 2, 3, 10, 11, 12, 100, 101, 102, 200, 201, 202]
    shared = catalog.load_table("s.shared")
    assert len(shared.metadata.snapshots) == 6  # one per landed commit


_KILL_SCRIPT = """
import os, signal, sys
from trinitylake import seams
from tests.iceberg.conftest import open_catalog, rows
point = sys.argv[2]
seams.on_crash_point(lambda name: os.kill(os.getpid(), signal.SIGKILL) if name == point else None)
cat = open_catalog(sys.argv[1])
with cat.multi_table_transaction() as mtx:
    mtx.load_table("s.a").append(rows([1]))
    mtx.load_table("s.b").append(rows([2]))
"""


@pytest.mark.parametrize(("point", "landed"), [("before_nodes", False), ("before_root", False), ("after_root", True)])
def test_multi_table_transaction_killed_mid_commit(catalog, lakehouse, point, landed):
    """SIGKILL during the lakehouse commit of a multi-table transaction: both tables or neither."""
    import os
    import signal
    import subprocess
    import sys

    catalog.create_namespace("s")
    catalog.create_table("s.a", schema=SCHEMA)
    catalog.create_table("s.b", schema=SCHEMA)
    before = lakehouse.latest_version()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, lakehouse.uri, point], cwd=repo, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    expected = ([1], [2]) if landed else ([], [])
    assert (ids(catalog.load_table("s.a")), ids(catalog.load_table("s.b"))) == expected
    assert lakehouse.latest_version() == before + landed
    catalog.load_table("s.a").append(rows([5]))  # the lakehouse takes commits afterwards
