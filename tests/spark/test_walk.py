"""The distributed and local walks against the independent oracle (`tests.oracle`: its own
choice of live roots, its own walk with depth, first_version and sizes), and the walk job."""

from __future__ import annotations

import json
import os

import pytest
from chispa import assert_df_equality

from tests.format.oracle import root_name
from tests.maintenance.helpers import build_history, oracle_reads, write_minimal_export
from tests.oracle import expect as E
from tests.spark.conftest import owned_files
from trinitylake.control import ControlTable
from trinitylake.errors import CorruptNodeError
from trinitylake.jobs import runner
from trinitylake.spark.execution import Execution, Limits
from trinitylake.spark.output import read_parquet_table
from trinitylake.treewalk.walk_rows import OUTPUT_DDL
from trinitylake.treewalk.walker import walk_reachable, walk_reachable_with_stats

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def walked_lakehouse(tmp_path_factory):
    """A history with rollbacks, namespace drops, a multi-level tree and a minimal export."""
    from trinitylake.lakehouse import Lakehouse

    base = tmp_path_factory.mktemp("walk")
    lh = Lakehouse.create(str(base / "lh"), order=4, node_max_bytes=4096, audit=False)
    build_history(lh, seed=11, ops=60)
    write_minimal_export(lh, lh.latest_version() - 4, str(base / "exports" / "e1"), "e1")
    return lh


def _expected(lh) -> E.Walk:
    """What the oracle says every live root reaches, with sizes, depths and first versions."""
    return E.live_walk(E.oracle_of(lh))


def _roots(lh) -> list[tuple[int, str]]:
    """The roots the job is given: the oracle's live roots (paths relative to the lakehouse
    root inside it, as a caller names them; full URIs elsewhere)."""
    o = E.oracle_of(lh)
    return [(v, o.relative(u) or u) for v, u in E.live_entries(o)]


