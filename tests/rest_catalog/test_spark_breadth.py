"""Spark's breadth through the catalog server (issue 53, item 6, and its must-show test): views,
branches and tags, the `CALL system.*` procedures, two concurrent writers, and Spark's own clean-up
(`expire_snapshots`, `DROP TABLE ... PURGE`), all in one Spark 4.1 session
(tests/rest_catalog/spark_breadth_job.py, `make spark41`).

After each scenario every retained lakehouse version reads every table, checked by the tests'
independent oracles and nothing of the library: the lakehouse's roots, trees and table
definitions by `tests.oracle` (the retained versions, each table's ``metadata_location``), the
tables' files by `tests.iceberg.table_oracle` (metadata JSON, the Avro manifest lists and
manifests), the rows by pyarrow's Parquet reader. Every file a retained version reaches must
exist, and a version reads the same rows at every later check as when it was first seen. At the
end each retained version is also read through the server's time travel (``version-N``) by
PyIceberg.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog

from tests.format.oracle import root_name
from tests.iceberg import table_oracle as O
from tests.oracle.expect import decode, merged_keys
from tests.oracle.reader import Oracle, in_one_call, root_base, system_rows
from tests.oracle.wire import as_str, fields, map_entry
from tests.rest_catalog.server import new_lakehouse

ROOT = Path(__file__).resolve().parents[2]
SPARK_PY = ROOT / ".venv-spark41" / "bin" / "python"
JAR = ROOT / "build" / "iceberg-spark41" / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
JOB = Path(__file__).with_name("spark_breadth_job.py")
NS = "breadth"
#: The procedures that only change metadata or write new files: each must work.
WORKING_PROCEDURES = ("ancestors_of", "rollback_to_snapshot", "set_current_snapshot", "rewrite_data_files",
                      "rewrite_manifests", "compute_table_stats", "create_changelog_view", "fast_forward",
                      "cherrypick_snapshot", "register_table")
#: The procedures that would delete files: each must refuse (the served tables carry gc.enabled=false).
DELETING_PROCEDURES = ("expire_snapshots", "remove_orphan_files")

pytestmark = pytest.mark.spark


# ---- the oracle's reading of every retained version -----------------------------------------------
def metadata_location(data: bytes, number: int = 9) -> str | None:
    """``metadata_location`` of a TableDef's ``format_properties`` (FORMAT.md §4: field 9, a
    map), or of a ViewDef's ``properties`` (`number` 6: where views keep their pointer)."""
    for n, _, v in fields(data):
        if n == number:
            k, val = map_entry(v, n)
            if k is not None and as_str(k, n) == "metadata_location" and val is not None:
                return as_str(val, n)
    return None


VIEW_PREFIX = "D==="  # FORMAT.md §3: schema 3, a view key is the prefix + padded namespace + padded name


@in_one_call
def retained_tables(o: Oracle) -> dict[int, dict[str, str]]:
    """version -> ``ns.table`` (or ``view ns.name``) -> metadata URI, for every listed version
    from the latest definition's ``oldest_retained_version`` to the latest."""
    latest, d = o.latest()
    out: dict[int, dict[str, str]] = {}
    cache: dict = {}
    for v in o.listed_versions():
        if not d.oldest_retained_version <= v <= latest:
            continue
        uri = f"{o.root}/{root_name(v)}"
        lh_def = o.definition(o.resolve(system_rows(o._read(uri, "root node file"), uri)["lakehouse_def"],
                                        root_base(uri)))
        ns_max, t_max = lh_def.namespace_name_max_size_bytes or 100, lh_def.table_name_max_size_bytes or 100
        v_max = lh_def.view_name_max_size_bytes or 100
        out[v] = {}
        for key, def_uri in merged_keys(o, uri, cache).items():
            if key.startswith(VIEW_PREFIX):
                b = key.encode()
                name = f"view {b[4:4 + ns_max].rstrip(b' ').decode()}.{b[4 + ns_max:4 + ns_max + v_max].rstrip(b' ').decode()}"
                number = 6
            else:
                names = decode(key, ns_max, t_max)
                if names is None or names[1] is None:
                    continue
                name, number = f"{names[0]}.{names[1]}", 9
            loc = metadata_location(o._read(def_uri, f"definition of {name} at version {v}"), number)
            if loc is not None:
                out[v][name] = o.resolve(loc, root_base(uri))
    return out


