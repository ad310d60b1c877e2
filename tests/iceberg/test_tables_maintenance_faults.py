"""Table maintenance killed at each of its writing and deleting steps, then run again; and on
S3 (the moto test server). Checked with the tests' own oracle (`tests.iceberg.table_oracle`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.iceberg import table_oracle as O
from tests.iceberg.conftest import SCHEMA, ids, rows
from tests.iceberg.tables_setup import expire_lakehouse, open_catalog, plant
from tests.iceberg.test_tables_maintenance import build, check, expire, files_under, orphans
from trinitylake.lakehouse import Lakehouse
from trinitylake.runs.results import JobResult
from trinitylake.tables_maintenance.expire import ExpireOptions, expire_snapshots
from trinitylake.tables_maintenance.orphans import OrphanOptions, remove_orphans

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def killed(tmp_path, uri: str, args: list[str], op: str, when: str, paths: str | None = None) -> None:
    from tests.support.faults import ENV, FaultSpec, kill_pids

    log_dir = str(tmp_path / "faults")
    spec = FaultSpec(kill_op=op, kill_nth=1, kill_when=when, kill_paths=paths, log_dir=log_dir)
    env = {**os.environ, ENV: spec.to_json(), "PYTHONPATH": os.pathsep.join((ROOT, os.environ.get("PYTHONPATH", "")))}
    proc = subprocess.run(
        [sys.executable, "-m", "trinitylake", "--lakehouse", uri, "--no-audit", "tables", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert len(kill_pids(log_dir)) == 1


def test_an_expire_killed_before_its_commit_then_mid_delete_is_finished_by_a_rerun(tmp_path):
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False, txn_ttl_millis=1000)
    cat, h = build(uri)
    expire_lakehouse(uri)
    latest = Lakehouse.open(uri, audit=False).latest_version()
    before = files_under(uri)
    args = ["expire-snapshots", "--older-than", "0s", "--unsafe-min-age"]
    # Killed with its candidates recorded, before its commit: no version, nothing deleted.
    killed(tmp_path / "k1", uri, args, "write", "after", r"tables-state/pending\.json$")
    assert Lakehouse.open(uri, audit=False).latest_version() == latest and not before - files_under(uri)
    # Killed after its commit, half of its first delete batch done.
    killed(tmp_path / "k2", uri, args, "delete", "half")
    assert Lakehouse.open(uri, audit=False).latest_version() == latest + 1 and before - files_under(uri)
    r = expire(uri, older_than_ms=0)
    assert r.counts["snapshots_expired"] == 0 and r.counts["deleted"] > 0
    check(uri, cat, h, "re-run after kills before the commit and mid delete")
    assert ids(cat.load_table("s.a")) == [10, 11, 12]


def test_remove_orphans_killed_mid_delete_is_finished_by_a_rerun(tmp_path):
    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False)
    cat, h = build(uri)
    loc = O.local(cat.load_table("s.b").metadata.location)
    old = [plant(f"{loc}/data", f"orphan-{i}.parquet", 10) for i in range(6)]
    killed(tmp_path, uri, ["remove-orphans"], "delete", "half")
    assert 0 < sum(os.path.exists(p) for p in old) < len(old)
    r = orphans(uri)
    assert r.counts["deleted"] == r.counts["candidates"] > 0 and not any(os.path.exists(p) for p in old)
    check(uri, cat, h, "remove-orphans re-run after a kill")


@pytest.mark.s3
def test_tables_on_s3_expire_defer_and_orphans(s3_server, s3_storage_options, monkeypatch):
    monkeypatch.setenv("TLAKE_S3_ENDPOINT_URL", s3_server.endpoint_url)
    bucket = s3_server.create_bucket()
    uri = f"s3://{bucket}/lh"
    io = {
        "s3.endpoint": s3_server.endpoint_url,
        "s3.access-key-id": s3_server.key,
        "s3.secret-access-key": s3_server.secret,
        "s3.region": s3_server.region,
    }
    store = {f"lakehouse.storage.{k}": v for k, v in s3_storage_options.items()}
    Lakehouse.create(uri, storage_options=s3_storage_options, audit=False, txn_ttl_millis=1000)
    cat = open_catalog(uri, **io, **store)
    cat.create_namespace("s")
    t = cat.create_table("s.a", schema=SCHEMA)
    want: dict[int, list[int]] = {}
    for step in ([1, 2], [3], [4]):
        t.append(rows(step))
        t = cat.load_table("s.a")
        want[Lakehouse.open(uri, storage_options=s3_storage_options, audit=False).latest_version()] = ids(t)
    t.overwrite(rows([7]))
    first_data = {
        f.file.file_path
        for f in cat.load_table("s.a").scan(snapshot_id=t.metadata.snapshots[0].snapshot_id).plan_files()
    }

    def keys() -> set[str]:
        pages = s3_server.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="lh/warehouse/")
        return {f"s3://{bucket}/{o['Key']}" for p in pages for o in p.get("Contents", [])}

    def run_expire() -> JobResult:
        lh = Lakehouse.open(uri, storage_options=s3_storage_options, audit=False)
        return expire_snapshots(lh, ExpireOptions(older_than_ms=0), JobResult("e", f"e{time.time_ns()}", uri))

    r1 = run_expire()
    assert r1.counts["snapshots_expired"] == 4 and r1.counts["deferred"] > 0 and first_data <= keys()
    for v, expect in want.items():  # every version is retained and still reads
        assert ids(cat.at_version(v).load_table("s.a")) == expect
    expire_lakehouse(uri, storage=s3_storage_options)
    r2 = run_expire()
    assert r2.counts["deleted"] >= r1.counts["deferred"] and not first_data & keys()
    assert ids(cat.load_table("s.a")) == [7]

    orphan = f"lh/warehouse/s/a/data/orphan-{time.time_ns()}.parquet"
    s3_server.client.put_object(Bucket=bucket, Key=orphan, Body=b"PAR1junkPAR1")
    lh = Lakehouse.open(uri, storage_options=s3_storage_options, audit=False)
    four_days_on = int(time.time() * 1000) + 4 * 86400_000  # S3 cannot back-date a file: the clock moves instead
    o = remove_orphans(lh, OrphanOptions(reference_ms=four_days_on), JobResult("o", "o1", uri))
    assert o.counts["deleted"] == 1 and f"s3://{bucket}/{orphan}" not in keys()
    assert ids(cat.load_table("s.a")) == [7]


@pytest.mark.s3
def test_a_live_file_named_through_another_bucket_is_a_prefix_mismatch(s3_server, s3_storage_options, monkeypatch):
    import pyarrow.parquet as pq
    import s3fs

    from trinitylake.errors import UnsafeOperationError

    monkeypatch.setenv("TLAKE_S3_ENDPOINT_URL", s3_server.endpoint_url)
    bucket, alias = s3_server.create_bucket(), s3_server.create_bucket()
    uri = f"s3://{bucket}/lh"
    io = {
        "s3.endpoint": s3_server.endpoint_url,
        "s3.access-key-id": s3_server.key,
        "s3.secret-access-key": s3_server.secret,
        "s3.region": s3_server.region,
    }
    store = {f"lakehouse.storage.{k}": v for k, v in s3_storage_options.items()}
    Lakehouse.create(uri, storage_options=s3_storage_options, audit=False)
    cat = open_catalog(uri, **io, **store)
    cat.create_namespace("s")
    t = cat.create_table("s.a", schema=SCHEMA)
    # The same file under the table's location and under another bucket (an alias of the same
    # store, as far as the table knows); the table names it through the alias.
    fs = s3fs.S3FileSystem(
        key=s3_server.key, secret=s3_server.secret, client_kwargs={"endpoint_url": s3_server.endpoint_url}
    )
    rel = "lh/warehouse/s/a/data/aliased.parquet"
    for b in (bucket, alias):
        with fs.open(f"{b}/{rel}", "wb") as f:
            pq.write_table(rows([1, 2]), f)
    t.add_files([f"s3://{alias}/{rel}"])
    lh = Lakehouse.open(uri, storage_options=s3_storage_options, audit=False)
    later = int(time.time() * 1000) + 4 * 86400_000  # S3 cannot back-date a file

    def run(**kw):
        return remove_orphans(lh, OrphanOptions(reference_ms=later, **kw), JobResult("o", f"o{time.time_ns()}", uri))

    with pytest.raises(UnsafeOperationError, match="another scheme or authority"):
        run()
    assert fs.exists(f"{bucket}/{rel}")
    assert run(equal_authorities={alias: bucket}).counts["candidates"] == 0  # the same store: live
    assert run(prefix_mismatch_mode="ignore").counts["mismatched"] == 1 and fs.exists(f"{bucket}/{rel}")
    assert run(prefix_mismatch_mode="delete").counts["deleted"] == 1 and not fs.exists(f"{bucket}/{rel}")
    assert ids(cat.load_table("s.a")) == [1, 2]  # read through the alias
