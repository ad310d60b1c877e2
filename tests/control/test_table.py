"""ControlTable: round trip, schema checks on bad locations, evolution, compaction, concurrency."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import trinitylake.control.table as table_mod
from trinitylake.control import SCHEMA, AuditRecord, ControlTable
from trinitylake.control.delta_schema import conform
from trinitylake.control.records import records_to_arrow
from trinitylake.errors import ControlTableError, ValidationError

from ._workers import append_many, run_in_processes

T0 = datetime(2026, 11, 23, 8, 0, 0, 123456, tzinfo=UTC)


def full_record(seq: int, rtype: str = "committed", **kw) -> AuditRecord:
    base = {
        "txn_seq": seq,
        "record_type": rtype,
        "txn_id": f"txn-{seq}",
        "command": "table create",
        "arguments": {"namespace": "sales", "table": f"t{seq}", "flags": [1, 2], "dry_run": False},
        "user": "alice",
        "host": "node-1",
        "spark_app_id": None,
        "started_at": T0 + timedelta(seconds=seq),
        "ended_at": T0 + timedelta(seconds=seq, milliseconds=250),
        "version_before": seq - 1,
        "version_after": seq,
        "based_on_seq": seq - 1 if seq > 1 else None,
        "based_on_version": seq - 1,
        "parent_seq": None,
        "metrics": {"rows": 3.0, "bytes": 1024.0, "seconds_commit": 0.25},
        "changes": [f"create table sales.t{seq}"],
        "error_class": None,
        "error_message": None,
        "isolation": "SNAPSHOT",
        "attempts": 1,
        "recorded_at": T0 + timedelta(seconds=seq, milliseconds=300),
    }
    base.update(kw)
    return AuditRecord(**base)


def listing(root) -> dict[str, tuple[int, float]]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def ct(tmp_path) -> ControlTable:
    return ControlTable(str(tmp_path / "lh" / "_control"))


# ---- round trip -----------------------------------------------------------------------
def test_round_trip_all_fields(ct):
    recs = [full_record(2), full_record(1, "begin", ended_at=None, version_after=None), full_record(1)]
    ct.append(recs)
    back = ct.records()
    # Sorted by txn_seq, then lifecycle (begin before committed).
    assert [(r.txn_seq, r.record_type) for r in back] == [(1, "begin"), (1, "committed"), (2, "committed")]
    assert back[1] == full_record(1)
    assert back[2] == full_record(2)
    assert back[0].arguments == {"namespace": "sales", "table": "t1", "flags": [1, 2], "dry_run": False}
    assert back[0].started_at.tzinfo is not None


def test_schema_types_and_since_seq(ct):
    ct.append([full_record(i) for i in range(1, 6)])
    tbl = ct.to_arrow()
    assert tbl.schema.field("started_at").type == pa.timestamp("us", tz="UTC")
    assert tbl.schema.field("metrics").type == pa.map_(pa.string(), pa.float64())
    assert tbl.schema.field("changes").type == pa.list_(pa.string())
    assert tbl.schema.field("arguments").type == pa.string()
    assert [r.txn_seq for r in ct.records(since_seq=3)] == [3, 4, 5]
    assert ct.to_arrow(since_seq=6).num_rows == 0


def test_each_append_is_one_delta_commit_and_readable_by_delta_rs(ct):
    ct.append([full_record(1), full_record(2)])
    ct.append([full_record(3)])
    dt = DeltaTable(ct._delta_uri)
    assert dt.version() == 2  # create + 2 appends
    assert [h["operation"] for h in dt.history()] == ["WRITE", "WRITE", "CREATE TABLE"]
    assert sorted(dt.to_pyarrow_table().column("txn_seq").to_pylist()) == [1, 2, 3]


def test_naive_datetimes_are_utc_and_defaults(ct):
    naive = datetime(2026, 1, 2, 3, 4, 5)
    ct.append([AuditRecord(7, "read", "r-7", "show", started_at=naive)])
    (r,) = ct.records()
    assert r.started_at == naive.replace(tzinfo=UTC)
    assert r.arguments == {} and r.metrics == {} and r.changes == []
    assert r.recorded_at is not None and r.recorded_at.tzinfo is not None


def test_missing_table_reads_empty_and_ensure_is_idempotent(ct, tmp_path):
    assert ct.records() == []
    assert ct.to_arrow().num_rows == 0
    assert not ct.exists()
    ct.seq.allocate("t")  # markers may exist before the table: still an "empty" location
    ct.ensure()
    ct.ensure()
    assert ControlTable(ct.uri).exists()
    ControlTable(ct.uri).ensure()
    assert DeltaTable(ct._delta_uri).version() == 0


def test_invalid_record_writes_nothing(ct):
    ct.ensure()
    with pytest.raises(ValidationError, match="record_type"):
        ct.append([full_record(1), full_record(2, "done")])
    assert ct.records() == [] and DeltaTable(ct._delta_uri).version() == 0


# ---- bad locations ------------------------------------------------------------------------
def test_non_delta_directory_with_files_is_refused(tmp_path):
    loc = tmp_path / "lh" / "_control"
    (loc / "sub").mkdir(parents=True)
    (loc / "notes.txt").write_text("hello")
    (loc / "sub" / "data.parquet").write_bytes(b"PAR1")
    before = listing(tmp_path)
    ct = ControlTable(str(loc))
    with pytest.raises(ControlTableError) as ei:
        ct.ensure()
    msg = str(ei.value)
    assert str(loc) in msg and "not a Delta table" in msg and "notes.txt" in msg
    with pytest.raises(ControlTableError):
        ct.append([full_record(1)])
    with pytest.raises(ControlTableError):
        ct.records()
    assert listing(tmp_path) == before


def _write_foreign_delta(path, schema: pa.Schema, rows: list[dict]) -> None:
    write_deltalake(str(path), pa.Table.from_pylist(rows, schema=schema), mode="error")


def test_delta_table_with_incompatible_type_is_refused(tmp_path):
    loc = tmp_path / "lh" / "_control"
    bad = pa.schema([pa.field("txn_seq", pa.string()) if f.name == "txn_seq" else f for f in SCHEMA])
    row = dict.fromkeys(bad.names) | {"txn_seq": "1", "record_type": "begin", "txn_id": "x", "command": "c"}
    _write_foreign_delta(loc, bad, [row])
    before = listing(tmp_path)
    ct = ControlTable(str(loc))
    with pytest.raises(ControlTableError) as ei:
        ct.ensure()
    msg = str(ei.value)
    assert str(loc) in msg and "'txn_seq'" in msg and "string" in msg and "long" in msg
    with pytest.raises(ControlTableError, match="txn_seq"):
        ct.append([full_record(1)])
    assert listing(tmp_path) == before


def test_delta_table_lacking_a_column_is_refused(tmp_path):
    loc = tmp_path / "lh" / "_control"
    lacking = pa.schema([f for f in SCHEMA if f.name != "metrics"])
    _write_foreign_delta(loc, lacking, [])
    before = listing(tmp_path)
    with pytest.raises(ControlTableError, match=r"column 'metrics' is missing"):
        ControlTable(str(loc)).ensure()
    assert listing(tmp_path) == before


def test_unreadable_delta_log_is_refused(tmp_path):
    loc = tmp_path / "lh" / "_control"
    (loc / "_delta_log").mkdir(parents=True)
    (loc / "_delta_log" / "00000000000000000000.json").write_text("garbage\n")
    before = listing(tmp_path)
    with pytest.raises(ControlTableError, match="_control"):
        ControlTable(str(loc)).ensure()
    assert listing(tmp_path) == before


# ---- schema evolution -------------------------------------------------------------------
def test_additive_evolution_adds_later_columns(tmp_path, monkeypatch):
    loc = tmp_path / "_control"
    old = pa.schema([f for f in SCHEMA if f.name not in ("attempts", "recorded_at")])
    old_row = dict.fromkeys(old.names) | {"txn_seq": 1, "record_type": "committed", "txn_id": "a", "command": "c"}
    old_row |= {"metrics": [], "changes": []}
    _write_foreign_delta(loc, old, [old_row])
    monkeypatch.setattr(table_mod, "ADDED_COLUMNS", {"attempts": "2", "recorded_at": "2"})
    ct = ControlTable(str(loc))
    ct.ensure()
    ct.append([full_record(2, attempts=3)])
    names = DeltaTable(str(loc)).schema().to_arrow().names
    assert "attempts" in names and "recorded_at" in names
    r1, r2 = ct.records()
    assert (r1.txn_seq, r1.attempts, r1.recorded_at) == (1, None, None)
    assert r2 == full_record(2, attempts=3)
    ct.append([full_record(3)])  # next append needs no evolution
    assert [r.txn_seq for r in ct.records()] == [1, 2, 3]


def test_extra_columns_of_a_newer_writer_are_kept(tmp_path):
    loc = tmp_path / "_control"
    newer = SCHEMA.append(pa.field("future", pa.string()))
    _write_foreign_delta(loc, newer, [])
    ct = ControlTable(str(loc))
    ct.append([full_record(1)])
    assert ct.records() == [full_record(1)]
    assert ct.to_arrow().column("future").to_pylist() == [None]


# ---- maintenance ------------------------------------------------------------------------
def test_compact_rewrites_small_files_and_checkpoints(ct):
    for i in range(1, 13):
        ct.seq.allocate(f"t{i}")
        ct.append([full_record(i)])
    before = ct.records()
    m = ct.compact(prune_seq_keep=5)
    assert m["files_removed"] == 12 and m["files_added"] == 1
    assert m["seq_markers_pruned"] == 7
    assert all(isinstance(v, float) for v in m.values())
    assert ct.records() == before
    dt = DeltaTable(ct._delta_uri)
    assert len(dt.file_uris()) == 1
    log = os.listdir(os.path.join(ct._delta_uri, "_delta_log"))
    assert any(f.endswith(".checkpoint.parquet") for f in log)
    assert ct.seq.allocate("next") == 13
    # Removed files stay for readers of older snapshots until the retention passes.
    assert m["files_vacuumed"] == 0.0
    m2 = ct.compact(retention_hours=0)
    assert m2["files_vacuumed"] == 12.0
    assert ct.records() == before


# ---- concurrency ------------------------------------------------------------------------
def _check_concurrent_appends(ct: ControlTable, workers: int, per: int) -> None:
    recs = ct.records()
    assert len(recs) == workers * per * 2, "rows lost"
    seqs = [r.txn_seq for r in recs if r.record_type == "committed"]
    assert len(set(seqs)) == workers * per
    pairs = {(r.arguments["worker"], r.arguments["i"]) for r in recs}
    assert pairs == {(w, i) for w in range(workers) for i in range(per)}
    for s in seqs:  # begin sorts before committed within each seq
        rows = [r.record_type for r in recs if r.txn_seq == s]
        assert rows == ["begin", "committed"]


def test_concurrent_appenders_lose_no_rows(tmp_path):
    uri = str(tmp_path / "lh" / "_control")  # not created yet: creation races too
    workers, per = 4, 15
    go = time.time() + 3.0
    assert run_in_processes(append_many, [(uri, None, w, per, go) for w in range(workers)]) == [per] * workers
    ct = ControlTable(uri)
    _check_concurrent_appends(ct, workers, per)
    assert DeltaTable(ct._delta_uri).version() == workers * per


# ---- S3 -----------------------------------------------------------------------------------
@pytest.mark.s3
def test_round_trip_on_s3(s3_bucket, s3_storage_options):
    ct = ControlTable(f"{s3_bucket}/lh/_control", dict(s3_storage_options))
    assert ct.records() == []
    seq = ct.seq.allocate("txn-1")
    ct.append([full_record(seq, "begin", version_after=None), full_record(seq)])
    ct.append([full_record(seq + 1)])
    assert ControlTable(ct.uri, dict(s3_storage_options)).records() == [
        full_record(seq, "begin", version_after=None),
        full_record(seq),
        full_record(seq + 1),
    ]
    m = ct.compact()
    assert m["files_removed"] == 2
    assert len(ct.records()) == 3


@pytest.mark.s3
def test_s3_location_with_foreign_files_is_refused(s3_bucket, s3_storage_options):
    ct = ControlTable(f"{s3_bucket}/lh/_control", dict(s3_storage_options))
    ct.storage.write("readme.txt", b"not delta")
    with pytest.raises(ControlTableError, match="not a Delta table"):
        ct.ensure()
    assert [f.path for f in ct.storage.list("")] == ["readme.txt"]


@pytest.mark.s3
def test_concurrent_appenders_on_s3_lose_no_rows(s3_bucket, s3_storage_options):
    uri = f"{s3_bucket}/lh/_control"
    workers, per = 4, 5
    go = time.time() + 4.0
    args = [(uri, dict(s3_storage_options), w, per, go) for w in range(workers)]
    assert run_in_processes(append_many, args) == [per] * workers
    _check_concurrent_appends(ControlTable(uri, dict(s3_storage_options)), workers, per)


def test_appends_after_the_first_are_written_by_the_log_appender_and_lose_no_other_writers(tmp_path, monkeypatch):
    """After its first append (delta-rs), a handle appends through `LogAppender`: the data file
    and a commit created only when absent, no delta-rs write. Another handle's appends in
    between (its own LogAppender's, and delta-rs's) are neither lost nor overwritten: a lost
    version is retried above them. delta-rs reads every row, with each file's statistics."""
    uri = str(tmp_path / "ctl")
    a, b = ControlTable(uri), ControlTable(uri)
    a.append([full_record(1)])
    assert a._log is not None and a._log.version == 1
    writes = []
    real = table_mod.write_deltalake
    monkeypatch.setattr(table_mod, "write_deltalake", lambda *x, **k: (writes.append(1), real(*x, **k))[1])
    a.append([full_record(2)])
    b.append([full_record(3)])  # b read the table to check it: its LogAppender from the first
    other = DeltaTable(uri)  # a writer through delta-rs (Spark's Delta, an older release)
    real(other, conform(records_to_arrow([full_record(4)]), pa.schema(other.schema().to_arrow())), mode="append")
    a.append([full_record(5), full_record(6)])  # version 3 is taken: a reads 3 and 4, lands at 5
    assert writes == [] and a._log.version == 5 and b._log.version == 3
    assert [r.txn_seq for r in ControlTable(uri).records()] == [1, 2, 3, 4, 5, 6]
    dt = DeltaTable(uri)
    assert dt.version() == 5  # created, then one commit per append
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
    last = actions["path"].index(max(actions["path"], key=lambda p: os.path.getmtime(os.path.join(uri, p))))
    assert actions["num_records"][last] == 2 and actions["min.txn_seq"][last] == 5 and actions["max.txn_seq"][last] == 6
    info = dt.history(1)[0]
    assert info["operation"] == "WRITE" and info["clientVersion"] == "trinitylake"


