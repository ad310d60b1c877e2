"""`tlake tables expire-snapshots` and `tlake tables remove-orphans` on real PyIceberg tables in
a real lakehouse, checked against the tests' own oracle (`tests.iceberg.table_oracle`: table
metadata JSON and Avro manifests read without the library; the retained versions and the
metadata files they point at read by the lakehouse oracle's own reader, `tests.oracle.tables`,
not by the library calls the jobs make), with time travel to every retained version read back
through PyIceberg."""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner

from tests.iceberg import table_oracle as O
from tests.iceberg.conftest import SCHEMA, ids, rows
from tests.iceberg.tables_setup import DAY_S, expire_lakehouse, open_catalog, plant
from tests.oracle.expect import latest_version, oracle_for
from trinitylake.errors import ValidationError
from trinitylake.lakehouse import Lakehouse
from trinitylake.runs.results import JobResult
from trinitylake.spark.execution import DISTRIBUTED, LOCAL, Execution
from trinitylake.tables_maintenance.expire import ExpireOptions, expire_snapshots
from trinitylake.tables_maintenance.orphans import OrphanOptions, remove_orphans
from trinitylake.tables_maintenance.retention import plan_retention

NAMES = ("s.a", "s.b")


class History:
    """The rows of each table at each lakehouse version, as recorded when it was made."""

    def __init__(self, lh_uri: str):
        self.uri = lh_uri
        self.rows: dict[int, dict[str, list[int]]] = {}
        self.metadata_files: set[str] = set()

    def record(self, cat) -> None:
        v = latest_version(oracle_for(self.uri))
        self.rows[v] = {}
        for n in NAMES:
            try:
                t = cat.load_table(n)
            except Exception:  # noqa: BLE001 - not created yet
                continue
            self.rows[v][n] = ids(t)
            self.see(t.metadata_location)

    def see(self, location: str) -> None:
        """Every metadata file ever current, and those its log names."""
        self.metadata_files.add(O.local(location))
        self.metadata_files |= O.log_of(O.metadata(location))


def build(lh_uri: str) -> tuple[object, History]:
    cat = open_catalog(lh_uri)
    h = History(lh_uri)
    cat.create_namespace("s")
    a = cat.create_table("s.a", schema=SCHEMA)
    cat.create_table("s.b", schema=SCHEMA, properties={"history.expire.min-snapshots-to-keep": "2"})
    h.record(cat)
    a.append(rows([1, 2]))
    h.record(cat)
    a = cat.load_table("s.a")
    tagged = a.current_snapshot().snapshot_id
    a.manage_snapshots().create_tag(tagged, "first").commit()
    h.record(cat)
    for step in ([100], [101], [102]):
        cat.load_table("s.b").append(rows(step))
        h.record(cat)
    cat.load_table("s.a").append(rows([3]))
    h.record(cat)
    cat.load_table("s.a").overwrite(rows([10, 11]))
    h.record(cat)
    cat.load_table("s.b").delete("id == 100")
    h.record(cat)
    cat.load_table("s.a").append(rows([12]))
    h.record(cat)
    return cat, h


def retained(lh_uri: str) -> list[int]:
    """The versions that must stay readable, by the lakehouse oracle's own listing."""
    return O.retained_versions(lh_uri)


def retained_metadata(lh_uri: str) -> list[str]:
    """The metadata files retained roots point at, read by the lakehouse oracle (not the library)."""
    return sorted(O.retained_metadata(lh_uri))


