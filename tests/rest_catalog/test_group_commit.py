"""Group commit in the catalog server (issue 57; lib/trinitylake/rest_catalog/group_commit.py).

Over real lakehouses and real servers: concurrent PyIceberg RestCatalog writers on many tables
through two server processes on one lakehouse; every acknowledged commit is in its table's
history exactly once, with one audit row naming the version it landed in, and every refused
commit is absent. The histories are read with the independent oracle (tests/oracle) and the
metadata files with plain json; the audit rows with deltalake directly.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid as uuid_mod
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.update import AssertTableUUID, SetPropertiesUpdate

from tests.oracle.expect import oracle_for
from tests.oracle.tables import root_name, table_pointers
from tests.rest_catalog.server import new_lakehouse, start
from trinitylake.iceberg import TrinityLakeCatalog
from trinitylake.rest_catalog.audit_batch import AuditBatch
from trinitylake.rest_catalog.group_commit import ACTIVE_S, GroupCommitter, _Commit

SCHEMA = pa.schema([pa.field("id", pa.int64())])
KEEP_LOG = {"write.metadata.previous-versions-max": "10000"}


def _local(uri: str) -> str:
    return uri.removeprefix("file://")


def _history(metadata_uri: str) -> list[dict]:
    """Every metadata file of a table's chain, oldest first (its metadata-log, then itself), as plain JSON."""
    cur = json.loads(Path(_local(metadata_uri)).read_text())
    chain = [json.loads(Path(_local(e["metadata-file"])).read_text()) for e in cur.get("metadata-log", [])]
    return [*chain, cur]


def _values(metadata_uri: str, key: str) -> list[str]:
    """The successive values of property `key` along the table's history (one per commit that set it)."""
    out, last = [], None
    for m in _history(metadata_uri):
        v = m.get("properties", {}).get(key)
        if v is not None and v != last:
            out.append(v)
        last = v
    return out


def _audit_rows(lakehouse: str) -> list[dict]:
    return DeltaTable(_local(lakehouse).rstrip("/") + "/_control").to_pyarrow_table().to_pylist()


def _commit_rows(lakehouse: str, table: str) -> list[dict]:
    return [r for r in _audit_rows(lakehouse)
            if r["record_type"] == "committed" and r["command"] == f"catalog serve commit table {table}"]


def _pointer_versions(lakehouse: str, table: str) -> dict[int, str]:
    """version -> the table's metadata location in it (independent oracle)."""
    o = oracle_for(lakehouse)
    out = {}
    for v in o.listed_versions():
        loc = table_pointers(o, f"{o.root}/{root_name(v)}").get(table)
        if loc is not None:
            out[v] = loc
    return out


def test_a_failing_requirement_is_refused_alone_amid_a_group(tmp_path: Path) -> None:
    """One group of 5 commits on 4 tables (two on one table), the third with a requirement that
    fails: it alone is refused; the other four land in one version, two on the shared table in
    order, with one audit row each naming that version."""
    lh = new_lakehouse(tmp_path / "lh")
    cat = TrinityLakeCatalog("rest", lakehouse=lh)
    cat.create_namespace("n")
    uuids = {}
    for i in range(3):
        uuids[i] = cat.create_table(f"n.t{i}", schema=SCHEMA, properties=KEEP_LOG).metadata.table_uuid
    before = cat.lakehouse.latest_version()
    cat.audit_command = "catalog serve"

    def c(i: int, value: str, uuid=None) -> _Commit:
        return _Commit(cat, ("n", f"t{i}"), (AssertTableUUID(uuid=uuid or uuids[i]),),
                       (SetPropertiesUpdate(updates={"c": value}),))

    group = [c(0, "a"), c(1, "b"), c(2, "bad", uuid_mod.uuid4()), c(0, "a2"), c(2, "c")]
    GroupCommitter()._lead(cat, group)
    assert [x.error is None for x in group] == [True, True, False, True, True]
    assert isinstance(group[2].error, CommitFailedException) and "UUID" in str(group[2].error).upper()
    assert {x.version for x in group if x.error is None} == {before + 1}
    assert cat.lakehouse.latest_version() == before + 1
    t0 = cat.load_table("n.t0")
    assert _values(t0.metadata_location, "c") == ["a", "a2"]
    assert _values(cat.load_table("n.t2").metadata_location, "c") == ["c"]
    rows = [r for r in _audit_rows(lh) if r["record_type"] == "committed" and r["version_after"] == before + 1]
    assert sorted(r["command"] for r in rows) == sorted(
        f"catalog serve commit table n.t{i}" for i in (0, 1, 0, 2))
    assert len({r["txn_seq"] for r in rows}) == 4