def test_an_append_lists_the_log_only_above_the_version_its_appender_knows(tmp_path, monkeypatch):
    """The log keeps every commit until a clean-up (30 days by default): an append lists the
    names after its last known version (S3's StartAfter), never the whole log, and still sees
    the commits and checkpoints other writers put above it."""
    from trinitylake.storage import Storage

    uri = str(tmp_path / "ctl")
    a = ControlTable(uri)
    for i in range(1, 31):
        a.append([full_record(i)])
    assert a._log is not None and a._log.version == 30
    asked: list[str] = []
    real = Storage.names_after
    monkeypatch.setattr(Storage, "names_after", lambda self, p, after: (asked.append(after), real(self, p, after))[1])
    assert a._log._entries() == []  # 31 commits below: none listed
    other = DeltaTable(uri)
    write_deltalake(other, conform(records_to_arrow([full_record(31)]), pa.schema(other.schema().to_arrow())),
                    mode="append")
    other.create_checkpoint()
    assert sorted(a._log._entries()) == [(31, False), (31, True)]  # the commit and its checkpoint above
    assert asked == ["00000000000000000030/"] * 2
    a.append([full_record(32)])  # a checkpoint above its version: handed to delta-rs, no row lost
    assert [r.txn_seq for r in ControlTable(uri).records()] == list(range(1, 33))


