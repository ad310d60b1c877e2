"""Catalog commits per second with 1, 8 and 32 writers on as many tables, and load_table latency:
`tlake catalog serve` (group commit) against PyIceberg's SqlCatalog on SQLite and on PostgreSQL.

Local disk, one run. Each writer is a thread with a catalog client of its own, committing to a
table of its own for a fixed time: property commits (``tx.set_properties``: the catalog's own
commit path), then appends of 10 rows (the client writes a Parquet file, a manifest and a
manifest list either way). A refused commit (CommitFailedException) reloads the table and
counts nothing, as does SQLite's "database is locked" (counted apart). load_table:
``catalog.load_table`` of a table with 5 snapshots, after the commits, with every catalog up:
one load from each catalog in turn, round after round (`paired_loads`).

- ``tlake catalog serve``: one server process (uvicorn), audit rows on (the default), PyIceberg
  ``RestCatalog`` clients over HTTP on 127.0.0.1;
- ``SqlCatalog`` on SQLite: in the client's process (no HTTP hop);
- ``SqlCatalog`` on PostgreSQL 15: a server started here (``initdb``, ``pg_ctl``; as the
  ``postgres`` user when run as root) on a unix socket, and stopped after; ``psycopg`` 3 is not a
  dependency of the project: give a folder holding it (``--psycopg-path``, e.g. made with
  ``pip install --target DIR 'psycopg[binary]'``), else PostgreSQL is skipped;
- the null REST catalog (bench/null_catalog.py): answers every request at once with one canned
  table (ours, as answered to a writer at the end of its run), on the same HTTP stack, and keeps
  nothing. Its rates are the clients' ceiling: what the PyIceberg writers and this machine allow
  any catalog served over HTTP. ``property_w*_procs_server_cpu_ms``: our server's CPU (user and
  system, all its threads) per commit, read from /proc.

The writers share the machine's cores with the catalog (the server, or PostgreSQL): on a small
machine the clients' own CPU (PyIceberg's request, its parse of the metadata answered) bounds
every catalog's figure with many writers. As threads of this one process they also share its
interpreter lock, so the local catalogs' property commits with 1 and 8 writers are measured
again with each writer a process of its own (forked, as separate jobs are): the ``*_procs``
columns.

On the latency store (``--latency-ms``, default 20; 0 skips it): the lakehouse on s3s-fs behind
a proxy adding that delay to every request (bench/objstore.py), the server started with its
endpoint; property commits with 1, 8 and 32 writers and load_table, against SqlCatalog on
SQLite whose warehouse (the metadata files it writes at each commit) is on the same store.
s3s-fs keeps the objects on tmpfs when the machine has one (``--store-files``): on this
machine's disk its own CPU per PUT (7.5 ms, on the 2 cores under test) bounded the runs, not
the delay (bench.objstore.store_files_dir).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.common import parse_args, ratio, scratch_dir, summarize, write_result
from bench.objstore import free_port, latency_store, process_cpu_seconds, store_files_dir, wait_listening

WRITERS = (1, 8, 32)
#: The writer counts measured again with each writer a process of its own (local disk).
PROCESS_WRITERS = (1, 8)
N = {"small": {"seconds": 6.0, "loads": 60}, "large": {"seconds": 20.0, "loads": 300}}
SCHEMA = pa.schema([pa.field("id", pa.int64())])


def _s3_properties(store: Any) -> dict[str, str]:
    """PyIceberg FileIO properties for a LatencyStore."""
    return {"s3.endpoint": store.endpoint_url, "s3.access-key-id": store.key, "s3.secret-access-key": store.secret,
            "s3.region": store.region}


@contextmanager
def tlake_server(d: Path, store: Any = None) -> Iterator[Callable[[], Any]]:
    """`tlake catalog serve` of a new lakehouse in `d`, or on `store` (a LatencyStore) when given."""
    from pyiceberg.catalog.rest import RestCatalog

    from trinitylake.lakehouse import Lakehouse

    d.mkdir(parents=True, exist_ok=True)
    env, flags, client = dict(os.environ), [], {}
    if store is None:
        lh = Lakehouse.create(str(d / "lh")).uri
    else:
        client = _s3_properties(store)  # the client writes its data files there (the load table's appends)
        store.bucket_dir("catbench")
        lh = Lakehouse.create("s3://catbench/lh", storage_options=store.storage_options).uri
        env.update(store.env)
        flags = store.tlake_args()
    token, port = uuid.uuid4().hex, free_port()
    tlake = str(Path(sys.executable).with_name("tlake"))
    log = open(d / "server.log", "wb")  # noqa: SIM115 - the server writes it until stopped
    proc = subprocess.Popen([tlake, "--lakehouse", lh, *flags, "catalog", "serve", "--port", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, env={**env, "TLAKE_CATALOG_TOKEN": token})
    try:
        if not wait_listening(port, proc, timeout=180):
            raise RuntimeError(f"the server did not start (exit code {proc.poll()}): "
                               f"{(d / 'server.log').read_text()[-2000:]}")

        def make() -> Any:
            return RestCatalog("tl", uri=f"http://127.0.0.1:{port}", token=token, **client)

        make.server_pid = proc.pid  # type: ignore[attr-defined] - its CPU is measured (`server_cpu_s`)
        yield make
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


@contextmanager
def sqlite_catalog(d: Path, store: Any = None) -> Iterator[Callable[[], Any]]:
    """SqlCatalog on SQLite in `d`; its warehouse in `d`, or on `store` (a LatencyStore) when given."""
    from pyiceberg.catalog.sql import SqlCatalog

    (d / "wh").mkdir(parents=True)
    if store is None:
        yield lambda: SqlCatalog("sq", uri=f"sqlite:///{d / 'cat.db'}", warehouse=f"file://{d / 'wh'}")
        return
    store.bucket_dir("sqbench")
    s3 = _s3_properties(store)
    yield lambda: SqlCatalog("sq", uri=f"sqlite:///{d / 'cat.db'}", warehouse="s3://sqbench/wh", **s3)


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def postgres_catalog(d: Path, psycopg_path: str) -> Iterator[Callable[[], Any]]:
    """PostgreSQL started in `d` (unix socket only), stopped after."""
    if psycopg_path not in sys.path:
        sys.path.append(psycopg_path)  # last: the project's own packages win
    import psycopg  # noqa: F401 - fails here, clearly, when the folder does not hold it
    from pyiceberg.catalog.sql import SqlCatalog

    (d / "wh").mkdir(parents=True)
    # the server's own files in a folder of /tmp: the postgres user may not reach the checkout's
    pg = Path(tempfile.mkdtemp(prefix="tlake-bench-pg-"))
    data, sock = pg / "data", pg / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(pg, "postgres")
        shutil.chown(sock, "postgres")
    port = free_port()
    subprocess.run(_as_postgres(["initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]),
                   check=True, capture_output=True)
    subprocess.run(_as_postgres(["pg_ctl", "-D", str(data), "-l", str(pg / "pg.log"), "-w", "-o",
                                 f"-p {port} -k {sock} -c listen_addresses='' -c max_connections=200", "start"]),
                   check=True, capture_output=True)
    try:
        uri = f"postgresql+psycopg://postgres@/postgres?host={sock}&port={port}"
        yield lambda: SqlCatalog("pg", uri=uri, warehouse=f"file://{d / 'wh'}")
    finally:
        subprocess.run(_as_postgres(["pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop"]), capture_output=True)
        shutil.rmtree(pg, ignore_errors=True)


def _writer(make: Callable[[], Any], ns: str, i: int, kind: str, ready: Callable[[], None],
            stop_at: Callable[[], float]) -> tuple[int, int, int]:
    """One writer: commits to ``ns.t<i>`` from when `ready` returns until `stop_at()` (monotonic);
    (done, refused, locked)."""
    c = make()
    t = c.load_table(f"{ns}.t{i}")
    ready()
    done = refused = locked = k = 0
    stop = stop_at()
    while time.monotonic() < stop:
        try:
            if kind == "property":
                with t.transaction() as tx:
                    tx.set_properties(k=str(k))
            else:
                t.append(pa.table({"id": list(range(k * 10, k * 10 + 10))}, schema=SCHEMA))
            done += 1
        except Exception as e:  # noqa: BLE001 - CommitFailedException: reload, count nothing
            if type(e).__name__ == "OperationalError" and "locked" in str(e):
                locked += 1  # SQLite's one writer: "database is locked" after its busy timeout
            elif type(e).__name__ != "CommitFailedException":
                raise
            else:
                refused += 1
            t = c.load_table(f"{ns}.t{i}")
        k += 1
    return done, refused, locked


def _writer_process(make: Callable[[], Any], ns: str, i: int, kind: str, gate: Any, go: Any, stop: Any,
                    out: Any) -> None:
    """`_writer` in a process of its own (forked: `make` is the parent's), its counts or its
    error put on `out`."""
    def ready() -> None:
        gate.wait()
        go.wait()

    try:
        out.put(("ok", _writer(make, ns, i, kind, ready, lambda: stop.value)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        out.put(("error", f"writer {i}: {type(e).__name__}: {e}"))
        gate.abort()


def hammer(make: Callable[[], Any], ns: str, writers: int, seconds: float, kind: str,
           clients: str = "threads") -> dict[str, Any]:
    """`writers` writers, each committing to table ``ns.t<i>`` for `seconds`; commits per second.
    `clients`: ``processes`` (one process each, as separate jobs are) or ``threads`` (all in
    this process, sharing its interpreter lock)."""
    run = _hammer_processes if clients == "processes" else _hammer_threads
    counts, wall = run(make, ns, writers, seconds, kind)
    done, refused, locked = (sum(c) for c in zip(*counts, strict=True))
    return {"commits_per_s": round(done / wall, 1), "refused": refused, "locked": locked, "commits": done}


def _hammer_processes(make: Callable[[], Any], ns: str, writers: int, seconds: float,
                      kind: str) -> tuple[list[tuple[int, int, int]], float]:
    """Each writer's (done, refused, locked), and the wall time from the start."""
    ctx = multiprocessing.get_context("fork")  # `make` is a closure: forked, not pickled
    gate, go, stop, out = ctx.Barrier(writers + 1), ctx.Event(), ctx.Value("d", 0.0), ctx.Queue()
    procs = [ctx.Process(target=_writer_process, args=(make, ns, i, kind, gate, go, stop, out), daemon=True)
             for i in range(writers)]
    for p in procs:
        p.start()
    try:
        try:
            gate.wait(300)  # every writer has its client and its table
        except threading.BrokenBarrierError:
            raise RuntimeError(f"a writer failed before the start: {out.get(timeout=30)[1]}") from None
        t0 = time.monotonic()
        stop.value = t0 + seconds
        go.set()
        results = [out.get(timeout=seconds + 300) for _ in procs]
        wall = time.monotonic() - t0
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    errors = [r for status, r in results if status == "error"]
    if errors:
        raise RuntimeError(errors[0])
    return [r for _, r in results], wall


def _hammer_threads(make: Callable[[], Any], ns: str, writers: int, seconds: float,
                    kind: str) -> tuple[list[tuple[int, int, int]], float]:
    """As `_hammer_processes`, the writers threads of this process."""
    results: list[tuple[int, int, int]] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(writers + 1)
    go = threading.Event()
    stop = [0.0]

    def work(i: int) -> None:
        try:
            results.append(_writer(make, ns, i, kind, lambda: (gate.wait(), go.wait()), lambda: stop[0]))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            gate.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(writers)]
    for th in threads:
        th.start()
    try:
        gate.wait()
    except threading.BrokenBarrierError:
        pass
    t0 = time.monotonic()
    stop[0] = t0 + seconds
    go.set()
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    if errors:
        raise errors[0]
    return results, wall