def test_the_audited_markers_and_a_due_checkpoint_follow_the_answers(tmp_path: Path, monkeypatch) -> None:
    """A group's writers are answered once its rows are appended; the version's audited marker
    and a checkpoint of the control table that the append made due are written after (on an
    object store: 2 round trips and a few hundred ms the writers do not wait for)."""
    from trinitylake.control import table as table_mod

    lh = new_lakehouse(tmp_path / "lh")
    cat = TrinityLakeCatalog("rest", lakehouse=lh)
    cat.create_namespace("n")
    uuid = cat.create_table("n.t0", schema=SCHEMA).metadata.table_uuid
    cat.audit_command = "catalog serve"
    control = Path(_local(lh)) / "_control"
    monkeypatch.setattr(table_mod, "CHECKPOINT_INTERVAL", DeltaTable(str(control)).version() + 1)
    g = GroupCommitter()
    release = threading.Event()
    g.audit._after.submit(release.wait, 30)  # holds the work after appends back
    group = [_Commit(cat, ("n", "t0"), (AssertTableUUID(uuid=uuid),), (SetPropertiesUpdate(updates={"c": "a"}),))]
    g._lead(cat, group)
    version = group[0].version
    assert group[0].done and group[0].error is None and version == cat.lakehouse.latest_version()
    assert len(_commit_rows(lh, "n.t0")) == 1  # the rows are there when the writer is answered
    marker = control / "_audited" / f"{version:020d}"
    delta_version = DeltaTable(str(control)).version()
    checkpoint = control / "_delta_log" / f"{delta_version:020d}.checkpoint.parquet"
    assert not marker.exists() and not checkpoint.exists()
    release.set()
    g.audit.settled()
    assert marker.exists() and checkpoint.exists()


def test_the_leaders_commits_do_not_wait_for_the_lakehouse_hint(tmp_path: Path) -> None:
    """Through `commit` with the server's own leader catalog: the group's transaction begins
    while its lead gathers, and the lakehouse's hint is written after the root on a thread of
    its own; a commit is answered while that thread is held, and the hint follows."""
    from trinitylake.format.paths import HINT_FILE

    lh = new_lakehouse(tmp_path / "lh")
    cat = TrinityLakeCatalog("rest", lakehouse=lh)
    cat.create_namespace("n")
    uuid = cat.create_table("n.t0", schema=SCHEMA).metadata.table_uuid
    cat.audit_command = "catalog serve"
    g = GroupCommitter(leader_catalog=lambda: TrinityLakeCatalog("rest", lakehouse=lh))
    hint = Path(_local(lh)) / HINT_FILE
    release = threading.Event()
    g._hints.submit(release.wait, 30)  # holds the hint's thread
    before = hint.read_text()
    g.commit(cat, ("n", "t0"), (AssertTableUUID(uuid=uuid),), (SetPropertiesUpdate(updates={"c": "a"}),))
    version = cat.lakehouse.latest_version()
    assert _values(cat.load_table("n.t0").metadata_location, "c") == ["a"] and len(_commit_rows(lh, "n.t0")) == 1
    assert hint.read_text() == before and int(before) < version
    release.set()
    g._hints.submit(lambda: None).result()
    assert int(hint.read_text()) == version