def check(lh_uri: str, cat, h: History, phase: str) -> set[str]:
    """The oracle: every file a table's current metadata or a retained version keeps exists;
    every other file any metadata ever reached is gone. Time travel to every retained version
    reads the rows recorded for it. Returns the live set."""
    current = sorted(O.current_metadata(lh_uri).values())
    assert current == sorted(O.local(cat.load_table(n).metadata_location) for n in NAMES), phase
    for loc in current:
        h.see(loc)
    live = O.expected_live(current, retained_metadata(lh_uri))
    universe = O.ever_reached(h.metadata_files) | live
    missing = sorted(p for p in live if not os.path.exists(p))
    assert not missing, f"{phase}: live files deleted: {missing[:5]}"
    left = sorted(p for p in universe - live if os.path.exists(p))
    assert not left, f"{phase}: files nothing retained reaches were kept: {left[:5]}"
    for v in retained(lh_uri):
        want = h.rows.get(v)
        if want is None:
            continue  # a version made by a job: same rows as the one before it
        at = cat.at_version(v)
        for n, expect in want.items():
            assert ids(at.load_table(n)) == expect, f"{phase}: version {v} reads other rows of {n}"
    return live


def expire(lh_uri: str, ex: Execution | None = None, **kw) -> JobResult:
    lh = Lakehouse.open(lh_uri, audit=False)
    result = JobResult("tables expire-snapshots", f"r{time.time_ns()}", lh_uri)
    return expire_snapshots(lh, ExpireOptions(**kw), result, ex)


def orphans(lh_uri: str, ex: Execution | None = None, **kw) -> JobResult:
    lh = Lakehouse.open(lh_uri, audit=False)
    return remove_orphans(lh, OrphanOptions(**kw), JobResult("tables remove-orphans", f"o{time.time_ns()}", lh_uri), ex)


def files_under(path: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs}


def test_expire_defers_what_retained_versions_reach_then_deletes_it_and_orphans_go(tmp_path):
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False, txn_ttl_millis=1000)
    cat, h = build(uri)
    before = files_under(uri)
    latest = latest_version(oracle_for(uri))

    dry = expire(uri, older_than_ms=0, dry_run=True)
    assert files_under(uri) - before == {O.local(dry.plan_location)} and dry.counts["snapshots_expired"] > 0
    assert latest_version(oracle_for(uri)) == latest

    # 1. Every lakehouse version is retained: only what no version's current snapshot reaches goes.
    r1 = expire(uri, older_than_ms=0)
    assert latest_version(oracle_for(uri)) == latest + 1  # both tables, one version
    a, b = cat.load_table("s.a"), cat.load_table("s.b")
    assert len(b.metadata.snapshots) == 2  # the table's own history.expire.min-snapshots-to-keep
    assert {s.snapshot_id for s in a.metadata.snapshots} == {
        a.current_snapshot().snapshot_id,
        a.metadata.refs["first"].snapshot_id,
    }  # the tag holds
    assert r1.counts["deferred"] > 0 and r1.details["tables"]["s.a"]["version"] == latest + 1
    check(uri, cat, h, "expire with every version retained")
    assert ids(cat.load_table("s.a")) == [10, 11, 12] and ids(cat.load_table("s.b")) == [101, 102]

    # 2. The lakehouse's own expire keeps the latest version only; a run that expires no
    # snapshot deletes what was deferred.
    expire_lakehouse(uri)
    r2 = expire(uri, older_than_ms=0)
    assert r2.counts["snapshots_expired"] == 0 and r2.counts["deleted"] >= r1.counts["deferred"] > 0
    assert r2.counts["deleted_data_files"] > 0 and r2.counts["deferred"] == 0
    live = check(uri, cat, h, "expire after the lakehouse's expire")

    # 3. Orphans: old ones under the table go, young, hidden and live ones stay.
    loc = O.local(cat.load_table("s.a").metadata.location)
    old = [plant(f"{loc}/data", "orphan-old.parquet", 40), plant(f"{loc}/metadata", "x.avro", 4)]
    young = [plant(f"{loc}/data", "orphan-young.parquet", 1), plant(f"{loc}/data", "_hidden.parquet", 40)]
    with pytest.raises(ValidationError, match="--unsafe-min-age"):
        orphans(uri, older_than_ms=3600_000)
    d = orphans(uri, dry_run=True)
    assert sorted(O.local(u) for u in json.loads(open(O.local(d.plan_location)).read())["delete"]) == sorted(old)
    assert all(os.path.exists(p) for p in old)
    o = orphans(uri)
    assert o.counts["deleted"] == 2 and o.details["tables"]["s.a"]["files_deleted"] == 2
    assert not any(os.path.exists(p) for p in old) and all(os.path.exists(p) for p in young)
    assert all(os.path.exists(p) for p in live)
    check(uri, cat, h, "remove-orphans")


