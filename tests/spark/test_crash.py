"""A driver SIGKILLed at the worst moments of an expiration; a re-run finishes the job.

Each case starts ``jobs/expire.py`` in its own process. Its small lakehouse keeps every phase on
the driver (no Spark JVM), so the cases are cheap and always run. The executor-side equivalent
(executors killed mid-delete) is ``test_expire.py::test_an_expiration_killed_mid_delete_is_finished_by_a_rerun``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.maintenance.helpers import build_history, snapshot
from tests.oracle import Oracle
from tests.spark.conftest import TTL_MS, owned_files, reach, run
from trinitylake.format.paths import root_name
from trinitylake.lakehouse import Lakehouse

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("point", ["expire_after_commit", "expire_before_roots"])
def test_a_driver_killed_during_expire_is_finished_by_a_rerun(spark, tmp_path, point):
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    build_history(lh, seed=13, ops=30)
    latest = lh.latest_version()
    time.sleep(TTL_MS / 1000 + 0.2)
    keep_from = latest - 3
    expired = list(range(keep_from))
    must_go = reach(lh, expired).paths() - reach(lh, range(keep_from, latest + 1)).paths()
    before = snapshot(lh, range(keep_from, latest + 1))
    oracle = Oracle(lh.uri)  # independent of the library's reader: keys and definition bytes
    seen = oracle.snapshot()
    files = owned_files(lh.storage)
    env = {**os.environ, "TLAKE_TEST_CRASH_AT": point, "PYTHONPATH": os.pathsep.join((ROOT, os.environ.get("PYTHONPATH", "")))}
    proc = subprocess.run(
        [sys.executable, "jobs/expire.py", "--lakehouse", lh.uri, "--master", "local[1]", "--max-version-age", "0",
         "--clock-skew-margin", "0", "--min-versions-to-keep", "4", "--control-uri", str(tmp_path / "control")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, proc.stderr[-2000:]
    lh = Lakehouse.open(lh.uri, audit=False)
    assert lh.definition().oldest_retained_version == keep_from, "committed before the kill"
    left = owned_files(lh.storage)
    if point == "expire_after_commit":
        assert files <= left, "nothing was deleted before the kill"
    else:
        assert files - left == must_go - {root_name(v) for v in expired}, "everything but the roots went"
    assert snapshot(lh, range(keep_from, latest + 1)) == before
    assert oracle.problems(seen) == []
    res = run(spark, "expire", lh, min_versions_to_keep=5, max_version_age=0, clock_skew_margin=0)
    assert res.counts["versions_leftover"] == len(expired) and res.counts["failed"] == 0
    assert files - owned_files(lh.storage) == must_go
    assert snapshot(lh, range(keep_from, latest + 1)) == before
    assert oracle.problems(seen) == [] and oracle.listed_versions() == list(range(keep_from, latest + 2))
