"""Crash safety: a committing process SIGKILLed at any point never leaves an unreadable
latest version, loses no acknowledged commit, and the next writer proceeds."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.lakehouse.helpers import local_dir, local_versions
from trinitylake.lakehouse import Lakehouse

POINTS = ["before_nodes", "before_root", "after_root", "after_hint"]

COMMIT_ONE = """
import sys
from trinitylake.lakehouse import Lakehouse
lh = Lakehouse.open(sys.argv[1], audit=False)
lh.create_table("ns", sys.argv[2])
print("committed")
"""


def _hint(lh) -> bytes:
    with open(os.path.join(local_dir(lh), "_latest_hint.txt"), "rb") as f:
        return f.read()


def _assert_consistent(uri: str) -> Lakehouse:
    """Every version reads; versions are contiguous; each one changes one key."""
    lh = Lakehouse.open(uri, audit=False)
    latest = lh.latest_version()
    assert local_versions(local_dir(uri)) == list(range(latest + 1))
    view = lh.view()
    view.list_namespaces()
    for v in range(2, latest + 1):
        assert len(lh.change_set(v).keys) == 1
    return lh


@pytest.fixture
def lh(make_lakehouse):
    lh = make_lakehouse()
    lh.create_namespace("ns")
    for i in range(6):  # a multi-level tree, so commits write non-root nodes too
        lh.create_table("ns", f"seed{i}")
    return lh


@pytest.mark.parametrize("point", POINTS)
def test_crash_at_each_point(lh, point):
    before = lh.latest_version()
    env = {**os.environ, "TLAKE_TEST_CRASH_AT": point}
    p = subprocess.run([sys.executable, "-c", COMMIT_ONE, lh.uri, "crashed"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert "committed" not in p.stdout
    durable = point in ("after_root", "after_hint")
    fresh = _assert_consistent(lh.uri)
    assert fresh.latest_version() == before + durable
    assert fresh.view().table_exists("ns", "crashed") == durable
    # after_root: the hint is stale (still the old version) and that is tolerated.
    assert _hint(lh) == str(before + (point == "after_hint")).encode()
    # The next writer proceeds and moves the hint.
    v = fresh.create_table("ns", "next")
    assert v == before + durable + 1
    assert _hint(lh) == str(v).encode()
    tables = _assert_consistent(lh.uri).view().list_tables("ns")
    assert tables == sorted([f"seed{i}" for i in range(6)] + ["next"] + (["crashed"] if durable else []))


def _commit_forever(uri: str, prefix: str, conn) -> None:
    """Child: commit tables <prefix>_<i> back to back, acknowledging each one on `conn`."""
    lh = Lakehouse.open(uri, audit=False)
    conn.send(("ready", None))
    i = 0
    while True:
        v = lh.create_table("ns", f"{prefix}_{i:04d}")
        conn.send(("acked", (f"{prefix}_{i:04d}", v)))
        i += 1


def test_random_sigkill_trials(lh):
    """20 trials: a forked writer commits in a loop and is SIGKILLed after a random delay,
    wherever it is. Afterwards every acknowledged commit is there and the lakehouse reads."""
    ctx = mp.get_context("fork")
    rng = random.Random(1234)
    acked: dict[str, int] = {}
    for trial in range(20):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_commit_forever, args=(lh.uri, f"k{trial:02d}", child), daemon=True)
        p.start()
        assert parent.poll(60) and parent.recv()[0] == "ready"
        time.sleep(rng.uniform(0, 0.08))
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        while parent.poll(0.05):
            kind, payload = parent.recv()
            if kind == "acked":
                acked[payload[0]] = payload[1]
        fresh = _assert_consistent(lh.uri)
        latest = fresh.latest_version()
        tables = set(fresh.view().list_tables("ns"))
        for name, v in acked.items():
            assert name in tables and fresh.view(version=v).table_exists("ns", name)
        # The next writer proceeds.
        assert fresh.create_table("ns", f"probe{trial:02d}") == latest + 1
    assert len(acked) > 20  # the trials did commit (and got killed) along the way