def test_a_concurrent_append_during_an_expire_keeps_its_rows(tmp_path, monkeypatch):
    from trinitylake.iceberg.multi_table import MultiTableTransaction

    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False)
    cat, h = build(uri)
    writer = open_catalog(uri, "writer")
    original = MultiTableTransaction.commit
    appended: list[int] = []

    def commit_after_a_writer(self):
        if not appended:  # between the expiry's plan and its commit, another writer appends
            writer.load_table("s.a").append(rows([999]))
            appended.append(latest_version(oracle_for(uri)))
            h.record(writer)
        return original(self)

    monkeypatch.setattr(MultiTableTransaction, "commit", commit_after_a_writer)
    r = expire(uri, older_than_ms=0, retain_last=1)
    assert appended and r.counts["conflicts_replanned"] == 1 and r.details["tables"]["s.a"]["attempts"] == 2
    assert ids(cat.load_table("s.a")) == [10, 11, 12, 999]
    a = cat.load_table("s.a")
    assert a.current_snapshot().summary["added-records"] == "1" and r.details["tables"]["s.a"]["version"] > appended[0]
    check(uri, cat, h, "expire with a concurrent append")


def test_retention_follows_icebergs_rules_for_branches_tags_and_ref_age():
    day = DAY_S * 1000
    now = 100 * day

    def snap(i: int, parent: int | None, age_days: float) -> dict:
        return {"snapshot-id": i, "parent-snapshot-id": parent, "timestamp-ms": now - int(age_days * day)}

    meta = {
        "properties": {"history.expire.max-ref-age-ms": str(10 * day)},
        "snapshots": [
            snap(1, None, 30),
            snap(2, 1, 20),
            snap(3, 2, 2),
            snap(4, 3, 1),
            snap(5, 2, 25),
            snap(6, 1, 30),
            snap(7, None, 1),
            snap(8, None, 9),
        ],
        "refs": {
            "main": {"snapshot-id": 4, "type": "branch"},
            "old-branch": {"snapshot-id": 5, "type": "branch"},  # older than max-ref-age: removed
            "dev": {"snapshot-id": 6, "type": "branch", "min-snapshots-to-keep": 2, "max-ref-age-ms": 40 * day},
            "tag": {"snapshot-id": 8, "type": "tag"},
        },
    }
    r = plan_retention(meta, now)  # default age 5 days, keep 1
    assert r.removed_refs == ["old-branch"]
    # main keeps 4, 3 (younger than 5 days); dev keeps its 2 newest (6, 1); the tag 8; 7 is young and unreferenced
    assert r.kept == {4, 3, 6, 1, 8, 7} and r.expired == {2, 5}
    assert plan_retention(meta, now, older_than_ms=0, retain_last=3).kept == {4, 3, 2, 6, 1, 8}
    assert plan_retention({"current-snapshot-id": 1, "snapshots": [snap(1, None, 50)]}, now).kept == {1}