def test_the_log_appender_hands_a_changed_table_back_to_delta_rs(tmp_path):
    """A commit of another writer that changed the table's metadata (a schema evolved by a
    newer release) makes the LogAppender hand its append to delta-rs, which reloads the table;
    its data file is removed, and the next appends go through a LogAppender of the new table."""
    uri = str(tmp_path / "ctl")
    a = ControlTable(uri)
    a.append([full_record(1)])
    a.append([full_record(2)])
    evolved = DeltaTable(uri)
    extra = pa.table({"extra": pa.array([None], pa.string())})
    rows = evolved.to_pyarrow_table().slice(0, 0)
    write_deltalake(evolved, pa.Table.from_arrays([*rows.columns, extra.column(0).slice(0, 0)],
                                                  names=[*rows.column_names, "extra"]),
                    mode="append", schema_mode="merge")  # another writer: metadata changed at version 3
    before = {f for f in os.listdir(uri) if f.endswith(".parquet")}
    a.append([full_record(3)])
    assert a._log is not None and a._log.version == 4 and "extra" in a._log.schema.names
    added = {f for f in os.listdir(uri) if f.endswith(".parquet")} - before
    assert len(added) == 1  # delta-rs's file; the LogAppender's own was removed
    a.append([full_record(4)])
    assert a._log.version == 5
    assert [r.txn_seq for r in ControlTable(uri).records()] == [1, 2, 3, 4]


