"""Exports between local storage and the local S3 server, both directions."""

from __future__ import annotations

import pytest

from trinitylake.format.paths import HINT_FILE, root_name
from trinitylake.storage import Storage

from .conftest import contents, export_contents, latest_def, pointers_outside, populate, reachable, target_files

pytestmark = [pytest.mark.spark, pytest.mark.s3]


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """Readers that build their own S3 storage (snapshot reads, foreign pointers) find the server."""
    monkeypatch.setenv("TLAKE_S3_ENDPOINT_URL", s3_server.endpoint_url)
    return s3_server


@pytest.mark.parametrize("execution", ["local", "distributed"])
def test_local_source_to_s3_target_full_and_minimal(run, make_lakehouse, s3_bucket, s3_storage_options, s3_env,
                                                    execution):
    lh = make_lakehouse()
    v = populate(lh, tables=5)
    want = contents(lh.uri, v, lh.storage.options)
    target = f"{s3_bucket}/exports/full"

    r = run(lh, target, "full1", target_storage_options=s3_storage_options, execution=execution, batch_size=8)
    assert r.details["execution"]["export.copy"]["where"] == execution

    tgt = Storage(target, s3_storage_options)
    assert set(target_files(tgt)) == reachable(lh, v).paths() | {HINT_FILE}
    assert r.counts["copied"] == r.counts["planned"] == r.counts["verified"]
    assert pointers_outside(target, lh, s3_storage_options) == 0
    assert contents(target, None, s3_storage_options) == want
    assert sorted(p for p in target_files(tgt) if p.endswith(".arrow") and p.startswith("_")) == [root_name(v)]
    assert latest_def(lh).exported_snapshots["full1"] == f"{s3_bucket}/exports/full/{root_name(v)}"
    assert export_contents(lh, "full1", s3_storage_options) == want

    # Minimal: the root on S3, everything else read from the local source by absolute URI.
    lh.create_table("ns0", "after")
    r = run(lh, f"{s3_bucket}/exports/min", "min1", mode="minimal", target_storage_options=s3_storage_options,
            execution=execution)
    assert r.counts["planned"] == 2 and r.details["pinned_version"] == lh.latest_version() - 1
    assert export_contents(lh, "min1", s3_storage_options) == contents(lh.uri, r.details["version"])


def test_s3_source_to_local_target_partial_and_full(run, make_lakehouse, s3_bucket, s3_storage_options, s3_env,
                                                     tmp_path):
    lh = make_lakehouse(f"{s3_bucket}/src", storage_options=s3_storage_options)
    v = populate(lh, tables=5)
    want = contents(lh.uri, v, lh.storage.options)

    r = run(lh, str(tmp_path / "partial"), "p1", mode="partial", depth=0)
    assert r.counts["external_refs"] > 0 and latest_def(lh).exported_snapshot_pins["p1"] == v
    assert export_contents(lh, "p1") == want
    # Opened on its own, the local export reads the deeper levels from S3.
    assert contents(str(tmp_path / "partial"), options=s3_storage_options) == want

    r = run(lh, str(tmp_path / "full"), "f1", version=v)
    assert r.counts["copied"] == r.counts["planned"]
    # A re-run verifies the S3-sourced files at the local target from the manifests, no source read.
    again = run(lh, str(tmp_path / "full"), "f1")
    assert again.counts["copied"] == 0 and again.counts["source_reads"] == 0
    tgt = Storage(str(tmp_path / "full"))
    assert pointers_outside(str(tmp_path / "full"), lh) == 0
    assert not [f.path for f in tgt.list("") if f.path.endswith((".arrow", ".binpb")) and s3_bucket.encode()[5:]
                in tgt.read(f.path)]
    assert contents(str(tmp_path / "full")) == want