def test_cli_runs_are_audited_under_their_own_command(tmp_path):
    from trinitylake.cli.app import cli

    uri = str(tmp_path / "lh")
    Lakehouse.create(uri)
    cat = open_catalog(uri, audit="true")
    cat.create_namespace("s")
    t = cat.create_table("s.a", schema=SCHEMA)
    for i in range(3):
        t.append(rows([i]))
        t = cat.load_table("s.a")
    # A table whose metadata pointer names no file (a placeholder) has nothing to maintain.
    Lakehouse.open(uri, audit=False).create_table(
        "s", "ghost", metadata_location=str(tmp_path / "no" / "v1.metadata.json")
    )
    runner = CliRunner()
    res = runner.invoke(cli, ["--lakehouse", uri, "tables", "expire-snapshots", "--older-than", "0s", "--unsafe-min-age", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["counts"]["snapshots_expired"] == 2 and out["details"]["tables"]["s.a"]["snapshots_expired"] == 2
    assert out["details"]["tables_without_metadata"] == [f"s.ghost (file://{tmp_path}/no/v1.metadata.json)"]
    res = runner.invoke(cli, ["--lakehouse", uri, "tables", "remove-orphans", "--older-than", "1h"])
    assert res.exit_code == 1 and "--unsafe-min-age" in res.output
    res = runner.invoke(cli, ["--lakehouse", uri, "tables", "remove-orphans", "--dry-run"])
    assert res.exit_code == 0 and "s.a" in res.output, res.output
    shown = json.loads(runner.invoke(cli, ["--lakehouse", uri, "show", "--all", "--json"]).output)
    runs = [(e["command"], e["state"]) for e in shown if e["command"].startswith("tables_")]  # newest first
    assert runs == [("tables_orphans", "dry_run"), ("tables_orphans", "failed"), ("tables_expire", "committed")], runs
    assert ids(cat.load_table("s.a")) == [0, 1, 2]


def test_pending_files_of_a_failed_run_stay_while_the_renamed_table_reaches_them(tmp_path, monkeypatch):
    from trinitylake.errors import TransactionConflictError
    from trinitylake.iceberg.multi_table import MultiTableTransaction

    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False)
    cat, h = build(uri)
    writer = open_catalog(uri, "writer")
    original = MultiTableTransaction.commit

    def always_beaten(self):  # every commit loses to a concurrent append: the run gives up
        writer.load_table("s.a").append(rows([500]))
        return original(self)

    monkeypatch.setattr(MultiTableTransaction, "commit", always_beaten)
    with pytest.raises(TransactionConflictError):
        expire(uri, older_than_ms=0, max_attempts=2)
    monkeypatch.setattr(MultiTableTransaction, "commit", original)
    # Its candidates were recorded before each commit; the table is renamed before the next run.
    cat.rename_table("s.a", "s.z")
    z = cat.load_table("s.z")
    keep = O.reach(O.metadata(z.metadata_location))
    r = expire(uri, older_than_ms=10 * DAY_S * 1000)  # expires nothing
    assert r.counts["snapshots_expired"] == 0
    assert all(os.path.exists(p) for p in keep)
    assert ids(cat.load_table("s.z")) == [10, 11, 12, 500, 500]


def test_a_data_file_two_tables_share_stays_while_the_other_table_reaches_it(tmp_path):
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False, txn_ttl_millis=1000)
    cat = open_catalog(uri)
    cat.create_namespace("s")
    a = cat.create_table("s.a", schema=SCHEMA)
    a.append(rows([1, 2]))
    a = cat.load_table("s.a")
    shared = [t.file.file_path for t in a.scan().plan_files()]
    cat.create_table("s.c", schema=SCHEMA).add_files(shared)  # the same parquet file, added to a second table
    cat.load_table("s.c").overwrite(rows([9]))  # s.c reaches it through an older snapshot only
    cat.load_table("s.a").overwrite(rows([3]))
    expire_lakehouse(uri)
    r = expire(uri, older_than_ms=0, tables=["s.a"])
    assert r.counts["snapshots_expired"] == 2 and r.counts["deleted"] > 0
    assert all(os.path.exists(O.local(p)) for p in shared)
    c = cat.load_table("s.c")
    assert ids(c) == [9] and ids(cat.load_table("s.a")) == [3]
    first = min(c.metadata.snapshots, key=lambda x: x.timestamp_ms).snapshot_id
    assert sorted(c.scan(snapshot_id=first).to_arrow().column("id").to_pylist()) == [1, 2]


