"""Randomized histories of Iceberg tables and their maintenance, checked by the tests' own
oracle of table files (`tests.iceberg.table_oracle`: plain JSON and an Avro reader of its own,
nothing of the library's maintenance code).

Hypothesis draws a sequence of steps over two tables of one lakehouse (each with two snapshots
to start with):

* table commits through PyIceberg on `TrinityLakeCatalog`: append, overwrite, delete of some rows;
* the lakehouse's own expire, keeping 1-3 versions (its clock set ahead, as `tests.support.jobs`
  does, so no step sleeps);
* ``tables_expire`` (all tables or one; three times in four every snapshot old enough, else
  none; 1-3 kept per branch); every history ends with the lakehouse's expire keeping three
  versions and then one over all tables, every snapshot old enough and one kept per branch, so
  that most runs expire snapshots, some of them deferred for the oldest retained version;
* ``tables_orphans`` after planting old and young junk files under a table's location;
* a pinned minimal export of a retained version (the real export job), and dropping one.

After every step:

* every file the oracle says is live exists: every snapshot of each table's current metadata
  and, for every retained or pinned lakehouse version, pinned export and live distributed
  transaction, the metadata file it points at, that file's current snapshot and its log (which
  roots those are, and their pointers, the lakehouse oracle reads itself: `tests.oracle.tables`);
* what a step deleted, the oracle allowed: a table commit and the lakehouse's expire delete no
  table file; after ``tables_expire`` every table file that nothing live reaches is gone (what a
  retained version reached stays deferred until that version expires) and nothing live went;
  ``tables_orphans`` deletes exactly the oracle's orphans (files under a table's location, not
  hidden, older than 3 days, that nothing live reaches);
* time travel to every retained lakehouse version reads each table, through PyIceberg, with
  the rows it had when that version was made; the latest reads the rows of the last commit.

Sizes follow the reliability suite's scale (``TLAKE_RELIABILITY_SCALE``, ``ci`` by default).
The ledger reports the histories under RELIABILITY.md's ``tables`` category: histories (trials),
steps (inputs), the histories that lost data (a live table file gone or a version reading other
rows: `DataLost`), how many snapshots the runs expired and how many runs expired any; the test
fails unless most runs expired some.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.iceberg import table_oracle as oracle
from tests.iceberg.tables_setup import DAY_S, open_catalog, plant
from tests.oracle.expect import latest_version, oracle_for
from tests.support.jobs import TTL_MS, run_local
from trinitylake.lakehouse import Lakehouse

TABLES = ("s.a", "s.b")
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
#: (examples, most drawn steps per example, before the two closing ones) per scale: ci stays
#: under a minute on 2 cores.
SIZES = {"ci": (6, 4), "full": (40, 12)}

TABLE = st.sampled_from(TABLES)
COMMIT = st.one_of(
    st.tuples(st.just("append"), TABLE, st.integers(1, 3)),
    st.tuples(st.just("overwrite"), TABLE, st.integers(1, 3)),
    st.tuples(st.just("delete"), TABLE, st.integers(0, 2)),
)
STEP = st.one_of(
    COMMIT,
    COMMIT,  # commits twice as likely as each job: the jobs find history to work on
    st.tuples(st.just("lakehouse_expire"), st.integers(1, 3)),
    st.tuples(
        st.just("tables_expire"), st.sampled_from(["all", *TABLES]), st.sampled_from([True, True, True, False]),
        st.integers(1, 3)
    ),
    st.tuples(st.just("tables_orphans"), TABLE, st.integers(0, 2), st.integers(0, 1)),
    st.one_of(st.tuples(st.just("pin"), st.integers(0, 3)), st.tuples(st.just("unpin"))),
)
#: Every history ends with these: the lakehouse keeps its last three versions (the expiry's own
#: commit, the last state and the one before it: a retained version that points at older table
#: metadata, when the last step committed), then every snapshot old enough expires, one kept
#: per branch.
CLOSING = [("lakehouse_expire", 3), ("tables_expire", "all", True, 1)]


class DataLost(AssertionError):
    """A check that found data lost: a live table file missing, or a version reading other rows."""


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "v": [f"r{i}" for i in ids]}, schema=SCHEMA)


def _ids(table: Any) -> list[int]:
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def _files(root: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


class History:
    """One lakehouse with two tables, the rows each version read when it was made, and every
    metadata file ever current (the oracle's universe of table files)."""

    def __init__(self, root: str):
        self.uri = os.path.join(root, "lh")
        Lakehouse.create(self.uri, audit=False, txn_ttl_millis=TTL_MS)
        self.cat = open_catalog(self.uri)
        self.cat.create_namespace("s")
        for n in TABLES:
            self.cat.create_table(n, schema=SCHEMA)
        self.rows: dict[int, dict[str, list[int]]] = {}
        self.metadata_files: set[str] = set()
        self.next_id = 0
        self.root = root
        self.exports: list[str] = []  # pinned minimal exports, oldest first
        self.record()
        for n in TABLES:  # two snapshots each to start with: the random steps have history to expire
            for _ in range(2):
                self.cat.load_table(n).append(_rows(self.fresh(1)))
                self.record()

    def lakehouse(self) -> Lakehouse:
        return Lakehouse.open(self.uri, audit=False)

    def record(self) -> None:
        """The rows of each table at the latest version (the oracle's), and its metadata files."""
        v = latest_version(oracle_for(self.uri))
        self.rows[v] = {n: _ids(self.cat.load_table(n)) for n in TABLES}
        self.see()

    def see(self) -> None:
        for loc in oracle.current_metadata(self.uri).values():
            self.metadata_files.add(loc)
            self.metadata_files |= oracle.log_of(oracle.metadata(loc))

    def fresh(self, n: int) -> list[int]:
        self.next_id += n
        return list(range(self.next_id - n, self.next_id))

    def retained(self) -> list[int]:
        """Retained and pinned versions, by the lakehouse oracle's own listing."""
        return oracle.retained_versions(self.uri)

    def live(self) -> set[str]:
        """The oracle's live set: the tables' current metadata and the pointers of every root
        that keeps table metadata (the lakehouse oracle reads which, and where they point)."""
        pointed = sorted(oracle.retained_metadata(self.uri))
        current = sorted(oracle.current_metadata(self.uri).values())
        try:
            return oracle.expected_live(current, pointed)
        except FileNotFoundError as e:  # a manifest list or manifest live metadata names is gone
            named = [p for p in oracle.live_problems(self.uri, current, set())[0] if "missing" in p]
            raise DataLost(f"a live table file was deleted: {e.filename} ({named[:2]})") from e

    def locations(self) -> list[str]:
        return [oracle.local(self.cat.load_table(n).metadata.location) for n in TABLES]

    def table_files(self) -> set[str]:
        return set().union(*(_files(loc) for loc in self.locations()))


def _orphans_by_oracle(h: History, live: set[str], now: float) -> set[str]:
    """Files under a table's location that are not hidden, older than 3 days and not live."""
    out = set()
    for loc in h.locations():
        for p in _files(loc):
            rel = os.path.relpath(p, loc)
            hidden = any(part[:1] in ("_", ".") and "=" not in part for part in rel.split("/"))
            if not hidden and p not in live and os.stat(p).st_mtime < now - 3 * DAY_S:
                out.add(p)
    return out


def _step(h: History, step: tuple, seen: dict[str, int]) -> None:
    kind = step[0]
    seen[kind] = seen.get(kind, 0) + 1
    before = h.table_files()
    live_before = h.live()
    if kind in ("append", "overwrite", "delete"):
        t = h.cat.load_table(step[1])
        if kind == "append":
            t.append(_rows(h.fresh(step[2])))
        elif kind == "overwrite":
            t.overwrite(_rows(h.fresh(step[2])))
        else:
            current = _ids(t)
            if not current:
                return
            t.delete(f"id <= {current[min(step[2], len(current) - 1)]}")
        h.record()
        assert not before - h.table_files(), f"{step}: a table commit deleted table files"
    elif kind == "lakehouse_expire":
        assert run_local("expire", h.uri, min_versions_to_keep=step[1]).status == "succeeded"
        assert h.table_files() == before, f"{step}: the lakehouse's expire touched table files"
    elif kind == "tables_expire":
        _, which, everything, keep = step
        overrides: dict[str, Any] = {"retain_last": keep, "older_than": 0 if everything else 10 * DAY_S * 1000}
        if which != "all":
            overrides["tables"] = which
        r = run_local("tables_expire", h.uri, **overrides)
        assert r.status == "succeeded", r.error
        h.see()
        live = h.live()
        universe = oracle.ever_reached(h.metadata_files) | live
        after = h.table_files()
        if (live & before) - after:
            raise DataLost(f"{step}: live files deleted: {sorted((live & before) - after)[:3]}")
        kept = sorted((universe - live) & after)
        assert not kept, f"{step}: files nothing live reaches were kept: {kept[:3]}"
        assert r.counts.get("deleted", 0) == len(before - after), f"{step}: {r.counts} vs {len(before - after)} gone"
        if r.counts.get("snapshots_expired"):
            seen["snapshots_expired"] = seen.get("snapshots_expired", 0) + r.counts["snapshots_expired"]
            seen["expired_this_run"] = 1
    elif kind == "pin":
        _pin(h, step[1])
        assert h.table_files() == before, f"{step}: an export touched table files"
    elif kind == "unpin":
        if not h.exports:
            return
        from trinitylake.jobs.export.target import drop_export

        name = h.exports.pop(0)
        txn = h.lakehouse().begin()
        txn.mutate_definition(drop_export(name), f"drop export {name}")
        txn.commit()
    else:
        _, table, n_old, n_young = step
        data = os.path.join(oracle.local(h.cat.load_table(table).metadata.location), "data")
        stamp = time.time_ns()
        for i in range(n_old):
            plant(data, f"old-{stamp}-{i}.parquet", 10)
        plant(data, f"_hidden-{stamp}.parquet", 10)
        for i in range(n_young):
            plant(data, f"young-{stamp}-{i}.parquet", 1)
        before = h.table_files()
        want = _orphans_by_oracle(h, live_before, time.time())
        r = run_local("tables_orphans", h.uri)
        assert r.status == "succeeded", r.error
        gone = before - h.table_files()
        assert gone == want, f"{step}: deleted {sorted(gone)[:3]}, the oracle's orphans {sorted(want)[:3]}"
        seen["orphans_deleted"] = seen.get("orphans_deleted", 0) + len(gone)
    _check_reads(h, step)


def _pin(h: History, back: int) -> None:
    """A minimal export (the real export job) of a retained version `back` below the latest:
    recorded and pinned, its root full URIs into the source."""
    o = oracle_for(h.uri)
    latest = o.latest()[0]
    name = f"e{time.time_ns()}"
    r = run_local("export", h.uri, name=name, target=os.path.join(h.root, "exports", name),
                  version=max(o.oldest_retained(), latest - back), mode="minimal")
    assert r.status == "succeeded", r.error
    assert name in oracle_for(h.uri).latest()[1].exported_snapshot_pins, f"export {name} is not pinned"
    h.exports.append(name)


def _check_reads(h: History, step: tuple) -> None:
    live = h.live()
    missing = sorted(p for p in live if not os.path.exists(p))
    if missing:
        raise DataLost(f"after {step}: live files missing: {missing[:3]}")
    latest = h.lakehouse().latest_version()
    for v in h.retained():
        made = max((u for u in h.rows if u <= v), default=None)
        if made is None:
            continue
        at = h.cat.at_version(v)
        for n, want in h.rows[made].items():
            if _ids(at.load_table(n)) != want:
                raise DataLost(f"after {step}: version {v} reads other rows of {n}")
    last = h.rows[max(h.rows)]
    if {n: _ids(h.cat.load_table(n)) for n in TABLES} != last:
        raise DataLost(f"after {step}: latest {latest} rows differ")


def test_random_table_histories_with_both_levels_of_maintenance(ledger, scale) -> None:
    examples, max_steps = SIZES.get(scale.name, SIZES["ci"])
    seen: dict[str, int] = {"examples": 0, "steps": 0, "data_lost": 0}

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(STEP, min_size=3, max_size=max_steps))
    def history(steps: list[tuple]) -> None:
        seen["examples"] += 1
        seen["expired_this_run"] = 0
        root = tempfile.mkdtemp(prefix="tl-fuzz-tables-")
        try:
            h = History(root)
            for step in [*steps, *CLOSING]:
                seen["steps"] += 1
                _step(h, step, seen)
        except DataLost:
            seen["data_lost"] += 1  # this history (shrinking replays count as histories too)
            raise
        finally:
            shutil.rmtree(root, ignore_errors=True)
        seen["runs_with_expiry"] = seen.get("runs_with_expiry", 0) + seen.pop("expired_this_run")

    t0 = time.perf_counter()
    try:
        history()
    finally:  # a failed run records its figures too (a partial results file: never RELIABILITY.md)
        ledger.add(
            "tables",
            "table histories: commits, lakehouse expire, tables expire and orphans (oracle-checked)",
            inputs=seen["steps"],
            trials=seen["examples"],
            data_lost=seen["data_lost"],
            seconds=time.perf_counter() - t0,
            outcomes={k: v for k, v in seen.items() if k not in ("examples", "steps", "data_lost", "expired_this_run")},
        )
    print(f"table histories: {seen['examples']} runs, {seen.get('runs_with_expiry', 0)} expired snapshots "
          f"({seen.get('snapshots_expired', 0)} in all)")
    # Each history starts with two snapshots per table and closes with an expiry of every snapshot
    # but the newest per branch, so a history that runs to its end expires snapshots (in its
    # closing step or an earlier one). A fuzz where most runs expire nothing tests expiry blind:
    # before the closing steps, 33 full-scale runs expired 11 snapshots in all.
    assert seen["examples"] >= 1 and 2 * seen.get("runs_with_expiry", 0) > seen["examples"], seen
