"""Which versions expire (the policy is pure: versions, creation times, now)."""

from __future__ import annotations

import pytest

from trinitylake.config import load_job_config
from trinitylake.errors import UnsafeOperationError, ValidationError
from trinitylake.format import definitions as D
from trinitylake.jobs.expire.rules import RetentionPolicy, plan_expiration

DAY = 86_400_000
NOW = 100 * DAY


def policy(**kw):
    base = {"max_version_age_ms": 7 * DAY, "min_versions_to_keep": 3, "txn_ttl_ms": 3 * DAY,
            "clock_skew_margin_ms": 10 * 60_000}
    base.update(kw)
    return RetentionPolicy(**base)


def daily(n, start_day=0):
    """Versions 0..n-1 created one a day from `start_day`."""
    return list(range(n)), {v: (start_day + v) * DAY for v in range(n)}


def test_old_versions_expire_up_to_the_max_age():
    vs, times = daily(100)  # version v created on day v; now = day 100
    plan = plan_expiration(vs, times, policy(), NOW)
    # Older than 7 days: created before day 93, i.e. versions 0..92.
    assert plan.expired == tuple(range(93))
    assert plan.retained == tuple(range(93, 100)) and plan.oldest_retained == 93
    assert "maximum age" in plan.stop_reason


def test_the_newest_versions_are_always_kept():
    vs, times = daily(10)  # all ancient relative to NOW
    plan = plan_expiration(vs, times, policy(min_versions_to_keep=4), NOW)
    assert plan.expired == tuple(range(6)) and plan.retained == (6, 7, 8, 9)
    plan = plan_expiration(vs, times, policy(min_versions_to_keep=1), NOW)
    assert plan.retained == (9,), "the latest version never expires"
    with pytest.raises(ValidationError):
        policy(min_versions_to_keep=0)


def test_only_an_oldest_contiguous_prefix_expires():
    vs, times = daily(50)
    # Version 10 has an override keeping it for a year: it and everything newer stay.
    plan = plan_expiration(vs, times, policy(overrides_ms={10: 365 * DAY}), NOW)
    assert plan.expired == tuple(range(10)) and plan.stop_version == 10
    # An override that shortens an age does not let a version jump the queue.
    times2 = dict(times)
    times2[3] = NOW - DAY  # version 3 is young (clock skew between writers)
    plan = plan_expiration(vs, times2, policy(overrides_ms={4: 0}), NOW)
    # 3 is too young, and 2 stays too: its successor (3) is younger than the TTL.
    assert plan.expired == (0, 1)


def test_pinned_versions_and_everything_newer_are_kept():
    vs, times = daily(60)
    plan = plan_expiration(vs, times, policy(pins={"weekly": 20, "other": 40}), NOW)
    assert plan.expired == tuple(range(20)) and plan.oldest_retained == 20
    assert "weekly" in plan.stop_reason


def test_a_version_expires_only_when_no_transaction_can_still_use_it():
    # Ages allow everything; the TTL rule decides. TTL 3 days, margin 10 minutes.
    vs = [0, 1, 2, 3]
    margin = 10 * 60_000
    cutoff = NOW - 3 * DAY - margin
    times = {0: cutoff - 3000, 1: cutoff - 2000, 2: cutoff + 1, 3: cutoff + 2}
    plan = plan_expiration(vs, times, policy(max_version_age_ms=0, min_versions_to_keep=1), NOW)
    # Version 1 is older than the cutoff, but its successor (2) is not: a transaction that
    # began at version 1 may still be running.
    assert plan.expired == (0,)
    assert "successor" in plan.stop_reason
    times[2] = cutoff - 1
    assert plan_expiration(vs, times, policy(max_version_age_ms=0, min_versions_to_keep=1), NOW).expired == (0, 1)


def test_a_gap_in_the_version_chain_stops_the_scan():
    vs = [0, 1, 2, 4, 5, 6, 7, 8]
    times = dict.fromkeys(range(9), 0)
    plan = plan_expiration(vs, times, policy(max_version_age_ms=0, min_versions_to_keep=1), NOW)
    assert plan.expired == (0, 1)


def test_refusals():
    with pytest.raises(UnsafeOperationError):
        plan_expiration([], {}, policy(), NOW)
    with pytest.raises(ValidationError):
        plan_expiration([3, 2], {2: 0, 3: 0}, policy(), NOW)
    plan = plan_expiration([5], {5: 0}, policy(min_versions_to_keep=1, max_version_age_ms=0), NOW)
    assert plan.expired == () and plan.retained == (5,)


def test_creation_times_are_read_lazily():
    asked = []

    def created(v):
        asked.append(v)
        return v * DAY

    plan_expiration(list(range(1000)), created, policy(), NOW)
    assert max(asked) <= 94, "only the expired prefix, the version that stops the scan and its successor"


def test_policy_from_definition_then_flags():
    d = D.new_lakehouse_def(txn_ttl_millis=DAY)
    p = RetentionPolicy.from_definition(d)
    assert (p.max_version_age_ms, p.min_versions_to_keep, p.txn_ttl_ms) == (7 * DAY, 3, DAY)
    d.maximum_version_age_millis = 2 * DAY
    d.minimum_versions_to_keep = 5
    d.maximum_version_age_millis_overrides[4] = 9
    d.exported_snapshot_pins["e"] = 12
    p = RetentionPolicy.from_definition(d, clock_skew_margin_ms=5)
    assert (p.max_version_age_ms, p.min_versions_to_keep, dict(p.overrides_ms), dict(p.pins)) == (2 * DAY, 5, {4: 9}, {"e": 12})
    p = RetentionPolicy.from_definition(d, max_version_age_ms=DAY, min_versions_to_keep=2)
    assert (p.max_version_age_ms, p.min_versions_to_keep) == (DAY, 2)
    assert p.to_dict()["pins"] == {"e": 12}
    # The job config leaves both null unless given, so the definition's values apply.
    cfg = load_job_config("expire", overrides={"lakehouse": "/tmp/x"}, env={})
    assert cfg.max_version_age is None and cfg.min_versions_to_keep is None
