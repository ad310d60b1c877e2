"""The catalog benchmark's writers (bench/bench_catalog_commits.py), as threads and as forked
processes, against PyIceberg's SqlCatalog on SQLite: every writer commits to its own table for
the time given, and the counts of every writer reach the result (a process's through a queue).
A writer's failure is raised, not counted as a slow run."""

from __future__ import annotations

import pytest

pytest.importorskip("sqlalchemy")

from bench.bench_catalog_commits import SCHEMA, hammer, sqlite_catalog  # noqa: E402


@pytest.mark.parametrize("clients", ["threads", "processes"])
def test_every_writer_commits_to_its_own_table_and_is_counted(tmp_path, clients):
    with sqlite_catalog(tmp_path) as make:
        cat = make()
        cat.create_namespace("n")
        for i in range(2):  # every commit's metadata file stays in the log (100 by default)
            cat.create_table(f"n.t{i}", schema=SCHEMA, properties={"write.metadata.previous-versions-max": "100000"})
        r = hammer(make, "n", 2, 1.0, "property", clients)
        histories = [len(cat.load_table(f"n.t{i}").metadata.metadata_log) for i in range(2)]
    assert r["refused"] == 0 and r["commits"] > 0
    assert r["commits"] == sum(histories)  # each commit one metadata file of its own table
    assert all(h > 0 for h in histories)  # both writers committed
    assert r["commits_per_s"] > 0


@pytest.mark.parametrize("clients", ["threads", "processes"])
def test_a_writer_s_failure_is_raised(tmp_path, clients):
    with sqlite_catalog(tmp_path) as make:
        make().create_namespace("n")  # no tables: every writer's load fails
        with pytest.raises(Exception, match="t0|t1|NoSuchTable|does not exist"):
            hammer(make, "n", 2, 1.0, "property", clients)


def test_paired_loads_take_turns_between_the_catalogs_and_fill_each_row() -> None:
    """The catalogs' loads are interleaved, one of each per round with the first rotating, so
    a drift of the machine's speed lands on all of them alike; each row gets its p50 and p95."""
    from bench.bench_catalog_commits import paired_loads

    calls: list[str] = []

    class Table:
        def append(self, _data) -> None:
            pass

    class Catalog:
        def __init__(self, name: str) -> None:
            self.name = name

        def create_namespace(self, _ns) -> None:
            pass

        def create_table(self, _name, schema) -> Table:
            return Table()

        def load_table(self, _name) -> None:
            calls.append(self.name)

    rows = [{"catalog": "a"}, {"catalog": "b"}, {"catalog": "c"}]
    paired_loads([(row, lambda name=row["catalog"]: Catalog(name)) for row in rows], 4)
    measured = calls[15:]  # after each catalog's 5 warm-up loads
    assert measured == list("abc" "bca" "cab" "abc")
    assert all(row["load_ms_p50"] >= 0 and row["load_ms_p95"] >= row["load_ms_p50"] for row in rows)


def test_the_null_catalog_answers_every_writer_with_its_canned_table(tmp_path):
    """The clients' ceiling: writers load and commit against the null catalog as against a real
    one, and every commit is answered with the canned table (nothing refused, nothing kept)."""
    from bench.bench_catalog_commits import canned_load, client_ceiling
    from bench.null_catalog import null_catalog

    with sqlite_catalog(tmp_path / "sq") as make:
        cat = make()
        cat.create_namespace("n")
        cat.create_table("n.t0", schema=SCHEMA)
        canned = canned_load(make, "n.t0")
    with null_catalog(tmp_path / "null", canned) as null_make:
        t = null_make().load_table("any.table")
        assert t.metadata_location == cat.load_table("n.t0").metadata_location
        r = hammer(null_make, "null", 2, 0.5, "property", "threads")
        assert r["refused"] == 0 and r["commits"] > 0
        row = client_ceiling(null_make, {"seconds": 0.3})
    assert set(row) == {"catalog", "property_w1_per_s", "property_w8_per_s", "property_w1_procs_per_s",
                        "property_w8_procs_per_s"}
    assert all(v > 0 for k, v in row.items() if k != "catalog")


def test_server_cpu_is_read_for_our_server_only():
    import os

    from bench.bench_catalog_commits import server_cpu_s

    assert server_cpu_s(lambda: None) is None  # not our server: no pid

    def ours() -> None:
        return None

    ours.server_pid = os.getpid()  # type: ignore[attr-defined]
    before = server_cpu_s(ours)
    sum(i * i for i in range(2_000_000))  # some CPU of this process
    after = server_cpu_s(ours)
    assert before is not None and after is not None and after > before