def test_a_metadata_file_that_fails_refuses_its_commit_and_the_later_ones_to_its_table(tmp_path: Path) -> None:
    """The group's metadata files are written together (`write_staged_each`); a store error on
    one (injected) refuses that commit and the group's later commits to the same table, which
    built on it, while the other tables' commits land, with one audit row each."""
    lh = new_lakehouse(tmp_path / "lh")
    cat = TrinityLakeCatalog("rest", lakehouse=lh)
    cat.create_namespace("n")
    uuids = {i: cat.create_table(f"n.t{i}", schema=SCHEMA, properties=KEEP_LOG).metadata.table_uuid for i in range(2)}
    before = cat.lakehouse.latest_version()
    cat.audit_command = "catalog serve"
    real = cat.write_staged_each
    later: list[str] = []  # the metadata file of t0's later commit: written, then refused

    def failing(staged):  # fault injection: the store refuses t0's first new metadata file
        out = real(staged)
        later.extend(s.metadata_location for i, s in enumerate(staged) if tuple(s.name()) == ("n", "t0") and i > 0)
        return [OSError("injected store error") if tuple(s.name()) == ("n", "t0") and i == 0 else r
                for i, (s, r) in enumerate(zip(staged, out, strict=True))]

    cat.write_staged_each = failing  # type: ignore[method-assign]

    def c(i: int, value: str) -> _Commit:
        return _Commit(cat, ("n", f"t{i}"), (AssertTableUUID(uuid=uuids[i]),), (SetPropertiesUpdate(updates={"c": value}),))

    group = [c(0, "a"), c(1, "b"), c(0, "a2")]
    GroupCommitter()._lead(cat, group)
    assert [x.error is None for x in group] == [False, True, False]
    assert "injected" in str(group[0].error) and "earlier commit" in str(group[2].error)
    assert group[1].version == before + 1 == cat.lakehouse.latest_version()
    assert _values(cat.load_table("n.t1").metadata_location, "c") == ["b"]
    assert "c" not in cat.load_table("n.t0").metadata.properties
    rows = [r for r in _audit_rows(lh) if r["record_type"] == "committed" and r["version_after"] == before + 1]
    assert [r["command"] for r in rows] == ["catalog serve commit table n.t1"]
    # the refused later commit's file was written, and no version names it: deleted, not left behind
    assert len(later) == 1 and not os.path.exists(later[0].removeprefix("file://"))
    # so was t0's definition, written beside the metadata files (naming a2's): t0 keeps the one
    # of its creation, t1 has that and the one of its commit
    defs = {i: list((tmp_path / "lh").rglob(f"*-n-t{i}-*.binpb")) for i in range(2)}
    assert (len(defs[0]), len(defs[1])) == (1, 2)


def _writer(cat: RestCatalog, table: str, key: str, n: int, acked: list[str], refused: list[str]) -> None:
    t = cat.load_table(table)
    for k in range(n):
        value = f"{key}-{k}"
        try:
            with t.transaction() as tx:
                tx.set_properties(**{key: value})
            acked.append(value)
        except CommitFailedException:
            refused.append(value)
            t = cat.load_table(table)