def server_cpu_s(make: Callable[[], Any]) -> float | None:
    """CPU seconds (user and system) the server behind `make` used so far (None: not known: not
    our server, or no /proc here)."""
    return process_cpu_seconds(getattr(make, "server_pid", None))


def measure(label: str, make: Callable[[], Any], n: dict[str, float],
            kinds: tuple[str, ...] = ("property", "append"), procs: bool = True) -> dict[str, Any]:
    cat = make()
    row: dict[str, Any] = {"catalog": label}
    for w in WRITERS:
        for kind in kinds:
            ns = f"{kind[0]}{w}"
            cat.create_namespace(ns)
            for i in range(w):
                cat.create_table(f"{ns}.t{i}", schema=SCHEMA)
            r = hammer(make, ns, w, n["seconds"], kind)
            row[f"{kind}_w{w}_per_s"] = r["commits_per_s"]
            row[f"{kind}_w{w}_refused"] = r["refused"]
            row[f"{kind}_w{w}_locked"] = r["locked"]
            print(f"  {label}: {kind} commits, {w} writers: {r}", flush=True)
    for w in PROCESS_WRITERS if procs else ():
        ns = f"q{w}"
        cat.create_namespace(ns)
        for i in range(w):
            cat.create_table(f"{ns}.t{i}", schema=SCHEMA)
        cpu0 = server_cpu_s(make)
        r = hammer(make, ns, w, n["seconds"], "property", "processes")
        cpu1 = server_cpu_s(make)
        row[f"property_w{w}_procs_per_s"] = r["commits_per_s"]
        if cpu0 is not None and cpu1 is not None and r["commits"]:
            row[f"property_w{w}_procs_server_cpu_ms"] = round((cpu1 - cpu0) / r["commits"] * 1000, 2)
        print(f"  {label}: property commits, {w} writer processes: {r}", flush=True)
    return row


