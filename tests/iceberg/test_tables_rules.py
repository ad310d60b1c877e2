"""The table jobs' rules on their own (`expire_rules`, `orphans_rules`): pure Python, no
storage. The jobs' end-to-end tests (test_tables_maintenance.py, test_tables_damaged.py, the
oracle) show the rules applied; these pin each rule and its order."""

from __future__ import annotations

import pytest

from trinitylake.errors import ValidationError
from trinitylake.tables_maintenance import expire_rules as er
from trinitylake.tables_maintenance import orphans_rules as orr
from trinitylake.tables_maintenance.damage import Damage
from trinitylake.tables_maintenance.retention import Retention

W = "s3://b/w"  # a healthy table's location
D = "s3://b/d"  # a damaged table's location


def _damage() -> Damage:
    dmg = Damage()
    dmg.table("s.d").locations.add(D)
    return dmg


def _plan(name: str, candidates: dict[str, str], new: str | None = "m2") -> er.TablePlan:
    return er.TablePlan(name, "m1", Retention({2}, {1}), new_metadata=new, candidates=candidates)


def test_a_candidate_is_kept_by_a_table_deferred_by_a_version_held_by_damage_or_deleted():
    plans = {
        "s.w": _plan("s.w", {f"{W}/live": "data", f"{W}/old": "data", f"{W}/pinned": "manifest", f"{D}/under-d": "data"})
    }
    pending = {"s.d": {f"{D}/pending-d": "data", "s3://b/x/elsewhere": "data"}, "s.w": {f"{W}/earlier": "manifest"}}
    split = er.split_candidates(plans, pending, {f"{W}/live"}, {f"{W}/pinned", "s3://b/x/elsewhere"}, _damage())
    assert split.to_delete == {f"{W}/old": "data", f"{W}/earlier": "manifest"}
    assert split.deferred == {f"{W}/pinned": "manifest"}
    # a damaged table's pending file is held wherever it lies, and so is any file under its location
    assert split.held == {f"{D}/pending-d": "data", "s3://b/x/elsewhere": "data", f"{D}/under-d": "data"}
    # what a current table reaches stays, in no list: it leaves the pending file
    assert f"{W}/live" not in split.still_pending(set())
    assert split.still_pending({f"{W}/old"}) == {f"{W}/earlier", f"{W}/pinned", *split.held}


def test_a_file_a_current_table_reaches_is_never_held_or_deferred():
    pending = {"s.d": {f"{D}/shared": "data"}}
    split = er.split_candidates({}, pending, {f"{D}/shared"}, {f"{D}/shared"}, _damage())
    assert (split.to_delete, split.deferred, split.held) == ({}, {}, {})


def test_a_plan_owns_a_file_pending_for_another_table_and_its_kind_wins():
    plans = {"s.new": _plan("s.new", {f"{W}/f": "delete"})}
    pending = {"s.old": {f"{W}/f": "data"}}
    split = er.split_candidates(plans, pending, set(), set(), Damage())
    assert split.to_delete == {f"{W}/f": "delete"}
    assert split.owner == {f"{W}/f": "s.new"}
    rows, owned = er.per_table(plans, pending, split, set())
    assert owned == {"s.new": [f"{W}/f"], "s.old": []}
    assert rows["s.new"]["files_to_delete_by_kind"] == {"delete": 1}
    assert rows["s.old"] == {"snapshots_expired": 0, "version": None, "files_to_delete": 0,
                             "files_to_delete_by_kind": {}, "files_deferred": 0, "files_held": 0}


def test_per_table_rows_count_held_files_and_name_damaged_tables():
    plans = {"s.w": _plan("s.w", {f"{D}/under-d": "data"}), "s.d": _plan("s.d", {}, new="m3"), "s.e": _plan("s.e", {}, new=None)}
    pending = {"s.d": {f"{D}/pending-d": "data"}}
    dmg = _damage()
    dmg.table("s.e")
    dmg.table("s.gone")
    split = er.split_candidates(plans, pending, set(), set(), dmg)
    rows, _ = er.per_table(plans, pending, split, dmg.tables)
    assert rows["s.w"]["files_held"] == 1 and rows["s.d"]["files_held"] == 1
    assert rows["s.w"]["snapshots_expired"] == 1 and rows["s.w"]["expired_snapshot_ids"] == [1]
    assert rows["s.d"]["damaged"].startswith("found after its expiry committed")  # its expiry committed
    assert rows["s.e"]["skipped"] == "damaged" and rows["s.gone"] == {"snapshots_expired": 0, "version": None,
                                                                       "skipped": "damaged"}


def _sieve(live: list[str], held: tuple[str, ...] = ()) -> orr.Sieve:
    eq = orr.Equivalence({"s3a": "s3"}, {"b-alias": "b"})
    return orr.Sieve(eq, live, cutoff_s=1000.0, held=lambda u: u.startswith(held) if held else False)


@pytest.mark.parametrize(
    ("rel", "mtime", "want"),
    [
        ("data/_tmp/x.parquet", 10.0, orr.HIDDEN),  # hidden beats everything, live or not
        ("data/.x.parquet.crc", 10.0, orr.HIDDEN),
        ("data/k=_v/x.parquet", 10.0, orr.ORPHAN),  # a partition folder k=v is not hidden
        ("inner/data/x.parquet", 10.0, orr.NESTED),
        ("data/live.parquet", 10.0, orr.LIVE),
        ("data/live.parquet", None, orr.LIVE),  # live is judged before age
        ("data/new.parquet", 2000.0, orr.YOUNG),
        ("data/new.parquet", None, orr.YOUNG),  # no known age: young
        ("data/new.parquet", 0.0, orr.YOUNG),
        ("held/x.parquet", 10.0, orr.HELD),
        ("data/other.parquet", 10.0, orr.MISMATCHED),
        ("data/x.parquet", 10.0, orr.ORPHAN),
    ],
)
def test_each_listed_file_gets_the_first_verdict_that_holds(rel, mtime, want):
    loc = "s3://b/t"
    sieve = _sieve([f"{loc}/data/live.parquet", f"{loc}/_tmp/x.parquet", "gs://other/t/data/other.parquet"],
                   held=(f"{loc}/held/",))
    assert sieve.verdict(rel, f"{loc}/{rel}", mtime, [f"{loc}/inner/"]) == want


def test_equivalent_schemes_and_authorities_are_the_same_live_file():
    sieve = _sieve(["s3://b/t/data/f.parquet"])
    assert sieve.verdict("data/f.parquet", "s3a://b-alias/t/data/f.parquet", 10.0, []) == orr.LIVE
    assert sieve.verdict("data/f.parquet", "gs://b/t/data/f.parquet", 10.0, []) == orr.MISMATCHED
    assert sieve.live_as("gs://b/t/data/f.parquet") == "s3://b"


def test_the_age_floor_and_the_mode_are_checked():
    orr.check_age_and_mode(orr.MIN_AGE_MS, False, "error")
    orr.check_age_and_mode(0, True, "delete")
    with pytest.raises(ValidationError, match="below the floor of 3 days"):
        orr.check_age_and_mode(orr.MIN_AGE_MS - 1, False, "error")
    with pytest.raises(ValidationError, match="must not be negative"):
        orr.check_age_and_mode(-1, True, "error")
    with pytest.raises(ValidationError, match="prefix-mismatch-mode"):
        orr.check_age_and_mode(orr.MIN_AGE_MS, False, "keep")