def test_distributed_walk_equals_the_oracle(spark, walked_lakehouse):
    lh = walked_lakehouse
    exports = E.export_roots(E.oracle_of(lh))
    assert exports, "the export root is live"
    ref = _expected(lh)
    reached, st = walk_reachable_with_stats(spark, lh, _roots(lh), batch_size=4)
    df = reached.rows.native
    assert reached.rows.where == "distributed" and st.where == "distributed"
    try:
        expected = spark.createDataFrame(ref.tuples(), OUTPUT_DDL)
        assert_df_equality(df, expected, ignore_row_order=True, ignore_nullable=True)
        # Every node file (shared by many versions, at different depths) was read once.
        assert st.node_reads == st.unique_nodes == ref.node_reads
        assert st.read_ratio == 1.0
        assert st.files == ref.counts()
        assert len(st.levels) >= 3
        # Batches: ceil(n / batch_size) tasks per level (at least one per core while nodes
        # last), never more than 4 x default parallelism (local[2] -> 8).
        for level in st.levels:
            assert level["tasks"] == max(min(-(-level["frontier"] // 4), 8), min(level["frontier"], 2))
        assert max(level["tasks"] for level in st.levels) == 8, "the biggest level hits the cap"
        # The source files of the minimal export are reachable; the export's root is outside.
        roots = {r["path"] for r in df.filter("kind = 'root'").collect()}
        assert exports["e1"] in roots
        # Nothing has expired: the walk reaches exactly what the oracle reads to list every version.
        inside = {r["path"] for r in df.filter("path not like '%://%'").select("path").collect()}
        assert inside <= owned_files(lh.storage)
        nodes, defs = oracle_reads(lh)
        assert {r["path"] for r in df.filter("kind in ('node', 'root')").collect()} - {exports["e1"]} == nodes
        assert defs <= inside
    finally:
        reached.release()


def test_local_walk_equals_the_oracle_without_starting_spark(walked_lakehouse):
    lh = walked_lakehouse
    ref = _expected(lh)
    ex = Execution("local", session_factory=lambda: pytest.fail("a local walk must not start Spark"))
    reached, st = walk_reachable_with_stats(ex, lh, _roots(lh))
    assert reached.rows.where == "local" and st.where == "local" and not ex.started
    got = sorted(zip(*(reached.rows.to_table().column(c).to_pylist() for c in reached.rows.to_table().column_names), strict=True))
    assert got == ref.tuples()
    assert st.node_reads == st.unique_nodes == ref.node_reads
    assert st.files == ref.counts()
    assert ex.record["walk.read_nodes"]["where"] == "local"


def test_a_walk_that_outgrows_the_driver_hands_over_to_the_executors(spark, walked_lakehouse):
    """auto: levels start on the driver; once a level is bigger than local_max_items the rest
    of the walk runs on the executors, and the result is the same."""
    lh = walked_lakehouse
    o = E.oracle_of(lh)
    latest = E.latest_version(o)
    roots = [(latest, root_name(latest))]  # one root: one node at depth 0, several below it
    ref = E.walk(o, [(latest, f"{o.root}/{root_name(latest)}")])
    ex = Execution("auto", spark=spark, limits=Limits(local_max_items=1))
    reached, st = walk_reachable_with_stats(ex, lh, roots, batch_size=4)
    try:
        wheres = [lv["where"] for lv in st.levels]
        assert wheres[0] == "local" and "distributed" in wheres, wheres
        assert wheres == sorted(wheres, key=lambda w: w == "distributed"), "one hand-over, never back"
        got = sorted(tuple(r) for r in reached.rows.native.select("path", "kind", "size", "depth", "first_version").collect())
        assert got == ref.tuples()
        assert st.node_reads == st.unique_nodes == ref.node_reads
    finally:
        reached.release()


def test_driver_row_bound_moves_the_walk_to_the_executors(spark, walked_lakehouse):
    lh = walked_lakehouse
    roots = _roots(lh)
    ex = Execution("auto", spark=spark, limits=Limits(driver_max_rows=len(roots) + 5))
    reached, st = walk_reachable_with_stats(ex, lh, roots, batch_size=4)
    try:
        assert reached.rows.where == "distributed"
        assert st.total_files == len(_expected(lh).rows)
    finally:
        reached.release()


def test_walk_job_writes_the_listing_summary_and_audit_rows(spark, walked_lakehouse, capsys):
    lh = walked_lakehouse
    uri = lh.uri
    code = runner.main("walk", ["--lakehouse", uri, "--batch-size", "8", "--run-id", "walk-test-1",
                                "--execution", "distributed"], spark=spark)
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["status"] == "succeeded" and result["run_id"] == "walk-test-1"
    assert result["counts"]["node_reads"] == result["counts"]["unique_nodes"]
    listing = spark.read.parquet(result["output_location"])
    assert listing.count() == result["counts"]["reachable"]
    assert sorted(listing.columns) == ["depth", "first_version", "kind", "path", "size"]
    assert result["output_location"].endswith("/_maintenance/walk/walk-test-1")
    summary = json.loads(lh.storage.read("_maintenance/walk/walk-test-1/_summary.json"))
    assert summary["stats"]["read_ratio"] == 1.0 and summary["exports"] == E.export_roots(E.oracle_of(lh))
    assert summary["self_contained_exports"] == {}, "the minimal export is pinned: walked"
    assert result["details"]["exports"]["e1"]["walked"] is True
    rows = [r for r in ControlTable(uri + "/_control").records() if r.txn_id == "walk-test-1"]
    assert [r.record_type for r in rows] == ["begin", "read"]
    assert rows[1].metrics["files_reachable"] == result["counts"]["reachable"]


def test_a_corrupt_node_fails_the_walk_clearly(spark, make_lakehouse):
    lh = make_lakehouse()
    build_history(lh, seed=2, ops=14)
    roots = _roots(lh)
    victim = sorted(_expected(lh).paths("node"))[0]
    path = lh.storage.root[len("file://"):] + "/" + victim
    with open(path, "wb") as f:
        f.write(b"ARROW1 but not really")
    with pytest.raises(CorruptNodeError, match=victim.rsplit("-", 1)[-1]):
        walk_reachable(spark, lh, roots)
    for mode in ("local", "distributed"):
        code = runner.main("walk", ["--lakehouse", lh.uri, "--run-id", "walk-corrupt", "--execution", mode],
                           spark=spark)
        assert code == 1
    assert not os.path.exists(lh.storage.root[len("file://"):] + "/_maintenance/walk/walk-corrupt")


@pytest.mark.s3
def test_listings_on_an_object_store_are_written_by_executors(spark, s3_bucket, s3_storage_options):
    from trinitylake.spark.output import write_parquet

    df = spark.createDataFrame([(f"p{i}", "node", i, 1, 3) for i in range(50)], OUTPUT_DDL).repartition(3)
    uri = f"{s3_bucket}/out/listing"
    assert write_parquet(df, uri, s3_storage_options, rows=50) == uri
    table = read_parquet_table(uri, s3_storage_options)
    assert sorted(table.column("path").to_pylist()) == sorted(f"p{i}" for i in range(50))
    # A re-run replaces the listing instead of adding to it.
    write_parquet(df.limit(5), uri, s3_storage_options, rows=5)
    assert read_parquet_table(uri, s3_storage_options).num_rows == 5


def test_a_local_walk_sized_by_the_second_process_equals_the_oracle(walked_lakehouse, monkeypatch):
    from trinitylake.storage import background_sizes as BS
    from trinitylake.treewalk import reach as R

    lh = walked_lakehouse
    ref = _expected(lh)
    answers: list = []
    finish = BS.BackgroundSizes.finish

    def spy(self, n):
        answers.append(finish(self, n))
        return answers[-1]

    monkeypatch.setattr(BS, "START_AFTER_KEYS", 1)  # start the child at once, this walk is small
    monkeypatch.setattr(BS.BackgroundSizes, "finish", spy)
    monkeypatch.setattr(R, "sizes_of", lambda *a, **k: pytest.fail("sized in process, not by the child"))
    ex = Execution("local", session_factory=lambda: pytest.fail("a local walk must not start Spark"))
    reached, st = walk_reachable_with_stats(ex, lh, _roots(lh))
    assert len(answers) == 1 and answers[0] is not None and len(answers[0]) > 10
    got = sorted(zip(*(reached.rows.to_table().column(c).to_pylist() for c in reached.rows.to_table().column_names), strict=True))
    assert got == ref.tuples()


@pytest.mark.s3
def test_a_distributed_walk_on_s3_sizes_every_definition_from_listings(spark, s3_server, s3_bucket):
    """On the executors, on S3, with a pinned partial export: the hashed definitions are sized
    from listings of the hash folders, the lakehouse definitions at the root and the export's
    own files (absolute keys) from listings of their folders: the walk, sizes included, is the
    oracle's, and no HEAD (captured by a proxy in front of the server) names a file it sized."""
    from tests.maintenance.helpers import build_history_on_s3
    from tests.support.jobs import run_local
    from tests.support.recording_proxy import RecordingProxy
    from trinitylake.lakehouse import Lakehouse

    bucket = s3_bucket.removeprefix("s3://")
    uri, opts = f"{s3_bucket}/wh/lh", s3_server.storage_options
    lh = build_history_on_s3(s3_server.client, uri, opts, seed=47, ops=16, order=4, node_max_bytes=4096)
    part = run_local("export", uri, storage_options=opts, name="p1", target=f"{s3_bucket}/wh/exports/p1",
                     version=lh.latest_version() - 1, mode="partial", depth=0)
    assert part.details["pinned_version"] is not None
    ref = E.live_walk(E.oracle_of(lh))
    sized = {k for k, r in ref.rows.items() if r.kind in ("definition", "lakehouse_def")}
    assert any("://" in k for k in sized) and any("/" not in k for k in sized)
    roots = _roots(lh)
    with RecordingProxy(int(s3_server.endpoint_url.rsplit(":", 1)[1])) as proxy:
        plh = Lakehouse.open(uri, storage_options={**opts, "endpoint_url": proxy.endpoint_url}, audit=False)
        proxy.clear()
        reached, st = walk_reachable_with_stats(Execution("distributed", spark=spark), plh, roots, batch_size=4)
        try:
            assert st.where == "distributed"
            got = sorted(tuple(r) for r in reached.rows.native.select("path", "kind", "size", "depth", "first_version").collect())
        finally:
            reached.release()
        heads = {r.key for r in proxy.requests if r.method == "HEAD"}
    assert got == ref.tuples()
    assert not heads & {k.removeprefix(f"s3://{bucket}/") if "://" in k else f"wh/lh/{k}" for k in sized}, heads
    assert proxy.count("GET") > 0
