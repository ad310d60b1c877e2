"""Placement by estimated time (`trinitylake.spark.placement`): decisions from recorded costs,
without Spark. The expected decisions are worked out by hand from the model's inputs."""

from __future__ import annotations

import pytest

from trinitylake.spark import placement as P
from trinitylake.spark.execution import AUTO, DISTRIBUTED, LOCAL, Execution, Limits, session_parallelism
from trinitylake.storage import requests


class _Store:
    """Only what placement reads of a storage: its scheme (the store's latency samples) and
    whether every request is a round trip to a remote store."""

    def __init__(self, scheme: str):
        self.scheme = scheme
        self.remote = scheme != "file"


def test_latency_bound_work_goes_to_the_executors():
    # 17,436 requests (8,718 files x GET + PUT) at 100 ms: the driver's 16 threads make 160/s
    # (109 s); 4 executors x 16 threads 640/s, under 2 cores' 1,000/s: 27 s + 8 + 2 + tasks.
    est = P.estimate(17_436, 0.1, threads=16, slots=4, cpus=2, tasks=16, session_started=False)
    assert est.driver_s == pytest.approx(17_436 / 160)
    assert est.executors_s == pytest.approx(P.SESSION_START + P.JOB_OVERHEAD + 16 * P.TASK_OVERHEAD / 4 + 17_436 / 640)
    assert est.executors_faster
    # The same executors as a local-cluster on the driver's own 2 cores: 4 executor starts on
    # them (44 s), and each request costs the machine about 3x the client's CPU (measured):
    # 333/s, 52 s + 44 + 2, not clearly faster than 109 s.
    start = P.SESSION_START + 4 * P.LOCAL_EXECUTOR_START / 2
    here = P.estimate(17_436, 0.1, threads=16, slots=4, cpus=2, tasks=16, session_started=False, here=True,
                      start_s=start)
    assert here.executors_s == pytest.approx(start + 2.12 + 17_436 / (2 / (P.CPU_PER_REQUEST * P.HERE_CPU_FACTOR)))
    assert here.executors_s < here.driver_s < here.executors_s * P.EXECUTOR_MARGIN
    assert not here.executors_faster


def test_small_or_fast_work_stays_on_the_driver():
    # 137 node reads at 100 ms: 0.9 s on the driver against a session start.
    assert not P.estimate(137, 0.1, threads=16, slots=4, cpus=2, tasks=16, session_started=False).executors_faster
    # Even with the session up, one job's overhead is more than 0.9 s.
    assert not P.estimate(137, 0.1, threads=16, slots=4, cpus=2, tasks=16, session_started=True).executors_faster
    # A fast store: the driver's interpreter (500 requests/s) is the limit on both sides, and 2
    # cores give the executors only twice that: 20k requests are 40 s against 20 s + 10 s.
    fast = P.estimate(20_000, 0.001, threads=16, slots=4, cpus=2, tasks=16, session_started=False)
    assert fast.driver_s == pytest.approx(40.0)
    assert fast.executors_s == pytest.approx(10.12 + 20.0)
    assert fast.executors_faster
    # ... and with a single core of executors, never.
    assert not P.estimate(20_000, 0.001, threads=16, slots=1, cpus=1, tasks=4, session_started=False).executors_faster


def test_a_cluster_wins_where_this_machine_cannot():
    # 100 executor cores at 25 ms: 200k requests take 200,000/640 = 312 s at 16 threads (its
    # interpreter caps it at 500/s: 400 s), 200k / 50,000/s = 4 s on the executors.
    est = P.estimate(200_000, 0.025, threads=16, slots=100, cpus=100, tasks=400, session_started=True)
    assert est.driver_s == pytest.approx(400.0)
    assert est.executors_s < 20 and est.executors_faster


@pytest.mark.parametrize(("master", "conf", "expected"), [
    ("local[4]", {}, (4, True)),
    ("local", {}, (1, True)),
    ("local-cluster[4,1,1024]", {}, (4, True)),
    ("local-cluster[3, 2, 512]", {}, (6, True)),
    ("yarn", {"spark.executor.instances": "10", "spark.executor.cores": "4"}, (40, False)),
    ("k8s://https://h", {"spark.dynamicAllocation.maxExecutors": "25"}, (25, False)),
    ("yarn", {}, None),
    (None, {}, None),
])
def test_promised_slots(master, conf, expected):
    assert P.promised_slots(master, conf) == expected


