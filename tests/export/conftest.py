"""Helpers of the export tests: small multi-level lakehouses, running an export, and what the
independent oracle (`tests.oracle`: a spec-written reader sharing no code with the library) says a
version, an export or a target holds. No expected value here is computed by the library."""

from __future__ import annotations

import os

import pytest

from tests.format.oracle import root_name
from tests.oracle import expect as E
from tests.oracle.reader import ROOT_FILE, Oracle, boto_client_for, parse_node
from trinitylake.config import load_job_config
from trinitylake.runs.results import JobResult
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


def oracle(uri: str, options: dict | None = None) -> Oracle:
    """The independent oracle (`tests.oracle`) of the lakehouse at `uri`; `options` (S3 endpoint
    and keys) give it a boto3 client, also for a local lakehouse whose pointers lead into S3."""
    if "://" not in uri:
        uri = "file://" + os.path.abspath(uri)
    return Oracle(uri, s3_client=boto_client_for(options) if options else None)


def oracle_of(lh) -> Oracle:
    return oracle(lh.uri, lh.storage.options or None)


def latest_def(lh):
    """The latest lakehouse definition of `lh`, read by the oracle."""
    return oracle_of(lh).latest()[1]


def contents(uri: str, version: int | None = None, options: dict | None = None) -> dict[str, bytes]:
    """Everything a reader sees at `version` (default: the latest listed) of the lakehouse at
    `uri`, by the oracle: every key of the merged tree with the bytes of its definition file
    (so every namespace and table definition, compared byte for byte)."""
    o = oracle(uri, options)
    v = E.latest_version(o) if version is None else version
    return E.contents(o, f"{o.root}/{root_name(v)}")


def export_contents(lh, name: str, options: dict | None = None) -> dict[str, bytes]:
    """`contents` of the export `name` recorded in `lh`'s latest definition, read through the
    recorded root (its pointers lead into the target and, for a partial or minimal export, the
    source); `options`: the S3 server's, where the source is local and the target on S3."""
    o = oracle(lh.uri, options or lh.storage.options or None)
    return E.contents(o, o.latest()[1].exported_snapshots[name])


def reachable(lh, version: int) -> E.Walk:
    """The oracle's walk of `version`'s root: every file it reaches (paths relative to the
    lakehouse root) with kind and depth (shortest pointer path; the root is depth 0, the
    lakehouse definition and a node's definition files one deeper than it). Missing files fail."""
    o = oracle_of(lh)
    return E.walk(o, [(version, f"{o.root}/{root_name(version)}")], sizes=False, tolerate_missing=False)


def simulate_expiration(lh, keep_versions: set[int]) -> set[str]:
    """What the expiration job does, by hand and by the oracle's rules: delete the root files of
    versions not kept and every format-owned file no kept root reaches. Returns the deleted paths."""
    o = oracle_of(lh)
    doomed = sorted(E.owned(o) - E.version_files(o, keep_versions))
    failures = lh.storage.delete(doomed)
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
    from trinitylake.jobs.export.job import run_export
    from trinitylake.spark.execution import Execution

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
    return sorted(f.path for f in storage.list_dirs("")[1] if ROOT_FILE.match(f.path))


def pointers_outside(target: str, source, options: dict | None = None) -> int:
    """Pointers in the node files of the export at `target` that are absolute URIs into the
    lakehouse `source`, parsed by the oracle (children, key table, buffer and system rows)."""
    o = oracle(target, options)
    src = oracle_of(source)
    order = int(E.definition_of(o, E.latest_version(o)).order)
    n = 0
    for p in sorted(o.files.list(o.root)):
        if not p.endswith(".arrow") or p.startswith("_export/"):
            continue
        node = parse_node(o._read(f"{o.root}/{p}", "node file"), order, p)
        pointers = [*node.children, *(v for _, v in node.entries), *(v for _, v in node.messages),
                    *node.system.values()]
        n += sum(1 for x in pointers if x and "://" in x and src.relative(x) is not None)
    return n