def view_sql(meta: dict[str, Any]) -> list[str]:
    """The SQL texts of a view metadata file's current version."""
    cur = next(x for x in meta["versions"] if x["version-id"] == meta["current-version-id"])
    return sorted(r["sql"] for r in cur.get("representations") or [] if r.get("type") == "sql")


def local(uri: str) -> str:
    """A local path from a table file's URI: Iceberg's Java FileIO writes ``file:/tmp/...``,
    PyIceberg ``file:///tmp/...``."""
    return uri[len("file://"):] if uri.startswith("file://") else uri[len("file:"):] if uri.startswith("file:") else uri


@functools.cache
def avro(path: str) -> list[dict[str, Any]]:
    """The records of a manifest list or manifest (immutable files: read once per test run)."""
    return O.avro_records(path)


@functools.cache
def parquet_column(path: str, column: str) -> list[Any]:
    return pq.read_table(path, columns=[column])[column].to_pylist()


def exists(path: str, missing: list[str], why: str) -> bool:
    if os.path.exists(path):
        return True
    missing.append(f"{why}: {path}")
    return False


def snapshot_rows(meta: dict[str, Any], snapshot_id: int, missing: list[str], why: str) -> list[int] | None:
    """The ids a snapshot reads (its data files less position deletes), or None when a file is
    missing (each one added to `missing`)."""
    snap = next((s for s in meta.get("snapshots") or [] if s["snapshot-id"] == snapshot_id), None)
    if snap is None:
        missing.append(f"{why}: snapshot {snapshot_id} is not in its metadata")
        return None
    ml = local(snap["manifest-list"])
    if not exists(ml, missing, f"{why}: manifest list"):
        return None
    data, deletes, ok = [], [], True
    for m in avro(ml):
        mp = local(m["manifest_path"])
        if not exists(mp, missing, f"{why}: manifest"):
            ok = False
            continue
        for e in avro(mp):
            if e["status"] == 2:
                continue
            f = e["data_file"]
            ok = exists(local(f["file_path"]), missing, f"{why}: data or delete file") and ok
            content = f.get("content", 0)
            assert content in (0, 1), f"{why}: equality deletes are not read by this oracle"
            (deletes if content == 1 else data).append(local(f["file_path"]))
    for st in meta.get("statistics") or []:
        if st["snapshot-id"] == snapshot_id:
            exists(local(st["statistics-path"]), missing, f"{why}: statistics file")
    if not ok:
        return None
    dropped: set[tuple[str, int]] = set()
    for d in deletes:
        paths, positions = parquet_column(d, "file_path"), parquet_column(d, "pos")
        dropped |= {(local(p), n) for p, n in zip(paths, positions, strict=True)}
    out: list[int] = []
    for f in data:
        col = parquet_column(f, "id")
        out += [x for i, x in enumerate(col) if (f, i) not in dropped]
    return sorted(out)


class Retained:
    """What every retained version read when the oracle first saw it: it must read the same later."""

    def __init__(self, lakehouse: str):
        self.lakehouse = lakehouse
        self.rows: dict[int, dict[str, list[Any] | None]] = {}
        self.versions: list[int] = []  # retained at the last check

    def check(self, phase: str) -> dict[str, list[Any] | None]:
        """Every retained version of every table: its files exist (the current snapshot; every
        snapshot of the latest version's metadata) and it reads what it read before. Returns the
        rows of the latest version."""
        missing: list[str] = []
        changed: list[str] = []
        tables = retained_tables(Oracle(self.lakehouse))
        latest = max(tables)
        self.versions = sorted(tables)
        for v, pointers in sorted(tables.items()):
            now: dict[str, list[Any] | None] = {}
            for name, loc in sorted(pointers.items()):
                why = f"version {v}, table {name}"
                if not exists(local(loc), missing, f"{why}: metadata file"):
                    now[name] = None
                    continue
                meta = O.metadata(local(loc))
                if name.startswith("view "):
                    now[name] = view_sql(meta)
                    continue
                cur = meta.get("current-snapshot-id")
                now[name] = [] if cur in (None, -1) else snapshot_rows(meta, cur, missing, why)
                if v == latest:  # the table as it is now: every snapshot of its metadata reads
                    for s in meta.get("snapshots") or []:
                        snapshot_rows(meta, s["snapshot-id"], missing, f"{why}, snapshot {s['snapshot-id']}")
            before = self.rows.setdefault(v, now)
            changed += [f"version {v} {n}: {before.get(n)} then {now.get(n)}" for n in sorted(set(before) | set(now))
                        if before.get(n) != now.get(n)]
        assert not missing, f"{phase}: files retained versions need are gone ({len(missing)}):\n" + "\n".join(
            sorted(set(missing))[:40])
        assert not changed, f"{phase}: retained versions read other rows than before:\n" + "\n".join(changed[:20])
        return self.rows[latest]


