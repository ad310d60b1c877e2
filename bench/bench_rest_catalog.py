"""Iceberg REST catalog server: load-table latency and commits per second through `tlake catalog
serve`, against PyIceberg's SqlCatalog on SQLite in the same run.

One server (`tlake catalog serve`, uvicorn, one process) on a lakehouse on local disk, with the
control table's audit rows (the default) and without (``--no-audit``); PyIceberg's
``RestCatalog`` is the client. The reference is PyIceberg's ``SqlCatalog`` on a SQLite file,
in-process (no HTTP hop, no lakehouse version per commit). Same table shape, same client code:
- load_table: ``catalog.load_table`` of a table with a few snapshots (the server reads the
  lakehouse's latest root, the table's metadata JSON, answers it; the client parses it);
- property commit: ``with table.transaction() as tx: tx.set_properties(...)``, one writer: the
  catalog's own commit path (a new metadata file, the pointer swap) and nothing else;
- append: ``table.append`` of 10 rows, one writer (the client writes a Parquet file, a manifest
  and a manifest list either way);
- 4 writers: four threads committing property changes to one table, each refused commit (409 /
  CommitFailedException) reloaded and retried; commits per second of all four together.
Both servers run side by side with SqlCatalog, and the measures are taken in interleaved rounds.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa

from bench.common import parse_args, ratio, scratch_dir, summarize, time_calls, write_result

N = {"small": {"rounds": 5, "loads": 40, "commits": 12, "appends": 5, "per_writer": 8},
     "large": {"rounds": 9, "loads": 100, "commits": 40, "appends": 15, "per_writer": 30}}
WRITERS = 4
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def _rows(start: int, n: int = 10) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "name": [f"r{i}" for i in range(start, start + n)]},
                    schema=SCHEMA)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(lh: str, token: str, audit: bool, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    tlake = str(Path(sys.executable).with_name("tlake"))
    cmd = [tlake, "--lakehouse", lh, *([] if audit else ["--no-audit"]), "catalog", "serve", "--port", str(port)]
    out = open(log, "wb")  # noqa: SIM115 - the server writes it until it is stopped
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "TLAKE_CATALOG_TOKEN": token})
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


class Subject:
    """One catalog under test and the samples of every round it took part in."""

    def __init__(self, label: str, cat) -> None:
        self.label, self.cat = label, cat
        self.loads: list[list[float]] = []  # per round, seconds of each load
        self.commits: list[list[float]] = []
        self.appends: list[list[float]] = []
        self.rows_appended = 0

    def prepare(self) -> None:
        self.cat.create_namespace("bench")
        t = self.cat.create_table("bench.t", schema=SCHEMA)
        for i in range(3):
            t.append(_rows(i * 10))
        for _ in range(3):
            self.cat.load_table("bench.t")  # warm-up: connections, the server's caches

    def one_round(self, n: dict[str, int], r: int) -> None:
        self.loads.append(time_calls(lambda: self.cat.load_table("bench.t"), n["loads"]))
        t = self.cat.load_table("bench.t")
        commits = []
        for i in range(n["commits"]):
            t0 = time.perf_counter()
            with t.transaction() as tx:
                tx.set_properties(step=f"{r}-{i}")
            commits.append(time.perf_counter() - t0)
        self.commits.append(commits)
        appends = []
        for _ in range(n["appends"]):
            t0 = time.perf_counter()
            t.append(_rows(1000 + 10 * self.rows_appended))
            appends.append(time.perf_counter() - t0)
            self.rows_appended += 1
        self.appends.append(appends)

    def writers(self, n: dict[str, int]) -> tuple[float, int]:
        """Commits per second of WRITERS threads on one table (refused commits reloaded and retried)."""
        cat = self.cat
        refused = [0] * WRITERS
        errors: list[BaseException] = []
        gate = threading.Barrier(WRITERS)

        def writer(w: int) -> None:
            try:
                gate.wait()
                for i in range(n["per_writer"]):
                    while True:
                        tbl = cat.load_table("bench.t")
                        try:
                            with tbl.transaction() as tx:
                                tx.set_properties(**{f"w{w}": str(i)})
                            break
                        except Exception as e:  # noqa: BLE001 - CommitFailedException: reload, retry
                            if type(e).__name__ != "CommitFailedException":
                                raise
                            refused[w] += 1
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
        if errors:
            raise errors[0]
        props = cat.load_table("bench.t").properties
        assert all(props[f"w{w}"] == str(n["per_writer"] - 1) for w in range(WRITERS)), props
        return WRITERS * n["per_writer"] / wall, sum(refused)

    def row(self, n: dict[str, int]) -> dict:
        assert self.cat.load_table("bench.t").scan().to_arrow().num_rows == 30 + 10 * self.rows_appended
        load_p50s = [statistics.median(x) * 1000 for x in self.loads]
        rates = [len(x) / sum(x) for x in self.commits]
        app_rates = [len(x) / sum(x) for x in self.appends]
        w_rate, w_refused = self.writers(n)
        return {
            "catalog": self.label,
            "load_ms_p50": round(statistics.median(load_p50s), 2),
            "load_ms_p50_min": round(min(load_p50s), 2),
            "load_ms_p50_max": round(max(load_p50s), 2),
            "load_ms_p95": round(summarize([v for x in self.loads for v in x])["p95"] * 1000, 2),
            "commits_per_s": round(statistics.median(rates), 1),
            "commits_per_s_min": round(min(rates), 1),
            "commits_per_s_max": round(max(rates), 1),
            "appends_per_s": round(statistics.median(app_rates), 1),
            "appends_per_s_min": round(min(app_rates), 1),
            "appends_per_s_max": round(max(app_rates), 1),
            "writers4_commits_per_s": round(w_rate, 1),
            "writers4_refused": w_refused,
        }


def main(argv: list[str] | None = None) -> int:
    args = parse_args("rest_catalog", argv)
    n = N[args.scale]
    t_all = time.perf_counter()
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog

    from trinitylake.lakehouse import Lakehouse

    with scratch_dir("rest_catalog", keep=args.keep) as d, contextlib.ExitStack() as stack:
        subjects = []
        for audit in (True, False):
            lh = Lakehouse.create(str(d / f"lh-{'audit' if audit else 'plain'}"), audit=audit).uri
            token = uuid.uuid4().hex
            proc, url = _start_server(lh, token, audit, d / f"server-{audit}.log")
            stack.callback(proc.wait, 30)
            stack.callback(proc.terminate)
            subjects.append(Subject(f"tlake catalog serve ({'audit rows' if audit else '--no-audit'})",
                                    RestCatalog("tl", uri=url, token=token)))
        wh = d / "sql-warehouse"
        wh.mkdir()
        subjects.append(Subject("PyIceberg SqlCatalog (SQLite, in-process)",
                                SqlCatalog("sql", uri=f"sqlite:///{d / 'catalog.db'}", warehouse=f"file://{wh}")))
        for s in subjects:
            s.prepare()
        # Rounds interleave the catalogs, each round in another order, so that the machine's
        # noise (2 shared cores) falls on all of them alike; the spread of the rounds' p50s is the noise.
        for r in range(n["rounds"]):
            for k in range(len(subjects)):
                subjects[(r + k) % len(subjects)].one_round(n, r)
            print(f"  round {r + 1}/{n['rounds']} done", flush=True)
        rows = [s.row(n) for s in subjects]
        for row in rows:
            print(f"  {row}", flush=True)
    server, plain, ref = rows
    ratios = {
        "load_table p50: server (audit) / SqlCatalog": ratio(server["load_ms_p50"], ref["load_ms_p50"]),
        "load_table p50: server (--no-audit) / server (audit)": ratio(plain["load_ms_p50"], server["load_ms_p50"]),
        "property commits per s: server (audit) / SqlCatalog": ratio(server["commits_per_s"], ref["commits_per_s"]),
        "property commits per s: server (--no-audit) / SqlCatalog": ratio(plain["commits_per_s"], ref["commits_per_s"]),
        "appends per s: server (audit) / SqlCatalog": ratio(server["appends_per_s"], ref["appends_per_s"]),
        "4 writers, commits per s: server (audit) / SqlCatalog": ratio(server["writers4_commits_per_s"],
                                                                       ref["writers4_commits_per_s"]),
    }
    write_result(
        "rest_catalog",
        "Iceberg REST catalog server: load-table latency and commits per second vs SqlCatalog on SQLite",
        rows,
        ratios,
        scale=args.scale,
        description=__doc__.split("\n\n")[1].strip(),
        params={**n, "writers": WRITERS, "backend": "local disk", "client": "PyIceberg RestCatalog"},
        notes=[
            f"{n['rounds']} rounds; in each, every catalog takes {n['loads']} loads, {n['commits']} property commits "
            f"and {n['appends']} appends, the catalogs in a rotating order. p50 and rates are the median over the "
            "rounds, with the lowest and highest round beside them (the run's noise); p95 is over all loads. "
            "The 4-writer figure is one burst per catalog after the rounds.",
            "Each server commit is one lakehouse transaction (a new root, the table's TableDef repointed) on top of "
            "the Iceberg metadata file both catalogs write; with audit rows it also allocates a txn_seq and appends "
            "one control-table row (a Delta append: control/log_append.py).",
            "SqlCatalog runs in the client's process: no HTTP request, no JSON response to parse. The server's "
            "numbers include both (uvicorn on 127.0.0.1, one worker process).",
        ],
        seconds=time.perf_counter() - t_all,
        module="rest_catalog",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
