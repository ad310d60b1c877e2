"""The row-set interface (`trinitylake.rowsets`): every operation a job's step uses gives the
same rows on the driver (Arrow) and on the executors (Spark), and rows of both kinds meet
(a driver-held side of a join goes to the executors)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from trinitylake import rowsets
from trinitylake.rowsets import AllOf, Equals
from trinitylake.spark.execution import Execution
from trinitylake.spark.output import read_parquet_table

ROWS = pa.table({"path": ["a", "b", "c", "d", "e"], "kind": ["node", "node", "def", "def", "root"],
                 "size": pa.array([1, 2, 3, -1, 5], pa.int64()), "depth": pa.array([1, 2, 2, 3, 0], pa.int32())})
OTHER = pa.table({"path": ["b", "d", "x"]})


class _Known:
    """A predicate in both forms: a known size."""

    def arrow(self, table):
        return pc.greater_equal(table.column("size"), 0)

    def column(self, functions):
        return functions.col("size") >= 0


def _double(batches):
    for b in batches:
        yield pa.RecordBatch.from_arrays([b.column(0), pc.multiply(b.column(2), 2)],
                                         schema=pa.schema([("path", pa.string()), ("twice", pa.int64())]))


@pytest.fixture(params=["local", "distributed"])
def place(request, spark):
    ex = Execution(request.param, spark=spark)
    return rowsets.place(ex, ROWS.num_rows)


def _sorted(rows):
    t = rows.to_table()
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


def test_every_operation_gives_the_same_rows_wherever_the_step_runs(place, tmp_path):
    rows = place.rows(ROWS)
    assert rows.where == place.where
    other = place.rows(OTHER)
    assert _sorted(rows.filter(_Known()).select("path")) == [("a",), ("b",), ("c",), ("e",)]
    assert _sorted(rows.anti_join(other).select("path")) == [("a",), ("c",), ("e",)]
    assert _sorted(rows.semi_join(other).select("path")) == [("b",), ("d",)]
    assert len(_sorted(rows.union(rows))) == 10
    assert rows.totals() == (5,)
    assert rows.totals("size", _Known(), (_Known(), "size")) == (5, 10, 4, 11)
    assert rows.filter(Equals("kind", "nothing")).totals("size") == (0, 0)
    assert rows.count_by(["kind"], "size") == {("node",): (2, 3), ("def",): (2, 2), ("root",): (1, 5)}
    assert rows.count_by(["kind", ("known", _Known())]) == {("node", True): (2, 0), ("def", True): (1, 0),
                                                            ("def", False): (1, 0), ("root", True): (1, 0)}
    assert rows.distinct_count("kind") == 3
    assert _sorted(rows.filter(AllOf(Equals("kind", "def"), Equals("depth", 2))).select("path")) == [("c",)]
    assert _sorted(rows.filter(Equals("kind", "root", negate=True)).select("path")) == [("a",), ("b",), ("c",),
                                                                                         ("d",)]
    mapped = rows.map_batches(_double, pa.schema([("path", pa.string()), ("twice", pa.int64())]), 3, in_flight=2)
    assert _sorted(mapped) == [("a", 2), ("b", 4), ("c", 6), ("d", -2), ("e", 10)]
    assert len(rows.head(2, "path", "size")) == 2
    kept = rows.keep(eager=True)
    assert kept.totals("size") == (5, 10)
    uri = kept.write(str(tmp_path / "out"), None, 5)
    assert sorted(read_parquet_table(uri).column("path").to_pylist()) == ["a", "b", "c", "d", "e"]
    kept.release()


def test_a_driver_side_meets_an_executor_side_on_the_executors(spark):
    ex = Execution("auto", spark=spark)
    here = rowsets.driver(ex, ROWS)
    there = rowsets.executors(ex, ex.to_df(OTHER))
    assert here.where == "local" and there.where == "distributed"
    gone = here.anti_join(there)
    assert gone.where == "distributed" and _sorted(gone.select("path")) == [("a",), ("c",), ("e",)]
    assert here.union(there.select("path").map_batches(_pad, ROWS.schema, 1)).where == "distributed"
    assert rowsets.place(ex, 0, inputs=(here, there)).where == "distributed"
    assert rowsets.place(ex, 0, inputs=(here,)).where == "local"


def _pad(batches):
    for b in batches:
        n = b.num_rows
        yield pa.RecordBatch.from_arrays([b.column(0), pa.array(["x"] * n), pa.array([0] * n, pa.int64()),
                                          pa.array([0] * n, pa.int32())], schema=ROWS.schema)


def test_executor_failures_are_named_plainly_and_driver_errors_pass_as_raised(spark):
    from trinitylake.errors import StorageError

    ex = Execution("auto", spark=spark)

    def boom(batches):
        for _ in batches:
            raise ValueError("boom")
        yield from ()

    for where, expected in (("local", ValueError), ("distributed", StorageError)):
        step = rowsets.Place(ex, where)
        with pytest.raises(expected), step.executor_failures("the test job", "re-run it"):
            list(step.rows(ROWS).map_batches(boom, ROWS.schema, 2).batches())


def _kinds_of_task(batches):
    """One row per task: its number and the distinct kinds it got."""
    kinds = sorted({k for b in batches for k in b.column(1).to_pylist()})
    yield pa.RecordBatch.from_arrays([pa.array([rowsets.task_number()], pa.int64()), pa.array([",".join(kinds)])],
                                     names=["task", "kinds"])


@pytest.mark.parametrize("by_range", [False, True])
def test_rows_of_one_value_meet_in_one_task_and_tasks_are_numbered(place, by_range):
    rows = place.rows(pa.concat_tables([ROWS, ROWS, ROWS]))
    out = rows.map_batches(_kinds_of_task, pa.schema([("task", pa.int64()), ("kinds", pa.string())]), 3,
                           in_flight=2, by="kind", by_range=by_range).to_table()
    kinds = [k for ks in out.column("kinds").to_pylist() for k in ks.split(",") if k]
    assert sorted(kinds) == ["def", "node", "root"]  # each kind in exactly one task
    tasks = out.column("task").to_pylist()
    assert len(set(tasks)) == len(tasks) and all(0 <= t < 3 for t in tasks)


def test_a_driver_cut_by_value_never_splits_a_run_of_equal_values():
    from trinitylake.rowsets.arrow_rows import _slices

    table = pa.table({"k": ["a"] * 5 + ["b"] + ["c"] * 4})
    cut = _slices(table, 4, "k")
    assert sum(t.num_rows for t in cut) == 10
    assert [sorted(set(t.column("k").to_pylist())) for t in cut] == [["a"], ["b"], ["c"]]
    assert [t.num_rows for t in _slices(table, 10, "k")] == [5, 1, 4]


def test_first_and_distinct_rows_are_the_same_wherever_the_step_runs(place):
    rows = place.rows(pa.table({"path": ["b", "a", "b", "a", "c"], "v": pa.array([2, 3, 1, 3, 5], pa.int64()),
                                "w": ["x", "z", "y", "y", "q"]}))
    assert _sorted(rows.first_by("path", "v")) == [("a", 3, "y"), ("b", 1, "y"), ("c", 5, "q")]
    assert _sorted(rows.distinct("path")) == [("a",), ("b",), ("c",)]