def test_what_a_live_distributed_transaction_staged_stays(tmp_path):
    from trinitylake.lakehouse.distributed import DistributedTransaction

    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False, txn_ttl_millis=1000)
    cat = open_catalog(uri)
    cat.create_namespace("s")
    cat.create_table("s.a", schema=SCHEMA).append(rows([1]))
    first = cat.load_table("s.a").metadata_location
    first_data = [O.local(t.file.file_path) for t in cat.load_table("s.a").scan().plan_files()]
    cat.load_table("s.a").overwrite(rows([2]))
    expire_lakehouse(uri)
    # A distributed transaction stages the table back to its first metadata file (not committed).
    lh = Lakehouse.open(uri, audit=False)
    dtx = DistributedTransaction.begin(lh)
    dtx.stage(lambda t: t.alter_table("s", "a", metadata_location=first))
    r = expire(uri, older_than_ms=0)
    assert r.counts["snapshots_expired"] == 2 and r.counts["deferred"] > 0
    assert all(os.path.exists(p) for p in first_data)  # what the staged metadata's snapshot reads
    assert ids(cat.load_table("s.a")) == [2]


def test_a_table_with_gc_disabled_is_left_alone(tmp_path):
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False)
    cat = open_catalog(uri)
    cat.create_namespace("s")
    t = cat.create_table("s.a", schema=SCHEMA, properties={"gc.enabled": "false"})
    for i in range(3):
        t.append(rows([i]))
        t = cat.load_table("s.a")
    orphan = plant(f"{O.local(t.metadata.location)}/data", "orphan.parquet", 10)
    r = expire(uri, older_than_ms=0)
    assert r.counts["snapshots_expired"] == 0 and r.details["tables_gc_disabled"] == ["s.a"]
    o = orphans(uri)
    assert o.counts["candidates"] == 0 and o.details["tables_gc_disabled"] == ["s.a"] and os.path.exists(orphan)
    assert len(cat.load_table("s.a").metadata.snapshots) == 3


def _plan(result: JobResult) -> dict:
    """A run's plan without what differs between runs (its id, the names of the new metadata
    files a dry run staged)."""
    doc = json.loads(open(O.local(result.plan_location)).read())
    doc.pop("run_id")
    for row in doc["tables"].values():
        row.pop("new_metadata", None)
    return doc


def test_manifest_reads_and_deletes_on_the_executors_make_the_same_plan_as_on_the_driver(tmp_path, spark):
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False, txn_ttl_millis=1000)
    cat, h = build(uri)
    expire_lakehouse(uri)  # the oldest versions go: their tables' files can be deleted now
    loc = O.local(cat.load_table("s.b").metadata.location)
    old = plant(f"{loc}/data", "orphan-old.parquet", 40)
    now = int(time.time() * 1000)
    local, dist = Execution(LOCAL), Execution(DISTRIBUTED, spark=spark)

    plans = [_plan(expire(uri, ex, older_than_ms=0, dry_run=True, reference_ms=now)) for ex in (local, dist)]
    assert plans[0] == plans[1] and plans[0]["delete"], plans
    assert local.record["tables.manifests"]["where"] == LOCAL
    assert dist.record["tables.manifests"]["where"] == DISTRIBUTED and dist.record["tables.manifests"]["items"] > 0
    o_plans = [_plan(orphans(uri, ex, dry_run=True, reference_ms=now)) for ex in (local, dist)]
    assert o_plans[0] == o_plans[1] and [O.local(u) for u in o_plans[0]["delete"]] == [old]

    # The real runs on the executors: the plan above, deleted there, checked by the oracle.
    r = expire(uri, dist, older_than_ms=0, reference_ms=now)
    assert sorted(r.details["tables"]) == ["s.a", "s.b"] and r.counts["deleted"] == len(plans[0]["delete"])
    assert dist.record["tables.delete"]["where"] == DISTRIBUTED
    assert r.details["tables"]["s.a"]["files_deleted"] == r.details["tables"]["s.a"]["files_to_delete"] > 0
    check(uri, cat, h, "expire on the executors")
    o = orphans(uri, dist)
    assert o.counts["deleted"] == 1 and not os.path.exists(old)
    check(uri, cat, h, "remove-orphans on the executors")