def test_a_long_lived_writer_reloads_its_kept_table_and_writes_the_checkpoints(tmp_path, monkeypatch):
    """A long-lived appender through delta-rs loads its kept table afresh every
    RELOAD_AFTER_APPENDS appends (delta-rs replays every commit since a table's load at each
    write: appends slowed from 14 to 51 ms over 400), and with delta-rs's hooks off it writes the
    checkpoint of every CHECKPOINT_INTERVAL-th version itself, so readers start from one."""
    uri = str(tmp_path / "ctl")
    a, b = ControlTable(uri), ControlTable(uri)
    # a table whose protocol the LogAppender leaves to delta-rs (e.g. table features)
    monkeypatch.setattr(table_mod.LogAppender, "of", classmethod(lambda cls, storage, dt: None))
    loads = []
    first = None
    n = 2 * table_mod.RELOAD_AFTER_APPENDS + 3
    for seq in range(1, n + 1):
        (b if seq == 5 else a).append([full_record(seq)])  # another writer's append in between
        if a._appended is not first:
            first = a._appended
            loads.append(seq)
        assert a._appended_uses <= table_mod.RELOAD_AFTER_APPENDS
    assert len(loads) >= 3  # loaded afresh at the first append and at least twice more
    version = DeltaTable(uri).version()
    assert version == n  # created, then one commit per append
    log = set(os.listdir(os.path.join(uri, "_delta_log")))
    for v in range(table_mod.CHECKPOINT_INTERVAL, version + 1, table_mod.CHECKPOINT_INTERVAL):
        assert f"{v:020d}.checkpoint.parquet" in log
    assert [r.txn_seq for r in ControlTable(uri).records()] == list(range(1, n + 1))


