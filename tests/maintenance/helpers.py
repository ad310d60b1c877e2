"""Shared test helpers: seeded histories, per-version snapshots, exports made by hand."""

from __future__ import annotations

import os
import random
import tempfile

from trinitylake.format import node as N
from trinitylake.format.paths import root_name
from trinitylake.storage import Storage


def build_history(lh, seed: int, ops: int = 30, namespaces: int = 2) -> None:
    """A seeded random history: namespace and table creates, drops, alters and rollbacks."""
    rnd = random.Random(seed)
    nss = [f"ns{i}" for i in range(namespaces)]
    for ns in nss:
        lh.create_namespace(ns)
    live: dict[str, set[str]] = {ns: set() for ns in nss}
    n = 0
    for _ in range(ops):
        r = rnd.random()
        ns = rnd.choice(nss)
        if r < 0.55 or not live[ns]:
            n += 1
            lh.create_table(ns, f"t{n}")
            live[ns].add(f"t{n}")
        elif r < 0.75:
            t = rnd.choice(sorted(live[ns]))
            lh.drop_table(ns, t)
            live[ns].discard(t)
        elif r < 0.8:
            lh.drop_namespace(ns, cascade=True)
            lh.create_namespace(ns)
            live[ns] = set()
        elif r < 0.9:
            t = rnd.choice(sorted(live[ns]))
            txn = lh.begin()
            txn.alter_table(ns, t, set_properties={"k": str(rnd.random())})
            txn.commit()
        else:
            latest = lh.latest_version()
            target = rnd.randint(max(0, latest - 6), latest - 1)
            lh.rollback(target)
            view = lh.view()
            live = {ns: set(view.list_tables(ns)) if view.namespace_exists(ns) else set() for ns in nss}
            for ns in nss:
                if not view.namespace_exists(ns):
                    lh.create_namespace(ns)


def build_history_on_s3(client, uri: str, storage_options: dict, seed: int, ops: int = 30, **create):
    """`build_history`'s lakehouse at `uri` (``s3://bucket/prefix``), opened with
    `storage_options` (no audit): written on local disk, then uploaded file by file. The files
    are those the same build writes on S3 itself (node file names are random either way), the
    S3 server's clock gives each its LastModified as there, and the build costs a quarter of
    the CPU: moto serves each of its few hundred reads, listings and conditional writes in the
    test's own process (26 operations: 3.5 CPU-s built on S3, 0.8 here). For the tests whose
    subject is a job on S3, not the commits that made its input."""
    from trinitylake.lakehouse import Lakehouse

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    with tempfile.TemporaryDirectory(prefix="tlake-s3-history-") as staging:
        local = os.path.join(staging, "lh")
        build_history(Lakehouse.create(local, audit=False, **create), seed=seed, ops=ops)
        for folder, _, names in os.walk(local):
            for name in names:
                path = os.path.join(folder, name)
                key = "/".join(p for p in (prefix, os.path.relpath(path, local).replace(os.sep, "/")) if p)
                with open(path, "rb") as f:
                    client.put_object(Bucket=bucket, Key=key, Body=f.read())
    return Lakehouse.open(uri, storage_options=storage_options, audit=False)


def snapshot(lh, versions=None) -> dict[int, dict[str, list[str]]]:
    """What every version lists: {version: {namespace: [tables]}}, plus every definition read."""
    out = {}
    if versions is None:
        versions = [v["version"] for v in lh.versions()]
    for v in versions:
        view = lh.view(version=v)
        tables = {}
        for ns in view.list_namespaces():
            view.load_namespace(ns)
            tables[ns] = view.list_tables(ns)
            for t in tables[ns]:
                view.load_table(ns, t)
        out[v] = tables
    return out


def write_minimal_export(lh, version: int, target_uri: str, name: str, pin: bool = True) -> str:
    """A minimal export done by hand: root `version` copied to `target_uri` with every pointer
    rewritten to the full URI of the source file; recorded (and pinned) in the definition."""
    ref = lh.load_root(version)
    node = ref.node.copy()
    src = lh.storage
    node.children = [src.uri(c) for c in node.children]
    node.values = [src.uri(v) for v in node.values]
    node.buffer = [N.Message(m.key, src.uri(m.value) if m.value else None, m.txn) for m in node.buffer]
    node.system = dict(node.system)
    node.system["lakehouse_def"] = src.uri(node.system["lakehouse_def"])
    node.system.pop("previous_root", None)
    target = Storage(target_uri)
    target.create_exclusive(root_name(version), N.serialize(node, ref.lakehouse_def.order))
    loc = target.uri(root_name(version))

    def record(d):
        d.exported_snapshots[name] = loc
        if pin:
            d.exported_snapshot_pins[name] = version

    txn = lh.begin()
    txn.mutate_definition(record, f"export {name}")
    txn.commit()
    return loc


def oracle_reads(lh) -> tuple[set[str], set[str]]:
    """What the independent oracle (`tests.oracle`) reads to list every listed version in full:
    the root and node files its merge-on-read loads, and the definition files the merged keys
    resolve to (paths relative to the lakehouse root). Nothing here runs the library's reads."""
    from tests.oracle import expect as E

    o = E.oracle_of(lh)
    nodes: set[str] = set()
    defs: set[str] = set()
    for v in o.listed_versions():
        uri = f"{o.root}/{root_name(v)}"
        cache: dict = {}
        defs.update(o.relative(u) or u for u in E.merged_keys(o, uri, cache).values())
        nodes.add(root_name(v))
        nodes.update(o.relative(u) or u for u in cache)
    return nodes, defs
