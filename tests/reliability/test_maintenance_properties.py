"""Property-based maintenance histories checked by the independent oracle (`tests.oracle`).

A Hypothesis state machine drives random sequences of namespace/table creates, alters and
drops, rollbacks (also below the committed floor, which must be refused), long-running
transactions, abandoned transactions whose staged files are aged past the grace period,
planted files (format-owned and not, old and young), full/partial/minimal exports, export
drops, and runs of the expire, orphans and export jobs (driver-local: these lakehouses are
small, so no Spark session starts). After every step:

* every version the lakehouse still retains and every recorded export reads exactly as the
  oracle read it before the step (keys and the bytes of every definition file);
* every file the oracle says a live root reaches exists;
* the versions present are exactly ``oldest_retained_version .. latest`` (an expired oldest
  prefix, nothing else);
* expire deleted exactly the oracle's files of the versions it expired minus what stays live;
  orphans deleted exactly the format-owned files older than its age floor that nothing live
  reaches, and never a young or a foreign file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.oracle import Oracle
from tests.support.jobs import TTL_MS, run_local
from trinitylake.errors import TransactionConflictError, VersionExpiredError
from trinitylake.format.paths import hashed_path
from trinitylake.lakehouse import Lakehouse

OLD_S = 7200  # planted and abandoned files are made this much older than now (past the grace)
FIGURES: dict[str, int] = {}


def _count(key: str, n: int = 1) -> None:
    FIGURES[key] = FIGURES.get(key, 0) + n


def _age(path: str, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


class MaintenanceHistory(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tl-prop-")
        self.lh = Lakehouse.create(os.path.join(self.dir, "lh"), order=4, node_max_bytes=4096, audit=False,
                                   txn_ttl_millis=TTL_MS)
        self.lh.create_namespace("a")
        self.o = Oracle(self.lh.uri)
        self.n = 0
        self.long: Any = None
        self.exports: list[str] = []
        self.young: set[str] = set()
        self.foreign: set[str] = set()
        self.snap = self.o.snapshot()
        _count("examples")

    def teardown(self) -> None:
        if getattr(self, "dir", None):
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- helpers ---------------------------------------------------------------------------
    def _fresh(self) -> Lakehouse:
        return Lakehouse.open(self.lh.uri, audit=False)

    def _tables(self) -> list[tuple[str, str]]:
        v = self._fresh().view()
        return [(ns, t) for ns in v.list_namespaces() for t in v.list_tables(ns)]

    def _path(self, rel: str) -> str:
        return os.path.join(self.dir, "lh", rel)

    # ---- commits ---------------------------------------------------------------------------
    @rule(ns=st.sampled_from(["a", "b"]), count=st.integers(min_value=1, max_value=4))
    def create_tables(self, ns: str, count: int) -> None:
        lh = self._fresh()
        if not lh.view().namespace_exists(ns):
            lh.create_namespace(ns)
        for _ in range(count):
            self.n += 1
            lh.create_table(ns, f"t{self.n}")
        _count("commits", count)

    @rule(data=st.data())
    def alter_or_drop(self, data: st.DataObject) -> None:
        tables = self._tables()
        if not tables:
            return
        ns, t = data.draw(st.sampled_from(tables))
        lh = self._fresh()
        if data.draw(st.booleans()):
            txn = lh.begin()
            txn.alter_table(ns, t, set_properties={"p": str(self.n)})
            txn.commit()
        else:
            lh.drop_table(ns, t)
        _count("commits")

    @rule()
    def drop_namespace_b(self) -> None:
        lh = self._fresh()
        if lh.view().namespace_exists("b"):
            lh.drop_namespace("b", cascade=True)
            _count("commits")

    @rule(back=st.integers(min_value=1, max_value=8))
    def rollback(self, back: int) -> None:
        lh = self._fresh()
        latest, d = self.o.latest()
        target = max(d.oldest_retained_version, latest - back)
        if target < latest:
            lh.rollback(target)
            _count("rollbacks")
        if d.oldest_retained_version > 0:
            with pytest.raises(VersionExpiredError):
                lh.rollback(d.oldest_retained_version - 1)
            _count("rollbacks_refused")

    @precondition(lambda self: self.long is None)
    @rule()
    def begin_long_transaction(self) -> None:
        self.long = self._fresh().begin()
        self.n += 1
        self.long.create_namespace(f"long{self.n}")

    @precondition(lambda self: self.long is not None)
    @rule()
    def commit_long_transaction(self) -> None:
        txn, self.long = self.long, None
        try:
            txn.commit()
            _count("long_transactions")
        except TransactionConflictError:
            _count("long_transactions_conflicted")

    @rule()
    def abandon_transaction(self) -> None:
        """Staged files of a transaction that never commits: orphans once past the grace."""
        txn = self._fresh().begin()
        self.n += 1
        txn.create_table("a", f"gone{self.n}") if txn.namespace_exists("a") else txn.create_namespace(f"g{self.n}")
        staged = [p for p in txn.writes.values() if p]
        del txn  # its writer died: never committed, never rolled back (a rollback deletes what it staged)
        for p in staged:
            _age(self._path(p), OLD_S)

    @rule(kind=st.sampled_from(["owned_old", "owned_young", "foreign_old"]))
    def plant(self, kind: str) -> None:
        self.n += 1
        name = f"node-00000000-0000-4000-8000-{self.n:012d}.arrow"
        rel = hashed_path(name) if kind != "foreign_old" else f"notes/n{self.n}.arrow"
        path = self._path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"planted")
        if kind.endswith("_old"):
            _age(path, OLD_S)
        (self.young if kind == "owned_young" else self.foreign if kind == "foreign_old" else set()).add(rel)

    # ---- exports -----------------------------------------------------------------------------
    @rule(mode=st.sampled_from(["full", "partial", "minimal"]), back=st.integers(min_value=0, max_value=6))
    def export(self, mode: str, back: int) -> None:
        latest, d = self.o.latest()
        version = max(d.oldest_retained_version, latest - back)
        self.n += 1
        name = f"e{self.n}"
        run_local("export", self.lh.uri, name=name, target=os.path.join(self.dir, "exports", name), version=version,
                  mode=mode, depth=1)
        self.exports.append(name)
        _count(f"exports_{mode}")

    @precondition(lambda self: bool(self.exports))
    @rule(data=st.data())
    def drop_export(self, data: st.DataObject) -> None:
        from trinitylake.jobs.export.target import drop_export

        name = data.draw(st.sampled_from(self.exports))
        self.exports.remove(name)
        txn = self._fresh().begin()
        txn.mutate_definition(drop_export(name), f"drop export {name}")
        txn.commit()
        _count("export_drops")

    # ---- destructive jobs --------------------------------------------------------------------
    @rule(keep=st.integers(min_value=1, max_value=6))
    def expire(self, keep: int) -> None:
        latest, d = self.o.latest()
        if self.long is not None:  # its base version must stay (what the TTL rule guarantees)
            keep = max(keep, latest - self.long.begin_version + 1)
        floor = d.oldest_retained_version
        before = self.o.owned_files()
        res = run_local("expire", self.lh.uri, min_versions_to_keep=keep)
        latest2, d2 = self.o.latest()
        expired = list(range(floor, d2.oldest_retained_version))
        pins = list(d.exported_snapshot_pins.values())
        # The policy: everything but the newest `keep` versions, stopping at the first pin.
        assert d2.oldest_retained_version == max(floor, min(pins + [latest - keep + 1]))
        assert res.counts["versions_expired"] == len(expired)
        # Exactly the oracle's files of the expired versions that nothing live reaches.
        expected = (self.expired_files(expired) - self.o.live_files()) & before
        assert before - self.o.owned_files() == expected
        assert res.counts["deleted"] == len(expected)
        _count("expire_runs")
        _count("versions_expired", len(expired))
        _count("files_deleted_by_expire", len(expected))

    def expired_files(self, versions: list[int]) -> set[str]:
        # Read before the run through the snapshot's versions: their roots are gone now, so
        # the oracle walks the copies it keeps (see `invariants`).
        out: set[str] = set()
        for v in versions:
            out |= self.reach_before.get(v, set())
        return out

    @rule()
    def orphans(self) -> None:
        before = self.o.owned_files()
        live = self.o.live_files()
        reference = time.time()
        grace = TTL_MS / 1000
        old = {p for p in before if os.stat(self._path(p)).st_mtime < reference - grace}
        res = run_local("orphans", self.lh.uri, reference_time=int(reference * 1000))
        deleted = before - self.o.owned_files()
        assert deleted == old - live, (sorted(deleted - (old - live))[:3], sorted((old - live) - deleted)[:3])
        assert not deleted & self.young and all(os.path.exists(self._path(p)) for p in self.foreign)
        assert res.counts["deleted"] == len(deleted)
        _count("orphans_runs")
        _count("files_deleted_by_orphans", len(deleted))

    # ---- after every step --------------------------------------------------------------------
    @invariant()
    def oracle_agrees(self) -> None:
        if not hasattr(self, "o"):
            return
        with self.o.reading():  # one look at the lakehouse (see `tests.oracle.reader.LocalFiles`)
            problems, now = self.o.check(self.snap)
            assert problems == [], problems
            latest, d = self.o.latest()
            assert self.o.listed_versions() == list(range(d.oldest_retained_version, latest + 1))
            self.snap = now
            self.reach_before = {v: self.o.version_files([v]) for v in now.versions}
        _count("steps")


TestMaintenanceHistory = MaintenanceHistory.TestCase


@pytest.fixture(autouse=True)
def _settings(scale, ledger):
    TestMaintenanceHistory.settings = settings(
        max_examples=scale.property_examples, stateful_step_count=scale.property_steps, deadline=None,
        suppress_health_check=list(HealthCheck), derandomize=False, print_blob=True)
    FIGURES.clear()
    t0 = time.perf_counter()
    yield
    ledger.add("oracle", "random maintenance histories (Hypothesis state machine)", trials=FIGURES.get("examples", 0),
               seconds=time.perf_counter() - t0, **dict(sorted(FIGURES.items())))