def test_an_append_can_leave_its_checkpoint_to_be_written_later(tmp_path):
    """`append(checkpoint=False)` at a checkpoint version writes the rows but not the
    checkpoint; `write_due_checkpoint` writes it (once: a second call writes nothing)."""
    uri = str(tmp_path / "ctl")
    a = ControlTable(uri)
    for seq in range(1, table_mod.CHECKPOINT_INTERVAL + 1):
        a.append([full_record(seq)], checkpoint=False)
    version = DeltaTable(uri).version()
    assert version == table_mod.CHECKPOINT_INTERVAL
    checkpoint = os.path.join(uri, "_delta_log", f"{version:020d}.checkpoint.parquet")
    assert not os.path.exists(checkpoint)
    assert [r.txn_seq for r in ControlTable(uri).records()] == list(range(1, version + 1))
    a.write_due_checkpoint()
    assert os.path.exists(checkpoint)
    os.remove(checkpoint)
    a.write_due_checkpoint()
    assert not os.path.exists(checkpoint)


def test_the_log_appender_never_writes_a_version_a_checkpoint_already_holds(tmp_path):
    """A log clean-up (or `tlake control redact`) deletes the commit files a checkpoint covers:
    a version's commit file may be absent while its checkpoint is there. An appender behind it
    does not create that version's commit (its rows would be hidden behind the checkpoint): it
    sees the checkpoint in the log and hands the append to delta-rs."""
    uri = str(tmp_path / "ctl")
    a, b = ControlTable(uri), ControlTable(uri)
    a.append([full_record(1)])
    a.append([full_record(2)])  # a's appender knows version 2
    b.append([full_record(3)])
    b.append([full_record(4)])
    DeltaTable(uri).create_checkpoint()  # at version 4
    log_dir = os.path.join(uri, "_delta_log")
    for v in range(4):  # the clean-up: the commit files the checkpoint covers, older than it
        os.remove(os.path.join(log_dir, f"{v:020d}.json"))
    a.append([full_record(5)])
    assert not os.path.exists(os.path.join(log_dir, f"{3:020d}.json"))
    assert DeltaTable(uri).version() == 5 and a._log is not None and a._log.version == 5
    assert [r.txn_seq for r in ControlTable(uri).records()] == [1, 2, 3, 4, 5]
    a.append([full_record(6)])
    assert [r.txn_seq for r in ControlTable(uri).records()] == [1, 2, 3, 4, 5, 6]


