"""Invariant checks shared by the reliability tests, computed by the independent oracle
(`tests.oracle`: a reader written from the spec that shares no code with the library's tree,
walk, storage or retention rules). The library is used here only to open a lakehouse for the
tests that drive it (`Verifier.open`); no expected value comes from it.

A lakehouse is healthy when

* versions are contiguous from the committed ``oldest_retained_version`` to the latest root
  listed (no gaps, no fork);
* every version reads: its root and lakehouse definition parse, its tree merges, every key
  decodes, and every file its tree references exists (the oracle's walk finds nothing missing);
* every acknowledged commit (a version whose commit call returned) that is still retained is
  present and holds what that commit wrote.

`Verifier` checks incrementally: node and definition files are immutable, so a file found
once need not be read again, and a version verified once need not be listed again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.format.oracle import root_name
from tests.oracle import expect as E
from tests.oracle.reader import NodeFile, OracleError

try:
    from tests.support.faults import uninstall
except ImportError:  # before the fault injector moved under tests/
    from trinitylake.storage.faults import uninstall  # type: ignore[no-redef]


@dataclass
class Ack:
    """An acknowledged commit: `version` returned by a commit that created `ns.table`."""

    version: int
    ns: str
    table: str


@dataclass
class Verifier:
    uri: str
    options: dict[str, Any] | None = None
    verified_files: set[str] = field(default_factory=set)
    verified_upto: int = -1
    tables: dict[int, frozenset[str]] = field(default_factory=dict)
    acks: list[Ack] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    versions_read: int = 0
    floor_seen: int = 0
    _nodes: dict[str, NodeFile] = field(default_factory=dict, repr=False)

    def open(self) -> Any:
        """The library's `Lakehouse` (for tests that drive it; never for an expected value)."""
        from trinitylake.lakehouse import Lakehouse

        return Lakehouse.open(self.uri, storage_options=self.options, audit=False)

    def oracle(self) -> Any:
        return E.oracle_for(self.uri, self.options)

    def latest(self) -> int:
        """The latest version: the highest root file listed, by the oracle."""
        uninstall()
        return E.latest_version(self.oracle())

    def check(self, new_acks: list[Ack] = (), *, one_table_per_version_from: int | None = None) -> list[str]:
        """Check the lakehouse now; returns (and accumulates) the problems found.

        `one_table_per_version_from`: from that version on, every version must add exactly one
        table to the version before it and drop none (the crash tests' workload).
        """
        uninstall()  # the checks themselves never run under injected faults
        found: list[str] = []
        self.acks.extend(new_acks)
        o = self.oracle()
        try:
            listed = o.listed_versions()  # one listing: writers may commit while we check
            if not listed:
                raise OracleError(f"no root file under {o.root}")
            latest = listed[-1]
            d = E.definition_of(o, latest)
        except OracleError as e:
            found.append(f"cannot open the lakehouse: {e}")
            self.problems.extend(found)
            return found
        # The floor is what the lakehouse committed to keep, never the oldest root that happens
        # to be left: an expire that deleted one retained root too many must be reported.
        retained_floor = int(d.oldest_retained_version)
        if retained_floor < self.floor_seen:
            found.append(f"oldest_retained_version went down from {self.floor_seen} to {retained_floor}")
        self.floor_seen = max(self.floor_seen, retained_floor)
        present = set(listed)
        gaps = sorted(set(range(retained_floor, latest + 1)) - present)
        if gaps:
            found.append(f"versions missing between {retained_floor} and {latest}: {gaps[:10]}")
        start = max(retained_floor, self.verified_upto + 1)
        new_versions = [v for v in range(start, latest + 1) if v in present]
        for v in new_versions:
            try:
                self.tables[v] = E.tables(o, v, self._nodes)
                self.versions_read += 1
            except (OracleError, UnicodeDecodeError) as e:
                found.append(f"version {v} does not read: {type(e).__name__}: {e}")
        if new_versions:
            try:
                walk = E.walk(o, [(v, f"{o.root}/{root_name(v)}") for v in new_versions],
                              exclude=self.verified_files)
                if walk.missing:
                    found.append(f"{len(walk.missing)} referenced files are missing, e.g. {sorted(walk.missing)[:3]}")
                self.verified_files.update(k for k, r in walk.rows.items() if r.size >= 0)
            except OracleError as e:
                found.append(f"versions {new_versions[0]}..{new_versions[-1]} do not walk: {e}")
        if one_table_per_version_from is not None:
            for v in new_versions:
                if v <= one_table_per_version_from or v - 1 not in self.tables or v not in self.tables:
                    continue
                before, after = self.tables[v - 1], self.tables[v]
                if not before <= after or len(after - before) != 1:
                    found.append(f"version {v} does not add exactly one table to version {v - 1}: "
                                 f"added {sorted(after - before)[:3]}, dropped {sorted(before - after)[:3]}")
        for a in new_acks:
            if a.version < retained_floor:
                continue  # expired since (legitimately; the stress test counts these)
            t = self.tables.get(a.version)
            if t is None:
                found.append(f"acknowledged version {a.version} ({a.ns}.{a.table}) is missing")
            elif f"{a.ns}.{a.table}" not in t:
                found.append(f"acknowledged version {a.version} does not hold {a.ns}.{a.table}")
            elif a.version - 1 in self.tables and f"{a.ns}.{a.table}" in self.tables[a.version - 1]:
                found.append(f"{a.ns}.{a.table} already existed before its acknowledged version {a.version}")
        if new_versions:
            self.verified_upto = new_versions[-1]
        self.problems.extend(found)
        return found

    def recheck_acks(self) -> list[str]:
        """Every acknowledged version that is still retained holds its table (read afresh)."""
        uninstall()
        found = []
        o = self.oracle()
        floor = E.floor(o)  # committed, not the oldest root left
        for a in self.acks:
            if a.version < floor:
                continue
            try:
                if f"{a.ns}.{a.table}" not in E.tables(o, a.version):
                    found.append(f"acknowledged version {a.version} lost {a.ns}.{a.table}")
            except (OracleError, UnicodeDecodeError) as e:
                found.append(f"acknowledged version {a.version} does not read: {type(e).__name__}: {e}")
        self.problems.extend(found)
        return found


def missing_reachable(uri: str, options: dict[str, Any] | None = None) -> tuple[int, int]:
    """(files the live roots reach that are missing, files they reach), by the oracle: every
    retained version from the committed floor, every export root and pinned version."""
    uninstall()
    o = E.oracle_for(uri, options)
    w = E.live_walk(o)
    return len(w.missing), len(w.rows)


def parse_acks(path: str) -> list[Ack]:
    """``ACK <version> <ns> <table>`` lines a writer process printed (after its commit returned)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 4 and parts[0] == "ACK" and line.endswith("\n"):
                    out.append(Ack(int(parts[1]), parts[2], parts[3]))
    except FileNotFoundError:
        pass
    return out
