"""Orphan-cleanup rules: owned names, folders never listed, the age cutoff, prefix mismatches."""

from __future__ import annotations

import pytest

from trinitylake.config import load_job_config
from trinitylake.errors import UnsafeOperationError
from trinitylake.format.paths import hashed_path, root_name
from trinitylake.jobs.orphans import rules as O
from trinitylake.jobs.orphans.rules import effective_orphan_min_age
from trinitylake.storage.uri import parse_uri

NODE = hashed_path("node-00000000-0000-4000-8000-00000000dead.arrow")
DEF = hashed_path("m-ghost-00000000-0000-4000-8000-00000000beef.binpb")
LDEF = "_lakehouse_def_00000000-0000-4000-8000-000000000001.binpb"


def test_only_hash_folders_are_descended_and_only_owned_top_files_kept():
    dirs = ["0110", "1011", "_control", "_maintenance", "m.t1", "notes", "01101"]
    files = [(root_name(3), 10, 1.0), (LDEF, 5, 1.0), ("_latest_hint.txt", 1, 1.0), ("README", 1, 1.0)]
    hash_dirs, skipped, owned, not_owned = O.split_top_level(dirs, files)
    assert hash_dirs == ["0110", "1011"]
    assert skipped == ["01101", "_control", "_maintenance", "m.t1", "notes"]
    assert [f[0] for f in owned] == [root_name(3), LDEF]
    assert not_owned == 2


def test_age_cutoff_counts_back_from_the_reference_time_and_unknown_ages_are_young():
    c = O.AgeCutoff(reference_ms=10_000_000, min_age_ms=3_000_000)
    assert c.cutoff_s == 7000.0
    assert c.old_enough(6999.9) and not c.old_enough(7000.0) and not c.old_enough(8000)
    assert not c.old_enough(0) and not c.old_enough(None)


def test_the_age_rule_is_one_rule_on_python_values_and_arrow_arrays():
    import pyarrow as pa

    c = O.AgeCutoff(reference_ms=10_000_000, min_age_ms=3_000_000)
    mtimes = [None, 0.0, -1.0, 1.0, 6_999.0, 6_999.999, 7_000.0, 7_000.001, 9_999.0]
    arrow = c.old_enough_arrow(pa.array(mtimes, pa.float64())).to_pylist()
    assert [bool(a) for a in arrow] == [c.old_enough(m) for m in mtimes] == [False, False, False, True, True, True,
                                                                              False, False, False]


def test_is_candidate_combines_every_rule():
    c = O.AgeCutoff(reference_ms=10_000_000, min_age_ms=0)
    assert O.is_candidate(NODE, 1.0, c, frozenset())
    assert O.is_candidate(DEF, 1.0, c, frozenset()) and O.is_candidate(root_name(1), 1.0, c, frozenset())
    assert not O.is_candidate(NODE, 1.0, c, frozenset({NODE})), "reachable"
    assert not O.is_candidate(NODE, 20_000.0, c, frozenset()), "too young"
    assert not O.is_candidate("notes/" + NODE, 1.0, c, frozenset()), "not format-owned"
    assert not O.is_candidate("_control/part-0.parquet", 1.0, c, frozenset())
    assert not O.is_candidate("file:///elsewhere/" + NODE, 1.0, c, frozenset()), "outside the root"


def test_mismatch_key_finds_the_same_file_under_another_scheme_or_authority():
    root = parse_uri("s3://bucket/warehouse/lh")
    assert O.mismatch_key(f"s3://bucket-alias/warehouse/lh/{NODE}", root) == NODE
    assert O.mismatch_key(f"gs://bucket/warehouse/lh/{DEF}", root) == DEF
    assert O.mismatch_key(f"s3://bucket-alias/other/{NODE}", root) is None, "a different path"
    assert O.mismatch_key("s3://bucket-alias/warehouse/lh/notes/x.txt", root) is None, "not owned"
    assert O.mismatch_key(NODE, root) is None, "relative keys are already comparable"
    # A full export kept the source's layout in another bucket: its own files, not aliases.
    export = "s3://backup/warehouse/lh"
    assert O.mismatch_key(f"{export}/{NODE}", parse_uri("s3://backup2/warehouse/lh"), [export]) is None
    assert O.export_root_dirs([f"{export}/{root_name(4)}"]) == [export]


def test_min_age_floor_is_the_transaction_ttl():
    ttl = 3 * 86_400_000
    cfg = load_job_config("orphans", overrides={"lakehouse": "/tmp/x"}, env={})
    assert effective_orphan_min_age(cfg, txn_ttl_ms=ttl) == ttl
    cfg = load_job_config("orphans", overrides={"lakehouse": "/tmp/x", "older_than": "1d"}, env={})
    with pytest.raises(UnsafeOperationError, match="below the lakehouse transaction TTL"):
        effective_orphan_min_age(cfg, txn_ttl_ms=ttl)
    cfg = load_job_config("orphans", overrides={"lakehouse": "/tmp/x", "older_than": "1d", "unsafe_min_age": True},
                          env={})
    assert effective_orphan_min_age(cfg, txn_ttl_ms=ttl) == 86_400_000