def test_a_long_lived_writer_spaces_its_checkpoints_by_the_table_s_files(tmp_path, monkeypatch):
    """A checkpoint lists every file of the table, so at a fixed interval its cost grows with
    the table (34 ms at 1,000 files, 181 ms at 12,000). After its first, a long-lived writer's
    next checkpoint is due CHECKPOINT_FILES_SHARE of the table's files later (at least
    CHECKPOINT_INTERVAL): here half, so one file an append spaces them 10, 10, 15, 22 apart. A
    fresh handle (another process) checkpoints every CHECKPOINT_INTERVAL-th version, and every
    row reads back."""
    monkeypatch.setattr(table_mod, "CHECKPOINT_FILES_SHARE", 0.5, raising=False)
    uri = str(tmp_path / "ctl")
    a = ControlTable(uri)
    n = 70
    for seq in range(1, n + 1):
        a.append([full_record(seq)])
    log = os.listdir(os.path.join(uri, "_delta_log"))
    written = sorted(int(name.split(".")[0]) for name in log if name.endswith(".checkpoint.parquet"))
    assert written == [10, 20, 30, 45, 67], written
    b = ControlTable(uri)
    for seq in range(n + 1, 81):
        b.append([full_record(seq)])
    assert os.path.exists(os.path.join(uri, "_delta_log", f"{80:020d}.checkpoint.parquet"))
    assert [r.txn_seq for r in ControlTable(uri).records()] == list(range(1, 81))
