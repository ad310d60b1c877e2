"""Helpers of the export tests: small multi-level lakehouses, running an export, comparing views."""

from __future__ import annotations

import pytest

from trinitylake.config import load_job_config
from trinitylake.format import keys as K
from trinitylake.format.node import deserialize
from trinitylake.format.paths import is_root_name, root_name
from trinitylake.maintenance.export_plan import local_path
from trinitylake.maintenance.results import JobResult
from trinitylake.storage import Storage


def populate(lh, namespaces: int = 2, tables: int = 6, alters: int = 2, drops: int = 1) -> int:
    """Namespaces with tables, some altered and dropped: a tree of several levels (order 4) whose
    nodes carry write-buffer messages, superseded definitions and deletes. Returns the latest version."""
    for n in range(namespaces):
        lh.create_namespace(f"ns{n}", {"owner": f"team{n}"})
        for t in range(tables):
            lh.create_table(f"ns{n}", f"t{t}", properties={"k": str(t)})
    for a in range(alters):
        txn = lh.begin()
        txn.alter_table("ns0", f"t{a}", set_properties={"altered": str(a)})
        txn.commit()
    for d in range(drops):
        lh.drop_table("ns1", f"t{d}")
    return lh.latest_version()


def state(view) -> dict:
    """Everything a reader sees at one version, definition paths excluded (a minimal export
    stores them as absolute URIs into the source)."""
    out = {}
    for ns in view.list_namespaces():
        d = view.describe_namespace(ns)
        out[ns] = {k: v for k, v in d.items() if k != "definition"}
        for t in view.list_tables(ns):
            td = view.describe_table(ns, t)
            out[f"{ns}.{t}"] = {k: v for k, v in td.items() if k != "definition"}
    return out


def reachable(storage: Storage, root_path: str, resolve=None) -> dict[str, int]:
    """Single-process reach of one root: every referenced file (absolute URI) -> depth.

    Node files are followed; definition files and the lakehouse definition are leaves.
    `resolve(pointer, base)` gives (storage, path) for absolute pointers (default: same storage).
    """
    out: dict[str, int] = {}
    stack = [(storage, root_path, 0)]
    while stack:
        st, path, depth = stack.pop()
        uri = st.uri(path)
        if uri in out:
            continue
        out[uri] = depth
        node = deserialize(st.read(path), None, uri)
        if depth == 0 and K.SYS_LAKEHOUSE_DEF in node.system:
            out.setdefault(st.uri(node.system[K.SYS_LAKEHOUSE_DEF]), 0)
        for c in node.children:
            stack.append((st, c, depth + 1))
        for v in list(node.values) + [m.value for m in node.buffer if m.value]:
            out.setdefault(st.uri(v), depth)
    return out


def owned_files(storage: Storage) -> set[str]:
    from trinitylake.format.paths import is_format_owned

    return {storage.uri(f.path) for f in storage.list("") if is_format_owned(f.path)}


def simulate_expiration(lh, keep_versions: set[int]) -> set[str]:
    """What the expiration job does, by hand: delete the root files of versions not kept and
    every format-owned file no kept root reaches. Returns the deleted URIs."""
    st = lh.storage
    keep: set[str] = set()
    for v in keep_versions:
        keep |= set(reachable(st, root_name(v)))
    doomed = sorted(owned_files(st) - keep)
    failures = st.delete([st.relative(u) for u in doomed])
    assert not failures
    return set(doomed)


def export_cfg(lh, target: str, name: str, **kw):
    overrides = {"lakehouse": lh.uri, "name": name, "target": target, "batch_size": kw.pop("batch_size", 8), **kw}
    if lh.storage.options:
        overrides["storage_options"] = dict(lh.storage.options)
    return load_job_config("export", overrides=overrides, env={})


@pytest.fixture
def run(request):
    """run(lh, target, name, execution="local"|"distributed"|"auto", **cfg overrides) -> JobResult.

    ``local`` (the default here) never starts Spark; ``distributed`` runs every phase on the
    executors of the shared test session (started on first use)."""
    from trinitylake.spark.execution import Execution
    from trinitylake.spark.export import run_export

    def go(lh, target, name, *, target_storage_options=None, execution="local", limits=None, **kw):
        cfg = export_cfg(lh, target, name, **kw)
        result = JobResult(job="export", run_id=cfg.run_id, lakehouse=lh.uri)
        record: dict = {}
        result.details["execution"] = record
        ex = Execution(execution, session_factory=lambda: request.getfixturevalue("spark"), record=record,
                       limits=limits)
        return run_export(ex, lh, cfg, result, target_storage_options=target_storage_options)

    return go


def target_files(storage: Storage) -> dict[str, int]:
    """Files of an export target (relative path -> size), bookkeeping under _export excluded."""
    return {f.path: f.size for f in storage.list("") if not f.path.startswith("_export/")}


def root_files(storage: Storage) -> list[str]:
    return sorted(f.path for f in storage.list_dirs("")[1] if is_root_name(f.path))


def pointers_outside(storage: Storage, source: Storage) -> int:
    """Pointers in the target's node files that are absolute URIs into `source`."""
    n = 0
    for f in storage.list(""):
        if not f.path.endswith(".arrow"):
            continue
        node = deserialize(storage.read(f.path), None, f.path)
        for p in [*node.children, *node.values, *(m.value for m in node.buffer if m.value), *node.system.values()]:
            if p and "://" in p and local_path(source, p) is not None:
                n += 1
    return n
