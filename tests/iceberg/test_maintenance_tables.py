"""Orphan cleanup and expiration never touch a table's files, also where they live under the
lakehouse's root (the default warehouse), in folders the orphan job lists."""

from __future__ import annotations

import os
import time

from tests.iceberg.conftest import SCHEMA, ids, open_catalog, rows
from trinitylake.config import load_job_config
from trinitylake.format.paths import is_format_owned
from trinitylake.jobs.runner import run_job
from trinitylake.lakehouse import Lakehouse


def files_under(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs}


def run(job: str, lh, **overrides):
    cfg = load_job_config(job, overrides={"lakehouse": lh.uri, "execution": "local", **overrides}, env={})
    return run_job(job, cfg, audit=False)


def test_orphans_and_expire_leave_table_files_alone(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False, txn_ttl_millis=1000)
    cat = open_catalog(lh.uri)
    cat.create_namespace("s")
    # One table in the default warehouse, one in a folder named like the format's hash prefixes.
    hashy = lh.uri + "/0110/0101/0000/01010101-t"
    cat.create_table("s.a", schema=SCHEMA).append(rows([1, 2]))
    cat.create_table("s.b", schema=SCHEMA, location=hashy).append(rows([3]))
    for i in range(4):
        cat.load_table("s.a").append(rows([10 + i]))
    root = str(tmp_path / "lh")
    tables = {f for f in files_under(root) if f.startswith(("warehouse/", "0110/0101/0000/01010101-t/"))}
    assert tables and not any(is_format_owned(f) for f in tables)
    # A format file's name has no folder after its hash prefix: a table's file never matches.
    assert not is_format_owned("0110/0101/0000/01010101-t/data/part-0.arrow")
    assert not is_format_owned("0110/0101/0000/01010101-t/metadata/x.binpb")
    time.sleep(1.5)  # past the transaction TTL: versions may expire, files are old enough
    res = run("orphans", lh, older_than=0, unsafe_min_age=True)
    assert res.status == "succeeded"
    exp = run("expire", lh, max_version_age=0, clock_skew_margin=0, min_versions_to_keep=1)
    assert exp.status == "succeeded" and lh.oldest_version() >= lh.latest_version() - 1 > 1  # versions expired
    assert tables <= files_under(root)
    assert ids(cat.load_table("s.a")) == [1, 2, 10, 11, 12, 13] and ids(cat.load_table("s.b")) == [3]
    assert len(cat.load_table("s.a").metadata.snapshots) == 5