@pytest.mark.timeout(600)
def test_many_writers_through_two_servers_each_commit_exactly_once(tmp_path: Path) -> None:
    """32 writers on 32 tables plus 3 on one shared table (whose stale commits are refused),
    through two server processes on one lakehouse."""
    lh = new_lakehouse(tmp_path / "lh")
    servers = [start(lh, tmp_path), start(lh, tmp_path)]
    try:
        cats = [RestCatalog(f"r{i}", uri=s.url, token=s.token) for i, s in enumerate(servers)]
        cats[0].create_namespace("n")
        for i in range(32):
            cats[i % 2].create_table(f"n.t{i}", schema=SCHEMA, properties=KEEP_LOG)
        cats[1].create_table("n.shared", schema=SCHEMA, properties=KEEP_LOG)
        acked: dict[str, list[str]] = {}
        refused: dict[str, list[str]] = {}
        threads = []
        for i in range(32):
            acked[f"t{i}"], refused[f"t{i}"] = [], []
            threads.append(threading.Thread(target=_writer, args=(
                RestCatalog(f"w{i}", uri=servers[i % 2].url, token=servers[i % 2].token), f"n.t{i}", "c", 6,
                acked[f"t{i}"], refused[f"t{i}"])))
        for j in range(3):
            acked[f"s{j}"], refused[f"s{j}"] = [], []
            threads.append(threading.Thread(target=_snapshot_writer, args=(
                RestCatalog(f"s{j}", uri=servers[j % 2].url, token=servers[j % 2].token), "n.shared", f"s{j}", 6,
                acked[f"s{j}"], refused[f"s{j}"])))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in servers:
            s.stop()

    for i in range(32):
        # each writer alone on its table: nothing refused, every commit once, in order
        assert refused[f"t{i}"] == []
        table = f"n.t{i}"
        pointers = _pointer_versions(lh, table)
        latest = pointers[max(pointers)]
        assert _values(latest, "c") == acked[f"t{i}"]
        # exactly once: one metadata file per acknowledged commit after the create, and the table's
        # pointer moved in exactly as many lakehouse versions (the oracle's reading of the roots)
        assert len(_history(latest)) == 1 + len(acked[f"t{i}"])
        moves = [v for v in sorted(pointers) if pointers[v] != pointers.get(v - 1)]
        assert len(moves) == 1 + len(acked[f"t{i}"]), (table, moves)
        rows = _commit_rows(lh, table)
        assert len(rows) == len(acked[f"t{i}"]) == 6
        # each row names the version its commit landed in: the table's pointer changed there
        for r in rows:
            v = r["version_after"]
            assert pointers[v] != pointers.get(v - 1), (table, v)
        assert len({r["version_after"] for r in rows}) == 6
    shared = _pointer_versions(lh, "n.shared")
    history = _history(shared[max(shared)])
    snap_values = Counter(m["properties"].get("w") for m in history)
    ok = [v for j in range(3) for v in acked[f"s{j}"]]
    bad = [v for j in range(3) for v in refused[f"s{j}"]]
    assert ok and len(ok) + len(bad) == 18
    for v in ok:
        assert snap_values[v] == 1, v
    for v in bad:
        assert snap_values[v] == 0, v
    assert len(history[-1]["snapshots"]) == len(ok)  # each acknowledged append once, no refused one
    assert len(_commit_rows(lh, "n.shared")) == len(ok)
    # txn_seq order is version order, through both servers' root races: a group's numbers are
    # taken after its base root was read, and again after a rebase
    committed = sorted((r["txn_seq"], r["version_after"]) for r in _audit_rows(lh) if r["record_type"] == "committed")
    assert len({q for q, _ in committed}) == len(committed)
    assert [v for _, v in committed] == sorted(v for _, v in committed)


def _snapshot_writer(cat: RestCatalog, table: str, key: str, n: int, acked: list[str], refused: list[str]) -> None:
    """Appends with a property naming the commit: appends to one table from several writers
    assert the table's current snapshot, so a stale one is refused (409)."""
    t = cat.load_table(table)
    for k in range(n):
        value = f"{key}-{k}"
        try:
            with t.transaction() as tx:
                tx.append(pa.table({"id": [k]}, schema=SCHEMA))
                tx.set_properties(w=value)
            acked.append(value)
        except CommitFailedException:
            refused.append(value)
        t = cat.load_table(table)