def test_an_expired_append_a_kept_snapshot_covers_is_not_read_and_no_file_is_left_or_lost(tmp_path, monkeypatch):
    """An expired append whose manifests a kept descendant's list still names (counted against
    the snapshot's summary totals) needs no read of its own manifest list: only its list goes.
    Appends before a delete, the delete itself, and appends whose manifests a merge replaced
    are read. The oracle then finds every live file there and every other file gone: nothing
    the unread lists named was left behind, nothing live was deleted."""
    from trinitylake.tables_maintenance.files import TableFiles

    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False, txn_ttl_millis=1000)
    cat = open_catalog(uri)
    h = History(uri)
    cat.create_namespace("s")
    cat.create_table("s.a", schema=SCHEMA)  # fast appends: each keeps every manifest before it
    cat.create_table("s.b", schema=SCHEMA, properties={"commit.manifest-merge.enabled": "true",
                                                       "commit.manifest.min-count-to-merge": "3"})
    for i in range(1, 5):
        cat.load_table("s.a").append(rows([i]))
        cat.load_table("s.b").append(rows([100 + i]))
        h.record(cat)
    cat.load_table("s.a").delete("id == 2")  # drops the second append's manifest
    h.record(cat)
    for i in (5, 6):
        cat.load_table("s.a").append(rows([i]))
        cat.load_table("s.b").append(rows([100 + i]))
        h.record(cat)
    snaps = {n: sorted(O.metadata(cat.load_table(n).metadata_location)["snapshots"], key=lambda s: s["sequence-number"])
             for n in NAMES}
    lists = {n: [O.local(s["manifest-list"]) for s in snaps[n]] for n in NAMES}
    assert [s["summary"]["operation"] for s in snaps["s.a"]] == ["append"] * 4 + ["delete", "append", "append"]
    b_sizes = [len(O.avro_records(x)) for x in lists["s.b"]]  # manifests per list
    expire_lakehouse(uri)
    read: set[str] = set()
    real = TableFiles.read_many

    def spy(self, uris):
        got = real(self, list(uris))
        read.update(O.local(u) for u in got)
        return got

    monkeypatch.setattr(TableFiles, "read_many", spy)
    r = expire(uri, older_than_ms=0, retain_last=1)
    assert r.counts["snapshots_expired"] == 11 and r.counts["deferred"] == 0, r.counts
    a = lists["s.a"]
    # s.a: the first append (its manifest stays named) and the append after the delete (every
    # manifest up to it stays named) are covered; the second append's manifest was dropped by
    # the delete, so the second to fourth appends are read, and the delete is not an append.
    assert {a[0], a[5]}.isdisjoint(read), "a covered append's manifest list was read"
    assert {a[1], a[2], a[3], a[4], a[6]} <= read
    # s.b: the fifth append merged every manifest into one the kept snapshot still names: it is
    # covered; the merges replaced the earlier appends' manifests, so those are read.
    b = lists["s.b"]
    assert b_sizes == [1, 2, 1, 2, 1, 2], "PyIceberg merged elsewhere"
    assert b[4] not in read and {*b[:4], b[5]} <= read
    assert r.counts["deleted_manifest_lists"] == 11 and r.counts["deleted_data_files"] == 1, r.counts
    check(uri, cat, h, "expire with covered appends")
    assert ids(cat.load_table("s.a")) == [1, 3, 4, 5, 6]
    assert ids(cat.load_table("s.b")) == [101, 102, 103, 104, 105, 106]
