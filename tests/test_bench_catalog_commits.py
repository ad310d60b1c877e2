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