@pytest.mark.timeout(600)
def test_workers_share_one_port_and_each_commit_lands_once(tmp_path: Path) -> None:
    """`catalog serve --workers 2`: two processes on one port, each grouping its own commits and
    racing the other for roots; 8 writers on 8 tables, every commit once, one audit row each."""
    lh = new_lakehouse(tmp_path / "lh")
    srv = start(lh, tmp_path, "--workers", "2")
    try:
        cat = RestCatalog("r", uri=srv.url, token=srv.token)
        cat.create_namespace("n")
        for i in range(8):
            cat.create_table(f"n.t{i}", schema=SCHEMA, properties=KEEP_LOG)
        acked: dict[int, list[str]] = {i: [] for i in range(8)}
        refused: dict[int, list[str]] = {i: [] for i in range(8)}
        threads = [threading.Thread(target=_writer, args=(RestCatalog(f"w{i}", uri=srv.url, token=srv.token),
                                                          f"n.t{i}", "c", 5, acked[i], refused[i])) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        srv.stop()
    assert srv.proc.returncode == 0
    assert "2 worker processes" in srv.output()
    pids = {line.split("[")[-1].rstrip("]") for line in srv.output().splitlines() if "Started server process" in line}
    assert len(pids) == 2, srv.output()[-2000:]
    for i in range(8):
        assert refused[i] == [] and len(acked[i]) == 5
        pointers = _pointer_versions(lh, f"n.t{i}")
        assert _values(pointers[max(pointers)], "c") == acked[i]
        rows = _commit_rows(lh, f"n.t{i}")
        assert len(rows) == 5 and all(pointers[r["version_after"]] != pointers.get(r["version_after"] - 1)
                                      for r in rows)


def _rows_of(cat: TrinityLakeCatalog, version: int, n: int) -> list:
    auditor = cat.lakehouse.auditor
    auditor.ensure()
    seqs = auditor.control.seq.allocate_many(f"txn-{version}", n)
    return [auditor.record(txn_seq=q, record_type="committed", txn_id=f"txn-{version}",
                           command=f"catalog serve commit table n.t{version}", version_before=version - 1,
                           version_after=version, changes=[f"alter table n.t{version}"]) for q in seqs]


def test_an_audit_append_waits_for_the_group_being_written_and_a_lone_one_does_not(tmp_path: Path) -> None:
    """The audit rows of a group whose root exists wait for the group being written (its rows go
    into the same control-table append); with no group being written an append starts at once."""
    lh = new_lakehouse(tmp_path / "lh")
    cat = TrinityLakeCatalog("rest", lakehouse=lh)
    auditor = cat.lakehouse.auditor
    batch = AuditBatch()

    batch.expect()  # a lone group: its append is written at once (no timer: the join would time out)
    lone = threading.Thread(target=batch.append, args=(auditor, _rows_of(cat, 1, 1), 1, None), daemon=True)
    lone.start()
    lone.join(30)
    assert not lone.is_alive() and (batch.appends, batch.rows) == (1, 1)

    batch.expect()  # group 2: its root exists, its rows come now
    batch.expect()  # group 3: still being written
    first = threading.Thread(target=batch.append, args=(auditor, _rows_of(cat, 2, 2), 2, None), daemon=True)
    first.start()
    first.join(0.5)
    assert first.is_alive() and batch.appends == 1  # waiting for group 3's rows before taking its batch
    batch.append(auditor, _rows_of(cat, 3, 3), 3, None)
    first.join(30)
    assert not first.is_alive() and (batch.appends, batch.rows) == (2, 6)
    rows = [r for r in _audit_rows(lh) if r["command"].startswith("catalog serve commit table")]
    assert sorted(r["version_after"] for r in rows) == [1, 2, 2, 3, 3, 3]
    assert len({r["txn_seq"] for r in rows}) == 6

    batch.expect()  # a group that brings no rows (failed) does not hold an append back
    batch.expect()
    waiting = threading.Thread(target=batch.append, args=(auditor, _rows_of(cat, 4, 1), 4, None), daemon=True)
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive()
    batch.cancel()
    waiting.join(30)
    assert not waiting.is_alive() and (batch.appends, batch.rows) == (3, 7)


def test_an_audit_append_does_not_wait_for_a_group_whose_root_takes_longer_than_an_append(tmp_path: Path) -> None:
    """On an object store a root costs more round trips than an append: the rows of a group
    whose root exists are appended at once, not after the root of the group behind it."""
    lh = new_lakehouse(tmp_path / "lh")
    cat = TrinityLakeCatalog("rest", lakehouse=lh)
    auditor = cat.lakehouse.auditor
    batch = AuditBatch()
    batch.rooted(0.3)
    batch.expect()
    batch.append(auditor, _rows_of(cat, 1, 1), 1, None)  # measures an append (a few ms here)
    assert batch.append_s is not None and batch.append_s < batch.root_s

    batch.expect()  # group 2: its root exists, its rows come now
    batch.expect()  # group 3: still being written
    first = threading.Thread(target=batch.append, args=(auditor, _rows_of(cat, 2, 2), 2, None), daemon=True)
    first.start()
    first.join(30)
    assert not first.is_alive() and (batch.appends, batch.rows) == (2, 3)  # written without group 3's rows

    batch.root_s = batch.append_s / 2  # roots quicker than appends (local disk): it waits again
    batch.expect()  # group 4 (group 3 is still being written)
    waiting = threading.Thread(target=batch.append, args=(auditor, _rows_of(cat, 4, 1), 4, None), daemon=True)
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive() and batch.appends == 2
    batch.append(auditor, _rows_of(cat, 3, 3), 3, None)
    waiting.join(30)
    assert not waiting.is_alive() and (batch.appends, batch.rows) == (3, 7)


class _WaitSpy:
    """Stands in for the committer's condition's `wait` (holding no real lock): records each
    timeout and runs `arrive` at the first call, as a writer's commit arriving during it would."""

    def __init__(self, arrive=None):
        self.timeouts: list[float | None] = []
        self._arrive = arrive

    def __call__(self, timeout=None):
        self.timeouts.append(timeout)
        if self._arrive is not None:
            arrive, self._arrive = self._arrive, None
            arrive()
        return True


def test_a_lone_writers_lead_never_waits_for_others():
    """PostgreSQL's commit_delay rule: the lead waits only while writers seen in the last
    ACTIVE_S are outside the server; a lone writer's commit is written at once."""
    g = GroupCommitter()
    spy = _WaitSpy()
    g._cond.wait = spy
    g._recent, g._inside = {("n", "t0"): 0.0}, {("n", "t0"): 1}
    g._return_s = 0.02
    g._queue = [object()]
    g._gather(0.0)
    assert spy.timeouts == []


def test_the_lead_gathers_the_active_writers_next_commits_for_a_bounded_time():
    g = GroupCommitter()
    time_now = time.monotonic()
    g._recent = {("n", "t0"): time_now, ("n", "t1"): time_now, ("n", "t2"): time_now}
    g._inside, g._return_s = {("n", "t0"): 1}, 0.01
    g._queue = [object()]

    def arrive():  # t1's and t2's next commits come in
        g._queue += [object(), object()]
        g._inside.update({("n", "t1"): 1, ("n", "t2"): 1})

    spy = _WaitSpy(arrive)
    g._cond.wait = spy
    g._gather(time_now)
    assert len(spy.timeouts) == 1  # woken by the arrivals, not by the deadline
    assert 0 < spy.timeouts[0] <= min(g.gather_max_s, 2 * g._return_s)
    # a writer gone quiet for longer than ACTIVE_S no longer counts
    g._recent = {("n", "t0"): time_now, ("n", "old"): time_now - 10, ("n", "slow"): time_now - 10}
    g._inside = {("n", "t0"): 1, ("n", "slow"): 1}  # slow: its commit inside for 10 s
    spy = _WaitSpy()
    g._cond.wait = spy
    g._gather(time_now)
    assert spy.timeouts == [] and ("n", "old") not in g._recent and ("n", "slow") in g._recent


def test_a_writer_counts_as_active_from_its_answer_not_from_its_commits_arrival():
    """On an object store a commit is inside for longer than ACTIVE_S: the writer it was
    answered to a moment ago is still active, and the next lead waits for its next commit."""
    g = GroupCommitter()

    def lead(catalog, group, beginning=None):  # a group written for longer than ACTIVE_S
        time.sleep(ACTIVE_S * 1.5)
        with g._cond:
            g._leading = False
            for c in group:
                c.response, c.done = "ok", True
            g._cond.notify_all()

    g._lead = lead
    assert g.commit(None, ("n", "a"), (), ()) == "ok"
    g._return_s = 0.05
    spy = _WaitSpy()
    g._cond.wait = spy
    assert g.commit(None, ("n", "b"), (), ()) == "ok"
    assert spy.timeouts and all(0 < t <= 0.1 for t in spy.timeouts)  # b's lead waited for a's next commit
