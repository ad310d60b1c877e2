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
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa

from bench.common import parse_args, ratio, scratch_dir, summarize, write_result

N = {"small": {"loads": 40, "commits": 30, "appends": 15, "per_writer": 8},
     "large": {"loads": 200, "commits": 150, "appends": 60, "per_writer": 30}}
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


def measure(cat, label: str, n: dict[str, int]) -> dict:
    """The four measures on catalog `cat` (namespace ``bench`` created here)."""
    cat.create_namespace("bench")
    t = cat.create_table("bench.t", schema=SCHEMA)
    for i in range(3):
        t.append(_rows(i * 10))
    for _ in range(3):
        cat.load_table("bench.t")  # warm-up
    loads = []
    for _ in range(n["loads"]):
        t0 = time.perf_counter()
        cat.load_table("bench.t")
        loads.append(time.perf_counter() - t0)
    commits = []
    t = cat.load_table("bench.t")
    for i in range(n["commits"]):
        t0 = time.perf_counter()
        with t.transaction() as tx:
            tx.set_properties(step=str(i))
        commits.append(time.perf_counter() - t0)
    appends = []
    for i in range(n["appends"]):
        t0 = time.perf_counter()
        t.append(_rows(1000 + i * 10))
        appends.append(time.perf_counter() - t0)
    assert cat.load_table("bench.t").scan().to_arrow().num_rows == 30 + 10 * n["appends"]

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
    ls, cs, aps = summarize(loads), summarize(commits), summarize(appends)
    row = {
        "catalog": label,
        "load_ms_median": round(ls["median"] * 1000, 2),
        "load_ms_p95": round(ls["p95"] * 1000, 2),
        "commit_ms_median": round(cs["median"] * 1000, 2),
        "commits_per_s": round(len(commits) / sum(commits), 1),
        "append_ms_median": round(aps["median"] * 1000, 2),
        "appends_per_s": round(len(appends) / sum(appends), 1),
        "writers4_commits_per_s": round(WRITERS * n["per_writer"] / wall, 1),
        "writers4_refused": sum(refused),
    }
    print(f"  {label}: {row}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args("rest_catalog", argv)
    n = N[args.scale]
    t_all = time.perf_counter()
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog

    from trinitylake.lakehouse import Lakehouse

    rows = []
    with scratch_dir("rest_catalog", keep=args.keep) as d:
        for audit in (True, False):
            lh = Lakehouse.create(str(d / f"lh-{'audit' if audit else 'plain'}"), audit=audit).uri
            token = uuid.uuid4().hex
            proc, url = _start_server(lh, token, audit, d / f"server-{audit}.log")
            try:
                rows.append(measure(RestCatalog("tl", uri=url, token=token),
                                    f"tlake catalog serve ({'audit rows' if audit else '--no-audit'})", n))
            finally:
                proc.terminate()
                proc.wait(30)
        wh = d / "sql-warehouse"
        wh.mkdir()
        sql = SqlCatalog("sql", uri=f"sqlite:///{d / 'catalog.db'}", warehouse=f"file://{wh}")
        rows.append(measure(sql, "PyIceberg SqlCatalog (SQLite, in-process)", n))
    server, plain, ref = rows
    ratios = {
        "load_table median: server (audit) / SqlCatalog": ratio(server["load_ms_median"], ref["load_ms_median"]),
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
            "Each server commit is one lakehouse transaction (a new root, the table's TableDef repointed) on top of "
            "the Iceberg metadata file both catalogs write; with audit rows it also allocates a txn_seq and appends "
            "one control-table row (delta-rs).",
            "SqlCatalog runs in the client's process: no HTTP request, no JSON response to parse. The server's "
            "numbers include both (uvicorn on 127.0.0.1, one worker process).",
        ],
        seconds=time.perf_counter() - t_all,
        module="rest_catalog",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
