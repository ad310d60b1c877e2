"""Every job in every place it can run: on the driver only (`execution=local`, no Spark
session), on the executors of a classic session, and on a Spark Connect server (no
SparkContext, as on Databricks serverless or a shared cluster). Each mode runs on its own
copy of one lakehouse; they must agree with each other and with the independent oracle
(`tests.oracle`: its own live roots, walk and listing)."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from tests.maintenance.helpers import build_history, build_history_on_s3
from tests.oracle import expect as E
from tests.spark.conftest import TTL_MS, job_config, orphan_names, owned_files, plant
from trinitylake.jobs.runner import run_job
from trinitylake.lakehouse import Lakehouse

pytestmark = pytest.mark.spark

MODES = ("local", "classic", "connect")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    base = tmp_path_factory.mktemp("modes")
    lh = Lakehouse.create(str(base / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=5, ops=40)
    time.sleep(TTL_MS / 1000 + 0.2)
    return str(base / "lh")


def _copy(source: str, tmp_path, mode: str) -> Lakehouse:
    dst = str(tmp_path / mode / "lh")
    shutil.copytree(source, dst, copy_function=shutil.copy2)
    return Lakehouse.open(dst, audit=False)


def _run(request, where: str, job: str, lh: Lakehouse, **overrides):
    mode = where
    execution = "local" if mode == "local" else "distributed"
    spark = None
    if mode != "local":
        spark = request.getfixturevalue("connect_spark" if mode == "connect" else "spark")
    cfg = job_config(job, lh.uri, execution=execution, **overrides)
    result = run_job(job, cfg, spark=spark, audit=False)
    assert result.details["spark"]["started"] == (mode != "local"), result.details["spark"]
    if mode != "local":
        assert result.details["spark"]["mode"] == ("connect" if mode == "connect" else "classic")
    places = {p["where"] for p in result.details["execution"].values()}
    # Distributed runs may keep O(1) steps on the driver (an export's validation); nothing of a
    # local run may touch Spark.
    assert places == {"local"} if mode == "local" else execution in places and places <= {"local", execution}, \
        result.details["execution"]
    return result


@pytest.mark.parametrize("mode", MODES)
def test_walk_in_every_mode_equals_the_oracle(request, source, tmp_path, mode):
    lh = _copy(source, tmp_path, mode)
    ref = E.live_walk(E.oracle_of(lh), sizes=False)
    res = _run(request, mode, "walk", lh)
    assert res.counts["reachable"] == len(ref.rows)
    assert res.counts["node_reads"] == res.counts["unique_nodes"] == ref.node_reads


@pytest.mark.parametrize("mode", MODES)
def test_orphans_in_every_mode_delete_exactly_the_orphans(request, source, tmp_path, mode):
    lh = _copy(source, tmp_path, mode)
    names = orphan_names()
    planted = plant(lh.storage, {n: 3600.0 for k, n in names.items() if k != "young"})
    live = E.live_walk(E.oracle_of(lh), sizes=False).paths()
    before = owned_files(lh.storage)
    # Everything here is older than the 1 s TTL: the orphans are exactly the unreferenced files
    # (the planted ones, and node files the history's flushes wrote but never referenced).
    expected = before - live
    assert set(planted.values()) <= expected
    res = _run(request, mode, "orphans", lh)
    after = owned_files(lh.storage)
    assert before - after == expected
    assert after == live & before
    assert res.counts["deleted"] == len(expected) and res.counts["failed"] == 0


@pytest.mark.parametrize("mode", MODES)
def test_expire_in_every_mode_deletes_what_only_expired_versions_reach(request, source, tmp_path, mode):
    lh = _copy(source, tmp_path, mode)
    o = E.oracle_of(lh)
    versions = E.kept_versions(o)
    expected = E.expired_files(o, versions[:-3])
    before = owned_files(lh.storage)
    res = _run(request, mode, "expire", lh, min_versions_to_keep=3, max_version_age=0, clock_skew_margin=0,
               compact_control_table=False)
    after = owned_files(lh.storage)
    assert before - after == expected
    assert E.kept_versions(E.oracle_of(lh))[:3] == versions[-3:]  # then the expire commit's own version
    assert E.live_walk(E.oracle_of(lh), sizes=False).paths() <= after
    assert res.counts["deleted"] == len(expected)


@pytest.mark.parametrize("mode", MODES)
def test_full_export_in_every_mode_copies_the_same_tree(request, source, tmp_path, mode):
    lh = _copy(source, tmp_path, mode)
    version = lh.latest_version()
    target = str(tmp_path / mode / "export")
    _run(request, mode, "export", lh, name="e1", target=target, mode="full")
    files = {os.path.relpath(os.path.join(d, f), target) for d, _, fs in os.walk(target) for f in fs}
    exported = Lakehouse.open(target, audit=False)
    assert exported.latest_version() == version
    walked = E.version_files(E.oracle_for(target), [version])
    assert all("://" not in k for k in walked), "a full export references no source file"
    data = {f for f in files if not f.startswith("_export/") and f != "_latest_hint.txt"}
    assert data == walked
    assert E.version_files(E.oracle_of(lh), [version]) == walked, "the same relative tree as the source"
    assert E.version_contents(target) == E.version_contents(lh.uri, version), "it reads as its source"


@pytest.mark.s3
@pytest.mark.parametrize("mode", MODES)
def test_walk_and_orphans_on_s3_in_every_mode(request, s3_server, s3_lakehouse_uri, s3_storage_options, mode):
    """On the S3 test server: executors (classic or behind Spark Connect) read, list and delete
    through s3fs with the job's storage options, exactly as the driver does."""
    uri, opts = s3_lakehouse_uri, s3_storage_options
    lh = build_history_on_s3(s3_server.client, uri, opts, seed=17, ops=16, order=4, node_max_bytes=4096,
                             txn_ttl_millis=3000)
    names = orphan_names()
    planted = plant(lh.storage, {names["node"]: None, names["def"]: None})
    time.sleep(3.4)  # S3 modification times have whole seconds; the TTL floor is 3 s
    ref = E.live_walk(E.oracle_of(lh), sizes=False)
    walked = _run(request, mode, "walk", lh, storage_options=opts)
    assert walked.counts["reachable"] == len(ref.rows)
    before = owned_files(lh.storage)
    res = _run(request, mode, "orphans", lh, storage_options=opts)
    assert before - owned_files(lh.storage) == set(planted.values())
    assert res.counts["deleted"] == 2
