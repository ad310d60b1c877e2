"""The walk's production paths under real process kills and disk faults: its stat worker (a
child process sizing definition files) SIGKILLed mid-walk, and faults on the plain-file reads
and ``stat``s; the listing always equals the oracle's."""

from __future__ import annotations

import os
import signal

import pytest

from tests.maintenance.helpers import build_history
from tests.oracle import expect as E
from tests.support.faults import FaultSpec, injected
from trinitylake.format.paths import root_name
from trinitylake.spark.execution import Execution
from trinitylake.storage import background_sizes as BS
from trinitylake.treewalk.walker import walk_reachable_with_stats


@pytest.fixture(scope="module")
def lakehouse(tmp_path_factory):
    from trinitylake.lakehouse import Lakehouse

    lh = Lakehouse.create(str(tmp_path_factory.mktemp("walk") / "lh"), order=4, node_max_bytes=4096, audit=False)
    build_history(lh, seed=17, ops=40)
    return lh


def _walk(lh) -> list[tuple]:
    o = E.oracle_of(lh)
    versions = range(E.floor(o), E.latest_version(o) + 1)
    ex = Execution("local", session_factory=lambda: pytest.fail("a local walk must not start Spark"))
    reached, _ = walk_reachable_with_stats(ex, lh, [(v, root_name(v)) for v in versions])
    got = sorted(zip(*(reached.rows.to_table().column(c).to_pylist() for c in reached.rows.to_table().column_names), strict=True))
    ref = E.walk(o, [(v, f"{o.root}/{root_name(v)}") for v in versions])
    assert len(ref.paths("definition")) >= 10
    return [got, ref.tuples()]


@pytest.fixture
def stat_worker(monkeypatch):
    """Every walk sizes through its stat worker (no in-process start-up threshold); the pids
    of the workers started."""
    monkeypatch.setattr(BS, "START_AFTER_KEYS", 1)
    pids: list[int] = []
    real_start = BS.BackgroundSizes._start

    def start(self):
        real_start(self)
        if self._proc is not None:
            pids.append(self._proc.pid)

    monkeypatch.setattr(BS.BackgroundSizes, "_start", start)
    return pids


def test_the_walk_sizes_through_its_stat_worker(lakehouse, stat_worker):
    got, expected = _walk(lakehouse)
    assert stat_worker, "the stat worker ran"
    assert got == expected


def test_a_stat_worker_killed_mid_walk_leaves_the_listing_exact(lakehouse, stat_worker, monkeypatch):
    killed: list[int] = []
    real_send = BS.BackgroundSizes._send

    def send_then_kill(self, keys):
        real_send(self, keys)
        if self._proc is not None and not killed:  # the walk goes on feeding it
            os.kill(self._proc.pid, signal.SIGKILL)
            killed.append(self._proc.pid)

    monkeypatch.setattr(BS.BackgroundSizes, "_send", send_then_kill)
    got, expected = _walk(lakehouse)
    assert killed and killed == stat_worker[:1]
    assert got == expected


def test_disk_faults_on_the_walks_plain_file_paths_leave_the_listing_exact(lakehouse, stat_worker):
    # Transient faults on reads and stats: at the system calls of the plain-file paths and at
    # the storage below its retries.
    with injected(FaultSpec(transient_rate=0.2, ops=("read", "info"), seed=8)) as inj:
        got, expected = _walk(lakehouse)
    assert inj.injected > 0
    assert got == expected
