"""Orphan cleanup: the age floor, references through another scheme or authority, and the
same candidates wherever the phases run (driver threads, executors, a listing handed over
midway, Spark Connect), equal to what the independent oracle (`tests.oracle`) expects."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from tests.oracle import expect as E
from tests.spark.conftest import TTL_MS, job_config, orphan_names, owned_files, plant, run
from trinitylake.errors import UnsafeOperationError
from trinitylake.format.paths import hashed_path
from trinitylake.jobs import runner
from trinitylake.jobs.orphans.listing import list_prefix
from trinitylake.jobs.runner import JobFailedError, run_job
from trinitylake.lakehouse import Lakehouse
from trinitylake.spark.output import read_parquet_table
from trinitylake.storage import Storage

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


def _aliased_lakehouse(tmp_path) -> tuple[Lakehouse, str, str]:
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
    os.utime(os.path.join(root_path, aliased), (time.time() - 40 * DAY_S,) * 2)
    return lh, aliased, other


@pytest.mark.parametrize("execution", ["auto", "distributed"])
def test_a_reference_through_another_authority_stops_the_cleanup(spark, tmp_path, execution):
    lh, aliased, other = _aliased_lakehouse(tmp_path)
    files = owned_files(lh.storage)
    with pytest.raises(JobFailedError) as err:
        run(spark, "orphans", lh, execution=execution)
    assert isinstance(err.value.__cause__, UnsafeOperationError)
    assert "another scheme or authority" in str(err.value) and aliased in str(err.value)
    assert owned_files(lh.storage) == files, "nothing is deleted"
    res = run(spark, "orphans", lh, prefix_mismatch="ignore", execution=execution)
    assert res.counts["prefix_mismatch"] == 1
    assert lh.storage.exists(aliased) and not lh.storage.exists(other)


# ---- same candidates wherever the phases run ---------------------------------------------------
@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A lakehouse with dropped tables (unreachable but young, then aged), old and young
    planted orphans, and files the format does not own."""
    from tests.maintenance.helpers import build_history

    base = tmp_path_factory.mktemp("orphans-modes")
    lh = Lakehouse.create(str(base / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=11, ops=40)
    names = {f"node-00000000-0000-4000-8000-{i:012d}.arrow": 3600.0 for i in range(60)}
    names.update({f"m-x-00000000-0000-4000-8000-{i:012d}.binpb": (None if i % 2 else 7200.0) for i in range(20)})
    names.update({"notes/readme.txt": 3600.0, "_control/x.arrow": 3600.0})
    plant(lh.storage, names)
    root = lh.storage.root[len("file://"):]
    for i in range(3):  # old files that are not format-owned, inside hash folders
        p = os.path.join(root, hashed_path(f"node-{i}.arrow").rsplit("/", 1)[0], f"foreign-{i}.txt")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(b"x")
        os.utime(p, (time.time() - 3600,) * 2)
    time.sleep(TTL_MS / 1000 + 0.2)
    return str(base / "lh")


def _oracle(lh: Lakehouse, cutoff_s: float) -> set[str]:
    """By the oracle: format-owned, older than the cutoff, reached by no live root (its own
    choice of live roots, its own walk and listing)."""
    return E.orphans(E.oracle_of(lh), cutoff_s)


def _copy(source: str, tmp_path, name: str) -> Lakehouse:
    dst = str(tmp_path / name / "lh")
    shutil.copytree(source, dst, copy_function=shutil.copy2)
    return Lakehouse.open(dst, audit=False)


def _run(spark, lh: Lakehouse, **overrides):
    """Run the job with a 30 min age floor: the planted files of an hour or two are old, the
    lakehouse's own (just built) and the "young" planted ones are not."""
    reference = int(time.time() * 1000)
    cfg = job_config("orphans", lh.uri, older_than="30m", reference_time=reference, **overrides)
    res = run_job("orphans", cfg, spark=spark, audit=False)
    cands = read_parquet_table(res.output_location)
    return res, set(cands.column("path").to_pylist()), (reference - 1_800_000) / 1000.0


@pytest.mark.parametrize("placement", [
    {"execution": "local"},
    {"execution": "distributed"},
    {"execution": "auto"},
    # A listing (and walk) past the driver's bound hands the rest over to the executors.
    {"execution": "auto", "driver_max_rows": 40, "threads": 2, "local_threads": 2},
])
def test_candidates_equal_the_oracle_wherever_the_phases_run(spark, source, tmp_path, placement):
    lh = _copy(source, tmp_path, "_".join(f"{v}" for v in placement.values()))
    dry, cands, cutoff_s = _run(spark, lh, dry_run=True, **placement)
    oracle = _oracle(lh, cutoff_s)
    assert len(oracle) == 70  # 60 old nodes, 10 old definitions
    assert cands == oracle
    assert dry.counts["candidates"] == len(oracle) and dry.counts["deleted"] == 0
    assert dry.counts["listed_not_owned"] >= 3 and dry.counts["too_young"] >= 10
    assert dry.counts["listed"] == dry.counts["listed_owned"] + dry.counts["listed_not_owned"]
    where = {k: v["where"] for k, v in dry.details["execution"].items()}
    if placement["execution"] == "local":
        assert set(where.values()) == {"local"}, where
    elif placement["execution"] == "distributed":
        assert set(where.values()) == {"distributed"}, where
    elif "driver_max_rows" in placement:
        assert where["list.prefixes"] == "mixed", where
    else:
        assert set(where.values()) == {"local"}, where
    plan = json.loads(lh.storage.read(f"_maintenance/orphans/{dry.run_id}/plan.json"))
    assert plan["candidates"]["files"] == len(oracle)
    assert owned_files(lh.storage) >= oracle, "a dry run deletes nothing"

    before = owned_files(lh.storage)
    res, deleted, _ = _run(spark, lh, **placement)
    assert res.counts["deleted"] == len(oracle) == len(deleted) and res.counts["failed"] == 0
    assert before - owned_files(lh.storage) == oracle
    again, _, _ = _run(spark, lh, **placement)
    assert again.counts["candidates"] == 0 and again.counts["deleted"] == 0


def test_the_same_candidates_under_spark_connect(connect_spark, source, tmp_path):
    lh = _copy(source, tmp_path, "connect")
    dry, cands, cutoff_s = _run(connect_spark, lh, dry_run=True, execution="distributed")
    assert dry.details["spark"]["mode"] == "connect"
    assert cands == _oracle(lh, cutoff_s)
    res, _, _ = _run(connect_spark, lh, execution="distributed")
    assert res.counts["deleted"] == len(cands) and res.counts["failed"] == 0
    assert not (owned_files(lh.storage) & cands)


def test_a_walk_that_fails_refuses_the_run_in_both_placements(spark, source, tmp_path):
    for execution in ("local", "distributed"):
        lh = _copy(source, tmp_path, f"broken-{execution}")
        before = owned_files(lh.storage)
        # Remove one node file that a retained version reaches.
        node = sorted(E.live_walk(E.oracle_of(lh), sizes=False).paths("node"))[0]
        lh.storage.delete([node])
        with pytest.raises(JobFailedError) as err:
            _run(spark, lh, execution=execution)
        assert isinstance(err.value.__cause__, UnsafeOperationError), err.value
        assert owned_files(lh.storage) == before - {node}, "nothing is deleted"


def test_the_fast_local_listing_and_delete_paths_match_storage(tmp_path):
    s = Storage(str(tmp_path / "lh"))
    keys = [hashed_path(f"node-{i}.arrow") for i in range(20)] + ["0000/0000/weird name.txt"]
    for k in keys:
        s.write(k, b"x")
    prefix = "/".join(keys[0].split("/")[:2])
    paths, sizes, mtimes = list_prefix(s, prefix)
    want = {f.path: (f.size, f.mtime) for f in s.list(prefix)}
    assert dict(zip(paths, zip(sizes, mtimes, strict=True), strict=True)) == want
    # Every local storage unlinks relative to each open folder (LocalBackend.delete).
    fast = s
    assert fast.delete(keys) == [] and not any(s.exists(k) for k in keys)
    # Missing files and folders count as deleted; what cannot be deleted is reported.
    assert fast.delete([keys[0], "1111/1111/1111/11111111-gone.arrow"]) == []
    failed = fast.delete([prefix])
    assert [p for p, _ in failed] == [prefix] and os.path.isdir(os.path.join(str(tmp_path / "lh"), prefix))


def test_more_candidates_than_max_candidates_fail_both_runs_and_delete_nothing(spark, source, tmp_path):
    """The gate the Airflow DAG puts on the dry run (and the real run): above the limit the run
    fails with the candidate list persisted, and nothing is deleted."""
    lh = _copy(source, tmp_path, "gate")
    before = owned_files(lh.storage)
    for dry_run in (True, False):
        with pytest.raises(JobFailedError) as err:
            _run(spark, lh, dry_run=dry_run, max_candidates=69)
        cause = err.value.__cause__
        assert isinstance(cause, UnsafeOperationError) and "70 candidates exceed max_candidates 69" in str(cause)
        listing = read_parquet_table(err.value.result.output_location)
        assert listing.num_rows == 70  # the candidates stay for a person to inspect
        assert owned_files(lh.storage) == before
    res, deleted, _ = _run(spark, lh, max_candidates=70)  # at the limit: the run goes ahead
    assert res.counts["deleted"] == 70 == len(deleted)
