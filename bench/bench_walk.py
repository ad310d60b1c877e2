"""Reachable walk: the distributed Spark walk against the same walk on the driver.

A lakehouse of N tables and V versions (`bench.generator`: build transactions plus churn, so
versions share most of their nodes copy-on-write) is walked from *every* version two ways,
on the same files, both by `trinitylake.treewalk.walker.walk_reachable_with_stats` (the
library's one walker):

* ``driver``: every level on the driver (``--execution local``): the batch node reader, level
  by level with the same deduplication, each node read and parsed once, in one process;
* ``spark``: every level on the executors of ``local[*]``; ``cold`` is the first walk of the
  session (JIT, Python workers), ``warm`` the best of the next runs.

Reported per row: wall seconds, node files read, unique node files, node reads per second.
``naive reads`` counts the node reads of walking each version on its own (no sharing across
versions), computed in memory from the walked graph: what deduplication saves.

    python -m bench.bench_walk [--scale small|large] [--tables N] [--versions V] [--keep]
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import Timer, parse_args, ratio, scratch_dir, write_result

SIZES = {
    "small": {"tables": 5000, "versions": 400, "order": 16, "node_max_bytes": 16 * 1024},
    "large": {"tables": 50_000, "versions": 2000, "order": 32, "node_max_bytes": 32 * 1024},
}


def _extra(p: Any) -> None:
    p.add_argument("--tables", type=int, default=None)
    p.add_argument("--versions", type=int, default=None)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--repeat", type=int, default=2, help="warm Spark walks (the best is reported)")


def naive_reads(rows: dict[str, Any], graph: dict[str, list[str]], roots: list[str]) -> int:
    """Node reads of walking every root separately (each version's whole tree)."""
    memo: dict[str, int] = {}

    def size(key: str) -> int:
        # Nodes under `key`, shared subtrees counted once per version walk (a tree, no DAG
        # inside one version, so a plain recursive sum is exact).
        if key not in memo:
            memo[key] = 1 + sum(size(c) for c in graph.get(key, ()))
        return memo[key]

    return sum(size(r) for r in roots)


def main(argv: list[str] | None = None) -> int:
    args = parse_args("walk", argv, _extra)
    size = dict(SIZES[args.scale])
    if args.tables:
        size["tables"] = args.tables
    if args.versions:
        size["versions"] = args.versions
    from bench.generator import generate
    from trinitylake.format.node import deserialize
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.spark.execution import Execution
    from trinitylake.spark.session import get_spark
    from trinitylake.treewalk import reach as R
    from trinitylake.treewalk import walk_roots as WR
    from trinitylake.treewalk.walker import walk_reachable_with_stats

    t_all = time.perf_counter()
    with scratch_dir("walk", keep=args.keep) as d:
        uri = str(d / "lh")
        gen = generate(uri, tables=size["tables"], versions=size["versions"], order=size["order"],
                       node_max_bytes=size["node_max_bytes"], seed=1)
        lh = Lakehouse.open(uri, audit=False)
        roots = WR.walk_input(lh).roots
        rows: list[dict[str, Any]] = []

        with Timer() as t:
            local, lst = walk_reachable_with_stats(Execution("local"), lh, roots, sizes=False)
        table = local.rows.to_table()
        kinds = dict(zip(table.column("path").to_pylist(), table.column("kind").to_pylist(), strict=True))
        unique = lst.unique_nodes
        rows.append({"walker": "driver (1 process, --execution local)", "seconds": t.seconds,
                     "node_reads": lst.node_reads, "unique_nodes": unique,
                     "reads_per_s": lst.node_reads / t.seconds, "files": len(kinds)})

        # The node graph, from the files (for the no-dedup count only; not timed).
        reader = R.Reader(lh.storage.root)
        graph = {}
        for key in (k for k, kind in kinds.items() if kind in ("root", "node")):
            node = deserialize(reader.read(key), None, key)
            graph[key] = [reader.locator.key(c, reader.locator.root) for c in node.children]
        naive = naive_reads(kinds, graph, [r for _, r in roots])

        with Timer() as t_session:
            spark = get_spark(args.master, app_name="bench-walk")
        spark_rows = []
        for _ in range(1 + max(1, args.repeat)):
            with Timer() as t:
                reached, st = walk_reachable_with_stats(
                    Execution("distributed", spark=spark), lh, roots, batch_size=args.batch_size
                )
            n = reached.rows.native.count()  # a walk on a SparkSession stays on the executors
            reached.release()
            assert n == len(kinds), f"spark walk found {n} files, the driver's walk {len(kinds)}"
            spark_rows.append((t.seconds, st))
        cold_s, cold = spark_rows[0]
        warm_s, warm = min(spark_rows[1:], key=lambda x: x[0])
        for label, secs, st in (("spark cold (first walk of the session)", cold_s, cold),
                                ("spark warm (best of the next runs)", warm_s, warm)):
            rows.append({"walker": label, "seconds": secs, "node_reads": st.node_reads, "unique_nodes": st.unique_nodes,
                         "reads_per_s": st.node_reads / secs, "files": st.total_files})
        parallelism = spark.sparkContext.defaultParallelism
        levels = warm.levels
        spark.stop()

    driver_s = rows[0]["seconds"]
    ratios = {
        "walk seconds, Spark warm / driver (1 process)": ratio(warm_s, driver_s),
        "walk seconds, Spark cold / driver (1 process)": ratio(cold_s, driver_s),
        "node reads / unique nodes, Spark walk": ratio(warm.node_reads, warm.unique_nodes),
        "node reads, one walk per version (no dedup) / deduplicated walk": ratio(naive, unique),
    }
    write_result(
        "walk",
        "Reachable walk: Spark walk vs the same walk on the driver",
        rows,
        ratios,
        scale=args.scale,
        description=__doc__.split("\n\n")[1] + " " + __doc__.split("\n\n")[2],
        params={**size, "roots": len(roots), "spark_master": args.master, "default_parallelism": parallelism,
                "batch_size": args.batch_size, "spark_session_seconds": round(t_session.seconds, 2),
                "naive_reads": naive, "levels": levels, "generator_seconds": gen.get("seconds")},
        columns=["walker", "seconds", "node_reads", "unique_nodes", "reads_per_s", "files"],
        notes=[
            "Same files, same process memory; the page cache is warm for every walker after the first.",
            "Spark pays a fixed cost per level (one job: a Python read stage, a JVM dedup stage); on 2 local "
            "cores it cannot beat one process over local files. Its point is scale-out: node "
            "reads spread over executors and no list of paths ever reaches the driver.",
            f"Levels of the warm walk: {[(lv['depth'], lv['frontier'], lv['tasks']) for lv in levels]} "
            "(depth, node files, tasks).",
        ],
        seconds=time.perf_counter() - t_all,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
