"""Orphan cleanup guards: the age floor and references through another scheme or authority."""

from __future__ import annotations

import json
import time

import pytest

from tests.spark.conftest import TTL_MS, orphan_names, owned_files, plant, run
from trinitylake.errors import UnsafeOperationError
from trinitylake.format.paths import hashed_path
from trinitylake.lakehouse import Lakehouse
from trinitylake.spark import runner
from trinitylake.spark.runner import JobFailedError

pytestmark = pytest.mark.spark
DAY_S = 86_400


def test_an_age_below_the_transaction_ttl_is_refused(spark, tmp_path, capsys):
    uri = str(tmp_path / "lh")
    lh = Lakehouse.create(uri, audit=False, txn_ttl_millis=3_600_000)
    lh.create_namespace("a")
    planted = plant(lh.storage, {orphan_names()["node"]: 40 * DAY_S})
    code = runner.main("orphans", ["--lakehouse", uri, "--older-than", "10m"], spark=spark)
    assert code == 1
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["status"] == "failed" and "UnsafeOperationError" in out["error"] and "1h" in out["error"]
    assert lh.storage.exists(planted[orphan_names()["node"]])
    # A bad value is a configuration error (exit 2), before anything runs.
    assert runner.main("orphans", ["--lakehouse", uri, "--older-than", "soon"], spark=spark) == 2
    assert runner.main("orphans", ["--lakehouse", uri, "--prefix-mismatch", "delete"], spark=spark) == 2


def test_a_reference_through_another_authority_stops_the_cleanup(spark, tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    lh.create_namespace("a")
    lh.create_table("a", "t1")
    # A definition file of this lakehouse that a table references as s3://alias/<root path>/...
    aliased = hashed_path("a-t2-00000000-0000-4000-8000-0000000a11a5.binpb")
    root_path = lh.storage.root[len("file://"):]
    txn = lh.begin()
    txn.create_table("a", "t2")
    key = txn.codec.table_key("a", "t2")
    lh.storage.write(aliased, lh.storage.read(txn.writes[key]))
    txn.writes[key] = f"s3://alias-bucket{root_path}/{aliased}"
    txn.commit()
    other = plant(lh.storage, {orphan_names()["node"]: 40 * DAY_S})[orphan_names()["node"]]
    time.sleep(TTL_MS / 1000 + 0.2)
    import os

    os.utime(os.path.join(root_path, aliased), (time.time() - 40 * DAY_S,) * 2)
    files = owned_files(lh.storage)
    with pytest.raises(JobFailedError) as err:
        run(spark, "orphans", lh)
    assert isinstance(err.value.__cause__, UnsafeOperationError)
    assert "another scheme or authority" in str(err.value) and aliased in str(err.value)
    assert owned_files(lh.storage) == files, "nothing is deleted"
    res = run(spark, "orphans", lh, prefix_mismatch="ignore")
    assert res.counts["prefix_mismatch"] == 1
    assert lh.storage.exists(aliased) and not lh.storage.exists(other)
