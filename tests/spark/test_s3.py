"""The jobs on the local S3 server (moto): executors read, list, write and delete through s3fs."""

from __future__ import annotations

import time

import pytest

from tests.maintenance.helpers import build_history_on_s3, snapshot
from tests.spark.conftest import orphan_names, owned_files, plant, reach, run
from trinitylake.format.paths import root_name
from trinitylake.lakehouse import Lakehouse
from trinitylake.spark.output import read_parquet_table

pytestmark = [pytest.mark.spark, pytest.mark.s3]
TTL_MS = 3000  # S3 reports modification times in whole seconds


def test_expire_and_orphans_on_s3(spark, s3_server, s3_lakehouse_uri, s3_storage_options):
    uri, opts = s3_lakehouse_uri, s3_storage_options
    lh = build_history_on_s3(s3_server.client, uri, opts, seed=31, ops=24, order=4, node_max_bytes=4096,
                             txn_ttl_millis=TTL_MS)
    names = orphan_names()
    old = plant(lh.storage, {names["node"]: None, names["def"]: None, "notes/README.txt": None})
    time.sleep(TTL_MS / 1000 + 0.4)
    latest = lh.latest_version()
    keep_from = latest - 3
    expired = list(range(0, keep_from))
    must_go = reach(lh, expired).paths() - reach(lh, range(keep_from, latest + 1)).paths()
    before = snapshot(lh, range(keep_from, latest + 1))
    before_files = owned_files(lh.storage)

    res = run(spark, "expire", uri, storage_options=opts, min_versions_to_keep=4, max_version_age=0,
              clock_skew_margin=0)
    assert res.status == "succeeded" and res.counts["versions_expired"] == len(expired)
    lh = Lakehouse.open(uri, storage_options=opts, audit=False)
    after = owned_files(lh.storage)
    assert before_files - after == must_go
    assert after - before_files == {root_name(latest + 1), lh.load_root(latest + 1).def_path}
    assert snapshot(lh, range(keep_from, latest + 1)) == before

    young = plant(lh.storage, {names["young"]: None})[names["young"]]
    # Both runs measure ages from the same reference time (as Airflow passes the logical date),
    # so the young file is still young for the second run.
    reference = int(time.time() * 1000)
    dry = run(spark, "orphans", uri, storage_options=opts, dry_run=True, reference_time=reference)
    listed = set(read_parquet_table(dry.output_location, opts).column("path").to_pylist())
    assert {old[names["node"]], old[names["def"]]} <= listed and young not in listed
    assert owned_files(lh.storage) == after | {young}, "a dry run deletes nothing"
    res = run(spark, "orphans", uri, storage_options=opts, reference_time=reference)
    assert res.counts["deleted"] == len(listed)
    final = owned_files(lh.storage)
    assert final == (after | {young}) - listed
    assert reach(lh, range(keep_from, lh.latest_version() + 1)).paths() <= final
    assert lh.storage.exists("notes/README.txt")
    assert snapshot(lh, range(keep_from, latest + 1)) == before