def client_ceiling(make: Callable[[], Any], n: dict[str, float]) -> dict[str, Any]:
    """Property commits of 1 and 8 writers (threads, then processes) against the null catalog
    (bench/null_catalog.py): what the clients and the machine allow any catalog."""
    row: dict[str, Any] = {"catalog": "null REST catalog (the clients' ceiling)"}
    for w in PROCESS_WRITERS:
        for clients, suffix in (("threads", ""), ("processes", "_procs")):
            r = hammer(make, "null", w, n["seconds"], "property", clients)
            row[f"property_w{w}{suffix}_per_s"] = r["commits_per_s"]
            print(f"  {row['catalog']}: property commits, {w} writer {clients}: {r}", flush=True)
    return row


def canned_load(make: Callable[[], Any], table: str) -> bytes:
    """`table` as `make`'s catalog answers a load of it, as a LoadTableResult (JSON)."""
    import json

    t = make().load_table(table)
    return json.dumps({"metadata-location": t.metadata_location, "metadata": json.loads(t.metadata.model_dump_json()),
                       "config": {}}).encode()


def paired_loads(entries: list[tuple[dict[str, Any], Callable[[], Any]]], loads: int) -> None:
    """load_table p50 and p95 into each ``(row, make)``'s row: a table with 5 snapshots in each
    catalog, then `loads` rounds of one load from each catalog in turn (which goes first rotates
    each round), so the machine's drift over the run (this shared 2-core machine's speed moved
    the figures of one catalog measured minutes after another by a third) lands on all alike."""
    cats = []
    for _, make in entries:
        cat = make()
        cat.create_namespace("load")
        t = cat.create_table("load.t", schema=SCHEMA)
        for i in range(5):
            t.append(pa.table({"id": [i]}, schema=SCHEMA))
        for _ in range(5):
            cat.load_table("load.t")
        cats.append(cat)
    times: list[list[float]] = [[] for _ in entries]
    for r in range(loads):
        for k in range(len(cats)):
            i = (r + k) % len(cats)
            t0 = time.perf_counter()
            cats[i].load_table("load.t")
            times[i].append(time.perf_counter() - t0)
    for (row, _), spent in zip(entries, times, strict=True):
        s = summarize(spent)
        row["load_ms_p50"], row["load_ms_p95"] = round(s["median"] * 1000, 2), round(s["p95"] * 1000, 2)
        print(f"  {row['catalog']}: load_table p50 {row['load_ms_p50']} ms, p95 {row['load_ms_p95']} ms", flush=True)


