"""Invariant checks shared by the reliability tests.

A lakehouse is healthy when

* versions are contiguous from the oldest listed root to the latest (no gaps, no fork);
* every version reads: its root and lakehouse definition load, every namespace and table
  lists, and every file its tree references exists (a walk with no missing node and no
  missing definition);
* every acknowledged commit (a version whose commit call returned) that is still retained is
  present and holds what that commit wrote.

`Verifier` checks incrementally: node and definition files are immutable, so a file found
once need not be read again, and a version verified once need not be listed again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinitylake.errors import TrinityLakeError
from trinitylake.lakehouse import Lakehouse
from trinitylake.maintenance.reach import Reader, reference_walk
from trinitylake.storage.faults import uninstall


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

    def open(self) -> Lakehouse:
        return Lakehouse.open(self.uri, storage_options=self.options, audit=False)

    def check(self, new_acks: list[Ack] = (), *, one_table_per_version_from: int | None = None) -> list[str]:
        """Check the lakehouse now; returns (and accumulates) the problems found.

        `one_table_per_version_from`: from that version on, every version must add exactly one
        table to the version before it and drop none (the crash tests' workload).
        """
        uninstall()  # the checks themselves never run under injected faults
        found: list[str] = []
        self.acks.extend(new_acks)
        try:
            lh = self.open()
            latest = lh.latest_version()
            listed = sorted(v for v in lh._listed_versions() if v <= latest)
        except TrinityLakeError as e:
            found.append(f"cannot open the lakehouse: {type(e).__name__}: {e}")
            self.problems.extend(found)
            return found
        d = lh.load_root(latest).lakehouse_def
        # The floor is what the lakehouse committed to keep, never the oldest root that happens
        # to be left: an expire that deleted one retained root too many must be reported.
        retained_floor = int(getattr(d, "oldest_retained_version", 0) or 0)
        if retained_floor < self.floor_seen:
            found.append(f"oldest_retained_version went down from {self.floor_seen} to {retained_floor}")
        self.floor_seen = max(self.floor_seen, retained_floor)
        gaps = sorted(set(range(retained_floor, latest + 1)) - set(listed))
        if gaps:
            found.append(f"versions missing between {retained_floor} and {latest}: {gaps[:10]}")
        start = max(retained_floor, self.verified_upto + 1)
        new_versions = [v for v in range(start, latest + 1) if v in set(listed)]
        for v in new_versions:
            try:
                view = lh.view(version=v)
                names = set()
                for ns in view.list_namespaces():
                    for t in view.list_tables(ns):
                        names.add(f"{ns}.{t}")
                self.tables[v] = frozenset(names)
                self.versions_read += 1
            except TrinityLakeError as e:
                found.append(f"version {v} does not read: {type(e).__name__}: {e}")
        if new_versions:
            try:
                walk = reference_walk(Reader(lh.storage.root, lh.storage.options), [(v, _root(v)) for v in new_versions],
                                      exclude=self.verified_files, sizes=True)
                missing = sorted(k for k, r in walk.rows.items() if r.size < 0)
                if missing:
                    found.append(f"{len(missing)} referenced files are missing, e.g. {missing[:3]}")
                self.verified_files.update(k for k, r in walk.rows.items() if r.size >= 0)
            except TrinityLakeError as e:
                found.append(f"versions {new_versions[0]}..{new_versions[-1]} do not walk: {type(e).__name__}: {e}")
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
        found = []
        lh = self.open()
        d = lh.load_root(lh.latest_version()).lakehouse_def
        floor = int(getattr(d, "oldest_retained_version", 0) or 0)  # committed, not the oldest root left
        for a in self.acks:
            if a.version < floor:
                continue
            try:
                if not lh.view(version=a.version).table_exists(a.ns, a.table):
                    found.append(f"acknowledged version {a.version} lost {a.ns}.{a.table}")
            except TrinityLakeError as e:
                found.append(f"acknowledged version {a.version} does not read: {type(e).__name__}: {e}")
        self.problems.extend(found)
        return found


def _root(v: int) -> str:
    from trinitylake.format.paths import root_name

    return root_name(v)


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
