"""Synthetic lakehouses for benchmarks: N tables x V versions with realistic churn.

    from bench.generator import generate
    summary = generate("/tmp/lh", tables=10_000, versions=60, seed=1)

Phase 1 (build) creates the namespaces in one transaction, then the tables in multi-op
transactions of up to `batch` creates each (one version per batch), which is what makes big
trees cheap to build: 100k tables is 50 commits, not 100k. The transactions' definition
files (same paths and bytes as `Transaction.create_table` writes) are written in a batch
before each commit: in parallel on object stores, and locally with plain writes (their names
are fresh UUIDs; the exclusive create's temporary file and link cost slow system calls here).

Phase 2 (churn) commits the remaining versions one transaction each, drawn with `seed`:
alters of 1-3 tables (new Iceberg ``metadata_location``, the common case), creates, drops,
mixed multi-table transactions, namespace property changes and, rarely, rollbacks to a recent
churn version. The live table count stays near `tables`.

Command line: ``python -m bench.generator URI --tables 10000 --versions 60 [--s3]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import IOCounter, count_io, uncount_io
from trinitylake.errors import TransactionConflictError
from trinitylake.format import definitions as D
from trinitylake.format import tree
from trinitylake.format.keys import TABLE_PREFIX
from trinitylake.lakehouse import Lakehouse
from trinitylake.storage import parse_uri

# Churn mix: (operation, weight). Rollbacks rewrite a full diff (O(tables)): kept rare.
CHURN_MIX = (("alter", 55), ("create", 15), ("drop", 12), ("mixed", 10), ("alter_namespace", 4), ("rollback", 4))


def table_name(i: int) -> str:
    return f"t{i:06d}"


def namespace_name(j: int) -> str:
    return f"ns{j:03d}"


def metadata_location(uri: str, ns: str, table: str) -> str:
    return f"{uri.rstrip('/')}/warehouse/{ns}/{table}/metadata/{uuid.uuid4()}.metadata.json"


class _DeferredDefs:
    """Collects the definition files a transaction writes, then writes them in parallel."""

    def __init__(self, lh: Lakehouse, threads: int):
        self.lh = lh
        self.threads = threads
        self.pending: list[tuple[str, bytes]] = []
        self.dirs: set[str] = set()

    def attach(self, txn) -> None:
        def deferred(path: str, msg) -> str:
            self.pending.append((path, D.dumps(msg)))
            return path

        txn._write_def = deferred  # same path and bytes as Transaction._write_def, written later

    def flush(self) -> None:
        items, self.pending = self.pending, []
        if not items:
            return
        if self.lh.storage.scheme == "file":
            self._write_local(items)
            return
        create = self.lh.storage.create_exclusive
        if self.threads <= 1 or len(items) < 8:
            for p, data in items:
                create(p, data)
            return
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            list(pool.map(lambda kv: create(*kv), items, chunksize=64))

    def _write_local(self, items: list[tuple[str, bytes]]) -> None:
        """Plain writes: the names are fresh UUIDs, so the exclusive create's temporary file,
        link and unlink (4 slow system calls here) buy nothing in a generator."""
        base = parse_uri(self.lh.storage.root).fs_path.rstrip("/")
        counter = getattr(self.lh.storage, "_bench_counter", None)
        for p, data in items:
            fp = f"{base}/{p}"
            d = fp.rsplit("/", 1)[0]
            if d not in self.dirs:
                os.makedirs(d, exist_ok=True)
                self.dirs.add(d)
            with open(fp, "wb") as f:
                f.write(data)
            if counter is not None:
                counter.files["def"] = counter.files.get("def", 0) + 1
                counter.bytes["def"] = counter.bytes.get("def", 0) + len(data)


def tree_height(lh: Lakehouse, version: int | None = None) -> int:
    """Levels of the tree (1 = the root is a leaf), along the leftmost path."""
    ref = lh.load_root(lh.latest_version() if version is None else version)
    store = lh.node_store(ref.base)
    node, h = ref.node, 1
    while not node.is_leaf:
        node = store.load(node.children[0])
        h += 1
    return h


def count_nodes(lh: Lakehouse, version: int | None = None) -> int:
    """Node files reachable from a version's root (the root included)."""
    ref = lh.load_root(lh.latest_version() if version is None else version)
    store = lh.node_store(ref.base)
    n, stack = 1, list(ref.node.children)
    while stack:
        p = stack.pop()
        n += 1
        stack.extend(tree.reachable_children(store.load(p)))
    return n


