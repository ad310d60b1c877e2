"""`get_spark`'s settings for a local master (`spark.session.LOCAL_CONF`): Delta's and Spark's
cluster-sized task counts brought down where the executors are the driver's threads."""

from __future__ import annotations

import pytest

from trinitylake.spark import session as S

pytestmark = pytest.mark.spark


def test_the_shared_local_session_has_the_local_settings(spark):
    for key, value in S.LOCAL_CONF.items():
        assert spark.conf.get(key) == value, key


def test_a_local_connect_server_without_a_master_gets_them_too(monkeypatch):
    """``spark.api.mode=connect`` without a remote starts a local Connect server, on local[*]
    when no master is named: it is a local master, so it gets the local settings. The server
    start is recorded instead of run (what it is given is the point here)."""
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    started: list[tuple[str, dict[str, str]]] = []
    monkeypatch.setattr(S, "_local_connect", lambda master, app, settings: started.append((master, settings)) or "client")
    assert S.get_spark(conf={"spark.api.mode": "connect"}) == "client"
    [(master, settings)] = started
    assert master == "local[*]"
    assert {k: settings.get(k) for k in S.LOCAL_CONF} == S.LOCAL_CONF
    # A caller's own value still wins.
    started.clear()
    S.get_spark(conf={"spark.api.mode": "connect", "spark.databricks.delta.snapshotPartitions": "16"})
    assert started[0][1]["spark.databricks.delta.snapshotPartitions"] == "16"