# ---- the Spark job, one scenario at a time ---------------------------------------------------------
class Job:
    def __init__(self, served, workdir: Path):
        env = {**os.environ, "TLAKE_CATALOG_TOKEN": served.token}
        env.pop("PYTHONPATH", None)
        self.stderr = workdir / "spark-breadth.err"
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen([str(SPARK_PY), str(JOB), str(JAR), served.url, NS], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True, env=env)

    def next(self, name: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("STEP "):
                out = json.loads(line[len("STEP "):])
                assert out["step"] == name, out
                return out
        self.proc.wait(60)
        raise AssertionError(f"the Spark job ended ({self.proc.returncode}) before {name}: "
                             f"{self.stderr.read_text(errors='replace')[-4000:]}")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(120)
            except (subprocess.TimeoutExpired, OSError, BrokenPipeError):
                self.proc.kill()
                self.proc.wait(10)


def refused_for_gc(error: str) -> bool:
    """A refusal that says why: Iceberg's own ("GC is disabled"), or one naming the lakehouse's job."""
    return "GC is disabled" in error or "tlake tables" in error


def ok(step: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in step, f"Spark's {step['step']} failed:\n{step['error']}"
    return step


def test_spark_views_branches_procedures_writers_and_clean_up_keep_every_retained_version(served, tmp_path):
    missing = [str(p) for p in (SPARK_PY, JAR) if not p.exists()]
    assert not missing, f"the Spark 4.1 environment is not built (run `make spark41`): missing {missing}"
    retained = Retained(served.lakehouse)
    job = Job(served, tmp_path)
    steps: dict[str, dict[str, Any]] = {}
    failures: list[str] = []

    def scenario(name: str, check) -> None:
        """The job's next scenario; its own assertions and the oracle's. A failed scenario is
        recorded and the next one still runs (one report of everything that is wrong)."""
        out = steps[name] = job.next(name)
        with open(tmp_path / "steps.jsonl", "a") as f:
            f.write(json.dumps(out) + "\n")
        try:
            check(ok(out))
        except AssertionError as e:
            failures.append(f"[{name}] {e}")
        try:
            retained.check(f"after {name}")
        except AssertionError as e:
            failures.append(f"[{name}: oracle] {e}")
        job.go()

    def setup(out):
        assert out["a"] == [1, 2, 3] and out["b"] == [10]
        assert retained.check("setup")[f"{NS}.a"] == [1, 2, 3]

    def views(out):
        assert out["select"] == [[2], [3]]
        assert out["show"] == ["big_a"]
        assert out["replaced"] == [[3]]
        assert out["after_drop"] == ["kept"]
        assert out["kept"] == [[1]]
        # the views as the lakehouse keeps them: the dropped one still read by earlier versions,
        # as created and as replaced, each in its own version
        latest = retained.check("views")
        assert f"view {NS}.kept" in latest and f"view {NS}.big_a" not in latest
        sqls = {tuple(r[f"view {NS}.big_a"] or ()) for r in retained.rows.values() if f"view {NS}.big_a" in r}
        assert len(sqls) == 2 and all(len(q) == 1 for q in sqls), sqls

    def branches_and_tags(out):
        assert out["main"] == [1, 2, 3, 5]
        assert out["dev"] == out["dev_by_identifier"] == [1, 2, 3, 4]
        assert out["tag"] == [1, 2, 3]
        assert out["refs"] == [["dev", "BRANCH"], ["first_three", "TAG"], ["main", "BRANCH"]]

    def procedures(out):
        calls = out["calls"]
        broken = {p: calls[p] for p in WORKING_PROCEDURES if "ok" not in calls[p]}
        assert not broken, f"procedures that should work failed: {json.dumps(broken, indent=1)}"
        deleted = {p: calls[p] for p in DELETING_PROCEDURES if "error" not in calls[p]}
        assert not deleted, f"procedures that would delete files were not refused: {deleted}"
        unclear = {p: calls[p]["error"] for p in DELETING_PROCEDURES if not refused_for_gc(calls[p]["error"])}
        assert not unclear, f"refused without saying why: {unclear}"
        assert out["rolled_back"] == [10, 11] and out["set_back"] == [10, 11, 12, 13]
        assert out["b"] == [10, 11, 12, 13, 14, 15, 16]  # fast-forwarded to ff (14), side (15) picked, 16 on main

    def concurrent_writers(out):
        assert not out["errors"], "a writer failed:\n" + "\n".join(out["errors"])
        want = [100, 101, 102, 103]
        assert out["own1"] == want and out["own2"] == [200, 201, 202, 203]
        assert out["shared"] == sorted(want + [200, 201, 202, 203]) and out["shared_snapshots"] == 8
        latest = retained.check("concurrent writers")
        assert latest[f"{NS}.shared"] == out["shared"] and latest[f"{NS}.own1"] == want

    def expire_and_purge(out):
        assert "own1" not in out["tables"] and out["a"] == [1, 2, 3, 5], out
        unclear = {k: out[k]["error"] for k in ("expire", "purge")
                   if "error" in out[k] and not refused_for_gc(out[k]["error"])}
        assert not unclear, f"refused without saying why: {unclear}"
        # the must-show: after Spark's expire_snapshots and DROP TABLE ... PURGE, every retained
        # version still reads every table: by the oracle (below, after this check) and by the
        # server's time travel, version by version, through PyIceberg
        oracle_rows = retained.check("expire and purge")
        assert f"{NS}.own1" not in oracle_rows
        read_through_time_travel(served, retained)

    for name, check in (("setup", setup), ("views", views), ("branches_and_tags", branches_and_tags),
                        ("procedures", procedures), ("concurrent_writers", concurrent_writers),
                        ("expire_and_purge", expire_and_purge)):
        try:
            scenario(name, check)
        except AssertionError as e:  # the job itself ended: nothing more to check
            failures.append(f"[{name}] {e}")
            break
    job.stop()
    assert not failures, "\n\n".join(failures)
    assert served.token not in served.output()


def read_through_time_travel(served, retained: Retained) -> None:
    """Every retained version of every table, read through the server's ``version-N`` prefix by
    PyIceberg, holds the rows the oracle read for it."""
    wrong = []
    for v in retained.versions:
        tables = retained.rows[v]
        if not any(rows is not None for rows in tables.values()):
            continue
        cat = RestCatalog(f"v{v}", uri=served.url, token=served.token, warehouse=f"version-{v}")
        for name, want in sorted(tables.items()):
            if name.startswith("view "):
                continue
            try:
                got = cat.load_table(name).scan(selected_fields=("id",)).to_arrow()
                ids = sorted(pc.cast(got["id"], "int64").to_pylist())
            except Exception as e:  # noqa: BLE001 - reported with the rest
                wrong.append(f"version {v} {name}: {type(e).__name__}: {str(e)[:300]}")
                continue
            if ids != want:
                wrong.append(f"version {v} {name}: {ids} through the server, {want} by the oracle")
    assert not wrong, "time travel through the server:\n" + "\n".join(wrong[:30])


def test_the_retained_versions_check_finds_a_file_an_earlier_version_needs_gone(tmp_path):
    """The check above can fail: a manifest list that only an earlier lakehouse version reads is
    deleted, as Spark's expire_snapshots would, and the check names it and the version."""
    uri = new_lakehouse(tmp_path / "lh", audit=False)
    cat = load_catalog("own", **{"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog", "lakehouse": uri,
                                 "audit": "false"})
    cat.create_namespace("s")
    schema = pa.schema([pa.field("id", pa.int64())])
    t = cat.create_table("s.t", schema=schema)
    t.append(pa.table({"id": [1, 2]}, schema=schema))
    first = cat.load_table("s.t").current_snapshot()
    cat.load_table("s.t").append(pa.table({"id": [3]}, schema=schema))
    retained = Retained(uri)
    assert retained.check("before")["s.t"] == [1, 2, 3]
    assert [1, 2] in [rows["s.t"] for rows in retained.rows.values() if rows.get("s.t") is not None]

    os.remove(local(first.manifest_list))
    with pytest.raises(AssertionError, match=r"(?s)files retained versions need are gone.*version \d+, table s\.t: "
                                             r"manifest list"):
        retained.check("after")