def generate(
    uri: str,
    tables: int = 1000,
    versions: int | None = None,
    order: int = D.DEFAULT_ORDER,
    node_max_bytes: int = D.DEFAULT_NODE_MAX_BYTES,
    seed: int = 0,
    storage_options: dict | None = None,
    *,
    namespaces: int | None = None,
    batch: int = 2000,
    properties: dict[str, str] | None = None,
    audit: bool = False,
    threads: int | None = None,
    lakehouse: Lakehouse | None = None,
) -> dict[str, Any]:
    """Build a lakehouse at `uri` with about `tables` live tables and `versions` versions.

    Args:
        uri: new lakehouse root (local path, ``file://``, ``s3://`` or ``memory://``).
        tables: tables created by the build phase (the live count stays near it).
        versions: latest version number wanted (v0 is the empty lakehouse). At least the
            build phase's ``1 + ceil(tables / batch)`` versions; `batch` grows when `versions`
            is smaller. None: the build phase plus 10 churn versions.
        order, node_max_bytes: tree shape (lakehouse definition).
        seed: random seed of the churn (names and choices are reproducible; UUIDs are not).
        storage_options: options of the storage (S3 endpoint and credentials).
        namespaces: default ``max(1, tables // 1000)``.
        batch: table creates per build transaction.
        properties: lakehouse definition properties (e.g. ``tlake.buffer.max-messages``).
        audit: write control-table rows for each commit (slow; off by default).
        threads: writers of definition files on object stores (default 16; local files are
            written sequentially, which was faster on our 2-core machines).
        lakehouse: generate into this existing, empty lakehouse instead of creating one.

    Returns:
        A summary dict: uri, tables (live), namespaces, versions (latest), build/churn
        version counts, operation counts, files/bytes written by kind, tree height, node
        count, seconds.
    """
    t0 = time.perf_counter()
    rng = random.Random(seed)
    n_ns = namespaces or max(1, tables // 1000)
    build_min = 1 + max(1, math.ceil(tables / batch))
    if versions is not None and 2 <= versions < build_min:
        batch = math.ceil(tables / (versions - 1))
        build_min = 1 + math.ceil(tables / batch)
    target = build_min + 10 if versions is None else max(versions, build_min)
    lh = lakehouse or Lakehouse.create(
        uri,
        storage_options=storage_options,
        order=order,
        node_max_bytes=node_max_bytes,
        audit=audit,
        properties=properties,
    )
    counted = getattr(lh.storage, "_bench_counter", None) is None  # ours to undo at the end
    io: IOCounter = count_io(lh.storage)
    try:
        return _generate(lh, io, rng, tables, target, batch, n_ns, order, node_max_bytes, threads, t0)
    finally:
        if counted:
            uncount_io(lh.storage)


def _generate(lh, io, rng, tables, target, batch, n_ns, order, node_max_bytes, threads, t0) -> dict[str, Any]:
    ns_names = [namespace_name(j) for j in range(n_ns)]
    if threads is None:
        threads = 1 if lh.storage.scheme in ("file", "memory") else 16
    defer = _DeferredDefs(lh, threads)
    ops = {"create": 0, "alter": 0, "drop": 0, "alter_namespace": 0, "rollback": 0, "conflict": 0}

    def commit(txn) -> int:
        defer.flush()
        return txn.commit()

    # ---- build
    txn = lh.begin()
    for ns in ns_names:
        txn.create_namespace(ns, {"owner": "bench"})
    commit(txn)
    live: dict[str, str] = {}  # table -> namespace
    next_id = 0
    while next_id < tables:
        txn = lh.begin()
        defer.attach(txn)
        for _ in range(min(batch, tables - next_id)):
            t, ns = table_name(next_id), ns_names[next_id % n_ns]
            txn.create_table(ns, t, metadata_location=metadata_location(lh.uri, ns, t))
            live[t] = ns
            next_id += 1
        commit(txn)
        ops["create"] += len(txn.writes)
    build_versions = lh.latest_version()
    build_seconds = time.perf_counter() - t0

    # ---- churn
    names = sorted(live)  # sampling pool (may hold dropped names: checked against `live`)
    weights = [w for _, w in CHURN_MIX]
    kinds = [k for k, _ in CHURN_MIX]
    version = build_versions
    while version < target:
        kind = rng.choices(kinds, weights)[0]
        if kind == "rollback":
            # Only to a churn version, so the table count stays near `tables`.
            if version - build_versions < 3:
                continue
            to = version - rng.randint(1, min(3, version - build_versions - 1))
            version = lh.rollback(to)
            ops["rollback"] += 1
            live = live_tables(lh)
            continue
        txn = lh.begin()
        defer.attach(txn)
        if kind in ("alter", "mixed"):
            for t in _sample_live(rng, names, live, rng.randint(1, 3)):
                txn.alter_table(live[t], t, metadata_location=metadata_location(lh.uri, live[t], t))
                ops["alter"] += 1
        if kind in ("drop", "mixed") and len(live) > 1:
            for t in _sample_live(rng, names, live, rng.randint(1, 3 if kind == "drop" else 1)):
                txn.drop_table(live[t], t)
                del live[t]
                ops["drop"] += 1
        if kind in ("create", "mixed"):
            for _ in range(rng.randint(1, 5 if kind == "create" else 2)):
                t, ns = table_name(next_id), rng.choice(ns_names)
                next_id += 1
                txn.create_table(ns, t, metadata_location=metadata_location(lh.uri, ns, t))
                live[t] = ns
                names.append(t)
                ops["create"] += 1
        if kind == "alter_namespace":
            txn.alter_namespace(rng.choice(ns_names), {"touched": str(version)})
            ops["alter_namespace"] += 1
        try:
            version = commit(txn)
        except TransactionConflictError:  # a concurrent writer on the same lakehouse
            ops["conflict"] += 1
            live = live_tables(lh)
            version = lh.latest_version()
    seconds = time.perf_counter() - t0
    return {
        "uri": lh.uri,
        "tables": len(live),
        "namespaces": n_ns,
        "versions": lh.latest_version(),
        "build_versions": build_versions,
        "churn_versions": lh.latest_version() - build_versions,
        "batch": batch,
        "order": order,
        "node_max_bytes": node_max_bytes,
        "ops": ops,
        "written_files": dict(io.files),
        "written_bytes": dict(io.bytes),
        "tree_height": tree_height(lh),
        "nodes": count_nodes(lh),
        "build_seconds": round(build_seconds, 3),
        "seconds": round(seconds, 3),
    }


def _sample_live(rng: random.Random, names: list[str], live: dict[str, str], k: int) -> list[str]:
    out: list[str] = []
    for _ in range(k * 8):
        if len(out) >= k or not live:
            break
        t = rng.choice(names)
        if t in live and t not in out:
            out.append(t)
    return out


def live_tables(lh: Lakehouse) -> dict[str, str]:
    """Live tables of the latest version: table name -> namespace."""
    view = lh.view()
    out = {}
    for key, _ in tree.scan_prefix(view.store, view.root.node, TABLE_PREFIX):
        _, (ns, t) = view.codec.decode(key)
        out[t] = ns
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.generator", description=__doc__.split("\n")[0])
    p.add_argument("uri")
    p.add_argument("--tables", type=int, default=1000)
    p.add_argument("--versions", type=int, default=None)
    p.add_argument("--order", type=int, default=D.DEFAULT_ORDER)
    p.add_argument("--node-max-bytes", type=int, default=D.DEFAULT_NODE_MAX_BYTES)
    p.add_argument("--batch", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--audit", action="store_true")
    p.add_argument(
        "--s3",
        action="store_true",
        help="start a local moto S3 server and generate into a new bucket (URI is then the path inside the bucket)",
    )
    a = p.parse_args(argv)
    kw = {
        "tables": a.tables,
        "versions": a.versions,
        "order": a.order,
        "node_max_bytes": a.node_max_bytes,
        "seed": a.seed,
        "batch": a.batch,
        "audit": a.audit,
    }
    if a.s3:
        from bench.common import local_s3

        with local_s3() as s3:
            uri = s3.create_bucket() + "/" + a.uri.strip("/")
            summary = generate(uri, storage_options=s3.storage_options, **kw)
    else:
        summary = generate(a.uri, **kw)
    json.dump(summary, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())


def fill_acceptance_shape(lh: Lakehouse, tables: int, versions: int, batch: int = 500,
                          on_commit: Any = None) -> None:
    """The acceptance scripts' lakehouse shape (``acceptance/lib/mklh.py``) in `lh` (order 16,
    16 KiB nodes, made by the caller): 5 namespaces, `tables` tables created `batch` to a
    transaction, then `versions` single-table alters drawn with seed 1. `on_commit()` after
    each commit of the tables and alters (progress)."""
    t = lh.begin()
    for j in range(5):
        t.create_namespace(f"ns{j}")
    t.commit()
    for s in range(0, tables, batch):
        t = lh.begin()
        for i in range(s, min(tables, s + batch)):
            t.create_table(f"ns{i % 5}", f"t{i:06d}", metadata_location=f"s3://w/t{i}/v0.json")
        t.commit()
        if on_commit is not None:
            on_commit()
    rng = random.Random(1)
    for v in range(versions):
        i = rng.randrange(tables)
        t = lh.begin()
        t.alter_table(f"ns{i % 5}", f"t{i:06d}", metadata_location=f"s3://w/t{i}/v{v + 1}.json")
        t.commit()
        if on_commit is not None:
            on_commit()

