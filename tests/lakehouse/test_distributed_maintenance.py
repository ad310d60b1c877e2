"""Expire and orphan cleanup (real local Spark) while a distributed transaction is open keep
what it staged, even files older than the age floor; once it is done they are collected."""

from __future__ import annotations

import os
import time

import pytest

from tests.spark.conftest import TTL_MS, owned_files, reach, run
from trinitylake.format.paths import txn_def_path
from trinitylake.lakehouse import Lakehouse
from trinitylake.lakehouse import distributed as DT

pytestmark = pytest.mark.spark
DAY_S = 86_400


def _age(lh: Lakehouse, paths, seconds: float) -> None:
    root = lh.storage.root[len("file://"):]
    t = time.time() - seconds
    for p in paths:
        os.utime(os.path.join(root, p), (t, t))


def test_expire_and_orphans_keep_an_open_distributed_transaction(spark, tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    lh.create_namespace("ns")
    dt = DT.DistributedTransaction.begin(lh)
    dt.stage(lambda t: t.create_table("ns", "early"))
    s1 = dt.state()
    early_def = next(m.value for m in dt._running(s1).node.buffer if m.txn == dt.id)
    lh.create_namespace("n2")
    lh.create_namespace("n3")
    # Everything the transaction wrote so far looks 40 days old (staged long ago, its lease
    # renewed since): only reachability can keep it.
    first_files = {early_def} | {txn_def_path(dt.id, n) for n in range(2)} | {
        dt._read_state(n).running_root_node_file_path for n in range(2)}
    _age(lh, first_files, 40 * DAY_S)
    time.sleep(TTL_MS / 1000 + 0.2)  # versions 0-2 get older than the TTL: expirable
    dt.stage(lambda t: t.create_table("ns", "late"))  # renews the lease, re-pins on version 3
    assert dt.info()["begin_version"] == 3

    exp = run(spark, "expire", lh, min_versions_to_keep=1, max_version_age=0, clock_skew_margin=0)
    assert exp.status == "succeeded" and exp.counts["versions_expired"] == 3
    orph = run(spark, "orphans", lh)
    assert orph.status == "succeeded"
    assert lh.storage.exists(early_def)  # older than the floor, reached through the running root
    # The superseded (and aged) states and running roots are no longer needed: collected.
    assert not any(lh.storage.exists(p) for p in first_files - {early_def})

    v = dt.commit()
    lh = Lakehouse.open(lh.uri, audit=False)
    assert lh.view(version=v).list_tables("ns") == ["early", "late"]
    assert lh.view(version=v).describe_table("ns", "early")["definition"] == early_def

    # Done: what only the transaction used is collected once old enough.
    time.sleep(TTL_MS / 1000 + 0.2)
    again = run(spark, "orphans", lh)
    assert again.status == "succeeded"
    latest = lh.latest_version()
    retained = reach(lh, range(lh.oldest_version(), latest + 1)).paths()
    assert owned_files(lh.storage) == retained