def test_auto_decides_by_the_measured_latency_and_records_the_estimate(monkeypatch):
    from trinitylake.spark import execution

    monkeypatch.setattr(execution, "_load", lambda: 0.0)  # an idle machine
    scheme = "slowstore-placement-test"  # a scheme of its own: latency samples are per process
    ex = Execution(AUTO, session_factory=lambda: None, promised=(16, False), record={})
    store = _Store(scheme)
    # No request measured yet: the local-disk thresholds decide (8,718 < local_max_items).
    assert not ex.distributed(8_718, storage=store, requests_per_item=2, phase="export.copy")
    for _ in range(5):
        requests.observe(scheme, 0.1)
    assert requests.latency(scheme) == pytest.approx(0.1)
    assert ex.distributed(8_718, storage=store, requests_per_item=2, phase="export.copy")
    assert not ex.distributed(137, storage=store, requests_per_item=1, phase="export.plan_nodes")
    with ex.phase("export.copy", DISTRIBUTED, 8_718):
        pass
    est = ex.record["export.copy"]["estimates"][0]
    assert est["chose"] == DISTRIBUTED and est["slots"] == 16 and est["latency_ms"] == pytest.approx(100.0)
    assert est["executors_s"] < est["driver_s"]
    # Local files keep the item-count rule, whatever was measured elsewhere.
    assert not ex.distributed(8_718, storage=_Store("file"), requests_per_item=2)
    assert ex.distributed(Limits().local_max_items + 1, storage=_Store("file"), requests_per_item=2)


def test_forced_modes_ignore_the_estimate():
    scheme = "slowstore-forced-test"
    requests.observe(scheme, 0.1)
    store = _Store(scheme)
    assert not Execution(LOCAL).distributed(10**6, storage=store, requests_per_item=2)
    assert Execution(DISTRIBUTED).distributed(1, storage=store, requests_per_item=1)


class _Conf:
    def __init__(self, d):
        self.d = d

    def get(self, key, default=None):
        return self.d.get(key, default)


class _Session:
    def __init__(self, d):
        self.conf = _Conf(d)


def test_parallelism_of_a_local_cluster_is_read_from_its_master():
    assert session_parallelism(_Session({"spark.master": "local-cluster[4,1,1024]"})) == 4


def test_a_session_started_early_is_waited_for_and_its_failure_raised_where_needed():
    import threading

    gate = threading.Event()
    made = []

    def factory():
        gate.wait(5)
        made.append(1)
        return _Session({"spark.master": "local[3]"})

    ex = Execution(DISTRIBUTED, session_factory=factory, start_s=30.0)
    ex.prestart()
    ex.prestart()  # once only
    assert not ex.started
    gate.set()
    assert ex.spark.conf.get("spark.master") == "local[3]" and made == [1]
    assert ex.started

    def broken():
        raise RuntimeError("no cluster today")

    ex = Execution(DISTRIBUTED, session_factory=broken)
    ex.prestart()
    with pytest.raises(RuntimeError, match="no cluster today"):
        _ = ex.spark


def test_the_start_cost_counts_executors_started_on_this_machine(monkeypatch):
    monkeypatch.setattr(P.os, "cpu_count", lambda: 2)
    assert P.start_seconds("local[2]") == P.SESSION_START
    assert P.start_seconds("local-cluster[4,1,1024]") == P.SESSION_START + 4 * P.LOCAL_EXECUTOR_START / 2
    assert P.start_seconds(None, {"spark.master": "yarn"}) == P.SESSION_START


def test_a_busy_machine_makes_executors_on_it_dearer(monkeypatch):
    from trinitylake.spark import execution

    monkeypatch.setattr(execution.os, "cpu_count", lambda: 2)
    scheme = "slowstore-busy-test"
    requests.observe(scheme, 0.1)
    ex = Execution(AUTO, session_factory=lambda: None, promised=(4, True), start_s=44.0)
    monkeypatch.setattr(execution, "_load", lambda: 1.0)
    idle = ex.estimate(17_436, scheme, 8_718)
    monkeypatch.setattr(execution, "_load", lambda: 8.0)  # four times what 2 cores run
    busy = ex.estimate(17_436, scheme, 8_718)
    assert idle.cpus == 2 and busy.cpus == 1
    assert busy.executors_s > idle.executors_s + 3 * 44.0 - 1
    assert busy.driver_s == idle.driver_s
    # A cluster elsewhere is not slowed by this machine's load.
    far = Execution(AUTO, session_factory=lambda: None, promised=(40, False), start_s=8.0)
    assert far.estimate(17_436, scheme, 8_718).cpus == 40