def main(argv: list[str] | None = None) -> int:
    def extra(p: Any) -> None:
        p.add_argument("--psycopg-path", default=os.environ.get("TLAKE_BENCH_PSYCOPG"),
                       help="a folder holding psycopg 3 (pip install --target DIR 'psycopg[binary]'); "
                            "without it PostgreSQL is skipped")
        p.add_argument("--latency-ms", type=float, default=20.0,
                       help="the latency store's delay per request (0: no run on the latency store)")
        p.add_argument("--store-files", choices=("tmpfs", "disk"), default="tmpfs",
                       help="where the latency store's server keeps the objects: tmpfs (when the machine has "
                            "one; see bench.objstore.store_files_dir) or the scratch folder's disk")

    args = parse_args("catalog_commits", argv, extra)
    n = N[args.scale]
    t_all = time.perf_counter()
    rows = []
    with scratch_dir("catalog_commits", keep=args.keep) as d:
        with ExitStack() as local:  # all up at once: their loads are measured together, after
            makes = [("tlake catalog serve", local.enter_context(tlake_server(d / "tlake"))),
                     ("SqlCatalog (SQLite, in-process)", local.enter_context(sqlite_catalog(d / "sqlite")))]
            if args.psycopg_path:
                makes.append(("SqlCatalog (PostgreSQL 15)",
                              local.enter_context(postgres_catalog(d / "pg", args.psycopg_path))))
            rows = [measure(label, make, n) for label, make in makes]
            paired_loads([(row, make) for row, (_, make) in zip(rows, makes, strict=True)], int(n["loads"]))
            # answered with a table as our server answered its 8 writers at the end of their run
            canned = canned_load(makes[0][1], "p8.t0")
        from bench.null_catalog import null_catalog

        with null_catalog(d / "null", canned) as null_make:
            ceiling = client_ceiling(null_make, n)
        slow: list[dict[str, Any]] = []
        store_on = ""
        if args.latency_ms > 0:
            where = f"S3, {args.latency_ms:g} ms"
            with store_files_dir(d / "s3", args.store_files) as (files, store_on), \
                    latency_store(files, args.latency_ms, log_path=d / "s3s.log", proxy_kind="auto") as store:
                with tlake_server(d / "tlake-s3", store) as ours_s3, sqlite_catalog(d / "sqlite-s3", store) as sq_s3:
                    slow.append(measure(f"tlake catalog serve ({where})", ours_s3, n, ("property",), procs=False))
                    slow.append(measure(f"SqlCatalog (SQLite, in-process; warehouse on {where})", sq_s3, n,
                                        ("property",), procs=False))
                    paired_loads([(slow[0], ours_s3), (slow[1], sq_s3)], int(n["loads"]))
    ours, sq = rows[0], rows[1]
    pg = rows[2] if len(rows) > 2 else None
    ratios: dict[str, float | None] = {
        "the clients' ceiling (null catalog), 8 writer threads / 1": ratio(ceiling["property_w8_per_s"],
                                                                           ceiling["property_w1_per_s"]),
        "the clients' ceiling (null catalog), 8 writer processes / 1": ratio(ceiling["property_w8_procs_per_s"],
                                                                             ceiling["property_w1_procs_per_s"]),
        "8 writer processes, property commits: ours / the clients' ceiling": ratio(
            ours["property_w8_procs_per_s"], ceiling["property_w8_procs_per_s"]),
        "ours, 8 writers / 1 writer (property commits)": ratio(ours["property_w8_per_s"], ours["property_w1_per_s"]),
        "ours, 32 writers / 1 writer (property commits)": ratio(ours["property_w32_per_s"], ours["property_w1_per_s"]),
        "8 writers, property commits: ours / SqlCatalog-SQLite": ratio(ours["property_w8_per_s"],
                                                                        sq["property_w8_per_s"]),
        "8 writers, appends: ours / SqlCatalog-SQLite": ratio(ours["append_w8_per_s"], sq["append_w8_per_s"]),
        "load_table p50: ours / SqlCatalog-SQLite": ratio(ours["load_ms_p50"], sq["load_ms_p50"]),
        "ours, 8 writer processes / 1 (property commits)": ratio(ours["property_w8_procs_per_s"],
                                                                 ours["property_w1_procs_per_s"]),
        "8 writer processes, property commits: ours / SqlCatalog-SQLite": ratio(ours["property_w8_procs_per_s"],
                                                                                sq["property_w8_procs_per_s"]),
    }
    if pg is not None:
        ratios.update({
            "8 writers, property commits: ours / SqlCatalog-PostgreSQL": ratio(ours["property_w8_per_s"],
                                                                               pg["property_w8_per_s"]),
            "32 writers, property commits: ours / SqlCatalog-PostgreSQL": ratio(ours["property_w32_per_s"],
                                                                                pg["property_w32_per_s"]),
            "8 writers, appends: ours / SqlCatalog-PostgreSQL": ratio(ours["append_w8_per_s"], pg["append_w8_per_s"]),
            "load_table p50: ours / SqlCatalog-PostgreSQL": ratio(ours["load_ms_p50"], pg["load_ms_p50"]),
            "8 writer processes, property commits: ours / SqlCatalog-PostgreSQL": ratio(
                ours["property_w8_procs_per_s"], pg["property_w8_procs_per_s"]),
        })
    if slow:
        ratios.update({
            "latency store, 32 writers / 1 writer (property commits)": ratio(slow[0]["property_w32_per_s"],
                                                                            slow[0]["property_w1_per_s"]),
            "latency store, 32 writers, property commits: ours / SqlCatalog-SQLite": ratio(
                slow[0]["property_w32_per_s"], slow[1]["property_w32_per_s"]),
            "latency store, load_table p50: ours / SqlCatalog-SQLite": ratio(slow[0]["load_ms_p50"],
                                                                            slow[1]["load_ms_p50"]),
        })
    write_result(
        "catalog_commits",
        "Catalog commits per second with 1, 8 and 32 writers on as many tables, and load_table, vs SqlCatalog",
        rows + [ceiling] + slow,
        ratios,
        scale=args.scale,
        description=__doc__.split("\n\n")[1].strip(),
        params={**n, "writers": list(WRITERS), "process_writers": list(PROCESS_WRITERS), "backend": "local disk" + (
            f"; latency store {args.latency_ms:g} ms (property commits; its objects on {store_on})"
            if args.latency_ms > 0 else "")},
        notes=[
            "The server writes one lakehouse version per group of the commits that arrived while the previous "
            "version was written (rest_catalog/group_commit.py), with one audit row per commit.",
            f"The writers are threads of the benchmark's one process (the ``*_procs`` columns: processes), on the "
            f"catalog's machine ({os.cpu_count()} CPUs); it is shared (noisy): ratios of one run.",
            "The clients' ceiling bounds every ratio of writers here: 8 writer threads share one interpreter lock "
            "(against the null catalog they commit no faster than one writer), and 8 writer processes share the "
            "machine's cores with the catalog.",
        ],
        seconds=time.perf_counter() - t_all,
        module="catalog_commits",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
