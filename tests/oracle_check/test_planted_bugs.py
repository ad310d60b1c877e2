"""The standing mutation test of issue 55's planted bugs 4-9 (1-3, the tables' maintenance, are
in `test_tables_oracle`): each bug is planted by monkeypatching the library function where the
check lives, and each scenario runs twice. Clean, the scenario's check finds nothing (the probe
is not blind); planted, it names what went wrong. A future change that weakens one of these
checks the same way fails here.

4. the REST commit drops ``assert-current-schema-id`` (`table_updates.check_requirement`):
   a concurrent schema change over REST must get 409;
5. the REST commit drops ``assert-ref-snapshot-id``: a concurrent append, and a concurrent
   create of the same branch, must get 409;
6. the server accepts any bearer token (`Authenticator.authenticate`);
7. the static token is compared on its first 8 bytes only (the auth module's `compare_digest`):
   same prefix at another length, last byte differs, empty, non-ASCII;
8. the export trusts its own writes (`copying.verify_written` says ok without looking): a
   fault corrupts one copied file at the storage seam (`Storage._io`), the export must fail
   naming it;
9. orphans ignore the age cutoff (`AgeCutoff.checks`), or accept a cutoff below the
   transaction TTL (`effective_orphan_min_age`): an in-flight transaction's staged files must
   survive the run.

The REST bugs need the plant inside the server: one real uvicorn server on a free port of
127.0.0.1 runs the library's app (`build_app`) in a thread of this process, so a monkeypatch
reaches its handlers; the requests go over HTTP as any client's do.
"""

from __future__ import annotations

import hmac
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
import requests

from tests.export.conftest import export_cfg, latest_def, populate, root_files
from tests.rest_catalog.server import new_lakehouse
from tests.rest_catalog.test_spec_answers import SCHEMA, commit, create, http, new_ns
from tests.rest_catalog.test_tokens import get_config, near_misses
from tests.support.jobs import TTL_MS, run_local
from trinitylake.errors import StorageError, TrinityLakeError
from trinitylake.lakehouse import Lakehouse
from trinitylake.storage import Storage

CLEAN_PLANTED = pytest.mark.parametrize("planted", [False, True], ids=["clean", "planted"])


# ---- one in-process server for the REST bugs --------------------------------------------------
@dataclass
class InProcessServer:
    url: str
    token: str
    lakehouse: str


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[InProcessServer]:
    import uvicorn

    from trinitylake.rest_catalog.app import ServerSettings, build_app
    from trinitylake.rest_catalog.auth import Authenticator
    from trinitylake.rest_catalog.server import bind

    lh = new_lakehouse(tmp_path_factory.mktemp("planted") / "lh", audit=False)
    token = f"tok-{uuid.uuid4().hex}"
    app = build_app(ServerSettings(lakehouse=lh, audit=False), Authenticator(token=token))
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, timeout_keep_alive=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()  # not the main thread: uvicorn installs no signal handlers
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the in-process server did not start"
        time.sleep(0.05)
    yield InProcessServer(f"http://127.0.0.1:{sock.getsockname()[1]}", token, lh)
    server.should_exit = True
    thread.join(15)
    sock.close()


# ---- 4. assert-current-schema-id ----------------------------------------------------------------
def drop_requirement(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Planted: `check_requirement` skips requirements of type `kind` (the REST commit's check)."""
    from trinitylake.iceberg import table_updates as TU

    real = TU.check_requirement
    monkeypatch.setattr(TU, "check_requirement",
                        lambda req, base: None if req.type == kind else real(req, base))


def schema_race_problems(srv: InProcessServer) -> list[str]:
    """Two writers change the schema, both built on schema 0: the second must get 409 and the
    table keep the first's schema."""
    ns = new_ns(srv)
    assert create(srv, ns, "t").status_code == 200
    fields = SCHEMA["fields"]
    mine = {"type": "struct", "schema-id": 1, "fields": [*fields, {"id": 3, "name": "x", "type": "int", "required": False}]}
    theirs = {"type": "struct", "schema-id": 1, "fields": [*fields, {"id": 3, "name": "y", "type": "string",
                                                                     "required": False}]}
    req = [{"type": "assert-current-schema-id", "current-schema-id": 0}]
    first = commit(srv, ns, "t", req, [{"action": "add-schema", "schema": mine},
                                       {"action": "set-current-schema", "schema-id": -1}])
    assert first.status_code == 200, first.text
    second = commit(srv, ns, "t", req, [{"action": "add-schema", "schema": theirs},
                                        {"action": "set-current-schema", "schema-id": -1}])
    problems = []
    if second.status_code != 409:
        problems.append(f"a concurrent schema change answered {second.status_code}, not 409: {second.text[:200]}")
    meta = http(srv, "GET", f"/v1/namespaces/{ns}/tables/t").json()["metadata"]
    current = next(s for s in meta["schemas"] if s["schema-id"] == meta["current-schema-id"])
    if [f["name"] for f in current["fields"]] != ["id", "data", "x"]:
        problems.append(f"the current schema is not the first writer's: {[f['name'] for f in current['fields']]}")
    return problems


@CLEAN_PLANTED
def test_a_rest_commit_that_drops_assert_current_schema_id_is_caught(served, monkeypatch, planted):
    if planted:
        drop_requirement(monkeypatch, "assert-current-schema-id")
    found = schema_race_problems(served)
    monkeypatch.undo()
    if not planted:
        assert found == []
    else:
        assert found and "not 409" in found[0], found


# ---- 5. assert-ref-snapshot-id ------------------------------------------------------------------
def ref_race_problems(srv: InProcessServer) -> list[str]:
    """Over REST, on a table with two snapshots: two PyIceberg writers append to the table both
    loaded, and two writers create the same branch (each ``assert-ref-snapshot-id`` null) at
    different snapshots. Each second writer must get 409 (CommitFailedException, which clients
    retry), and the table keep the first writer's rows and branch."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import CommitFailedException

    cat = RestCatalog("planted", uri=srv.url, token=srv.token)
    ns = new_ns(srv)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    cat.create_table((ns, "t"), schema=schema)
    cat.load_table((ns, "t")).append(pa.table({"id": [1]}, schema=schema))
    a, b = cat.load_table((ns, "t")), cat.load_table((ns, "t"))
    a.append(pa.table({"id": [2]}, schema=schema))
    problems = []
    try:
        b.append(pa.table({"id": [3]}, schema=schema))
        problems.append("a concurrent append committed (no 409)")
    except CommitFailedException as e:
        if "has changed" not in str(e):
            problems.append(f"the concurrent append failed for another reason: {e}")
    except Exception as e:  # noqa: BLE001 - any other answer is what the check reports
        problems.append(f"a concurrent append answered {type(e).__name__} (no 409): {e}")
    rows = sorted(cat.load_table((ns, "t")).scan().to_arrow()["id"].to_pylist())
    if rows != [1, 2]:
        problems.append(f"the table holds rows {rows}, not the first writer's [1, 2]")

    snaps = [s.snapshot_id for s in cat.load_table((ns, "t")).snapshots()]
    req = [{"type": "assert-ref-snapshot-id", "ref": "audit", "snapshot-id": None}]
    for i, snap in enumerate(snaps[:2]):
        r = commit(srv, ns, "t", req, [{"action": "set-snapshot-ref", "ref-name": "audit", "type": "branch",
                                        "snapshot-id": snap}])
        if i == 0:
            assert r.status_code == 200, r.text
        elif r.status_code != 409:
            problems.append(f"a concurrent create of branch audit answered {r.status_code} (no 409)")
    refs = http(srv, "GET", f"/v1/namespaces/{ns}/tables/t").json()["metadata"]["refs"]
    if refs["audit"]["snapshot-id"] != snaps[0]:
        problems.append("branch audit is not where its first writer created it")
    return problems


@CLEAN_PLANTED
def test_a_rest_commit_that_drops_assert_ref_snapshot_id_is_caught(served, monkeypatch, planted):
    if planted:
        drop_requirement(monkeypatch, "assert-ref-snapshot-id")
    found = ref_race_problems(served)
    monkeypatch.undo()
    if not planted:
        assert found == []
    else:
        assert "a concurrent create of branch audit answered 200 (no 409)" in found, found
        assert "branch audit is not where its first writer created it" in found, found
        assert "no 409" in found[0], found


# ---- 6, 7. the bearer token ---------------------------------------------------------------------
def wrong_tokens(token: str) -> dict[str, str | bytes | None]:
    """Authorization headers that must be refused, by what is wrong with them."""
    headers: dict[str, str | bytes | None] = {f"a token: {what}": f"Bearer {t}" for what, t in near_misses(token).items()}
    headers.update({
        "no header": None,
        "another token": "Bearer wrong-" + token,
        "an empty token": "Bearer ",
        "a non-ASCII token": "Bearer tök-ünïcødé-tøken-0123456789".encode(),
        "the token with a non-ASCII last byte": f"Bearer {token[:-1]}é".encode(),
    })
    return headers


def token_problems(srv: InProcessServer) -> list[str]:
    """The right token is accepted; each wrong one accepted is a problem."""
    problems = []
    ok = get_config(srv, f"Bearer {srv.token}")  # type: ignore[arg-type]
    if ok.status_code != 200:
        problems.append(f"the right token answered {ok.status_code}")
    for what, header in wrong_tokens(srv.token).items():
        r = get_config(srv, header)  # type: ignore[arg-type]
        if r.status_code != 401:
            problems.append(f"{what}: answered {r.status_code}, not 401")
    return problems


@CLEAN_PLANTED
def test_a_server_that_accepts_any_bearer_token_is_caught(served, monkeypatch, planted):
    from trinitylake.rest_catalog.auth import Authenticator, Principal

    if planted:
        monkeypatch.setattr(Authenticator, "authenticate", lambda self, authorization: Principal("token"))
    found = token_problems(served)
    monkeypatch.undo()
    if not planted:
        assert found == []
    else:
        assert any(p.startswith("another token:") for p in found), found
        assert any(p.startswith("no header:") for p in found), found


@CLEAN_PLANTED
def test_a_token_compared_on_its_first_8_bytes_is_caught(served, monkeypatch, planted):
    from trinitylake.rest_catalog import auth

    if planted:
        monkeypatch.setattr(auth, "hmac", SimpleNamespace(new=hmac.new, compare_digest=lambda a, b: a[:8] == b[:8]))
    found = token_problems(served)
    monkeypatch.undo()
    if not planted:
        assert found == []
    else:
        wrong = {p.split(": answered")[0] for p in found}
        for what in ("a token: its first 8 bytes", "a token: one byte longer", "a token: differs only in its last byte",
                     "the token with a non-ASCII last byte"):
            assert what in wrong, found
        assert "an empty token" not in wrong and "another token" not in wrong, found


# ---- 8. the export's check after a copy ---------------------------------------------------------
@contextmanager
def corrupting_one_copy(pattern: str) -> Iterator[list[str]]:
    """The storage seam every operation goes through (`Storage._io`) stores the bytes of the
    first exclusive create matching `pattern` less their last 3 bytes, and reports success
    (a faulty disk or filesystem). Yields the path(s) hit."""
    rx = re.compile(pattern)
    real = Storage._io
    hit: list[str] = []

    def io(self: Storage, op: str, path: str, fn: Callable[..., Any], *args: Any) -> Any:
        if (op == "create_exclusive" and not hit and rx.search(path) and len(args) >= 2
                and isinstance(args[1], bytes | bytearray | memoryview)):
            args = (args[0], bytes(args[1])[:-3], *args[2:])
            hit.append(path)
        return real(self, op, path, fn, *args)

    Storage._io = io  # type: ignore[method-assign]
    try:
        yield hit
    finally:
        Storage._io = real  # type: ignore[method-assign]


#: Definition files of the exported tree (copied from the source), not the root nor ``_export/``.
DEFINITION = r"(^|/)(?!_)[^/]*\.(?!arrow$)[a-z]+$"


def export_problems(lh: Lakehouse, target: str) -> list[str]:
    """An export whose one copied definition file is corrupted on its way must fail naming it,
    and record no export."""
    from trinitylake.jobs.export.job import run_export
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution

    cfg = export_cfg(lh, target, "e1")
    result = JobResult(job="export", run_id=cfg.run_id, lakehouse=lh.uri)
    problems = []
    with corrupting_one_copy(DEFINITION) as hit:
        try:
            run_export(Execution("local", session_factory=None), lh, cfg, result)
            problems.append("the export succeeded over a corrupted copy")
        except TrinityLakeError as e:
            if not (hit and hit[0] in str(e)):
                problems.append(f"the export's error does not name the corrupted file {hit}: {e}")
    assert len(hit) == 1, "the fault found no definition file to corrupt"
    if "e1" in latest_def(lh).exported_snapshots or root_files(Storage(target)):
        problems.append("the export was recorded, or its root written, over a corrupted copy")
    return problems


@CLEAN_PLANTED
def test_an_export_that_trusts_its_own_writes_is_caught(make_lakehouse, tmp_path, monkeypatch, planted):
    from trinitylake.jobs.export import copying

    lh = make_lakehouse()
    populate(lh, namespaces=1, tables=4, alters=1, drops=0)
    if planted:
        monkeypatch.setattr(copying, "verify_written", lambda *args, **kwargs: copying.OK)
    found = export_problems(lh, str(tmp_path / "target"))
    monkeypatch.undo()
    if not planted:
        assert found == []
    else:
        assert found and "succeeded over a corrupted copy" in found[0], found


def test_the_corrupted_export_fails_with_a_storage_error(make_lakehouse, tmp_path):
    """What the clean run above accepts is the check after the copy, not some other failure."""
    lh = make_lakehouse()
    populate(lh, namespaces=1, tables=2, alters=0, drops=0)
    from trinitylake.jobs.export.job import run_export
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution

    cfg = export_cfg(lh, str(tmp_path / "target"), "e1")
    with corrupting_one_copy(DEFINITION) as hit, pytest.raises(StorageError, match="failed verification after the copy"):
        run_export(Execution("local", session_factory=None), lh, cfg,
                   JobResult(job="export", run_id=cfg.run_id, lakehouse=lh.uri))
    assert len(hit) == 1


# ---- 9. orphans' age cutoff ---------------------------------------------------------------------
def in_flight(tmp_path) -> tuple[Lakehouse, Any, list[str]]:
    """A lakehouse (TTL one minute) with a transaction in flight: it staged a table's definition
    file ten seconds ago, younger than the TTL, that no version reaches yet."""
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=TTL_MS)
    lh.create_namespace("ns")
    lh.create_table("ns", "kept")
    txn = lh.begin()
    txn.create_table("ns", "in_flight")
    staged = [p for p in txn.writes.values() if p]
    assert staged
    ten_s_ago = time.time() - 10
    for p in staged:
        os.utime(lh.storage.root[len("file://"):] + "/" + p, (ten_s_ago, ten_s_ago))
    return lh, txn, staged


def in_flight_problems(lh: Lakehouse, txn: Any, staged: list[str]) -> list[str]:
    """The staged files survived, and the transaction commits a readable table."""
    problems = [f"the in-flight transaction's staged file {p} was deleted" for p in staged if not lh.storage.exists(p)]
    try:
        txn.commit()
        Lakehouse.open(lh.uri, audit=False).view().load_table("ns", "in_flight")
    except (TrinityLakeError, FileNotFoundError) as e:
        problems.append(f"the in-flight transaction's table is unreadable after its commit: {type(e).__name__}: {e}")
    return problems


@CLEAN_PLANTED
def test_orphans_that_ignore_the_age_cutoff_are_caught(tmp_path, monkeypatch, planted):
    from trinitylake.jobs.orphans.rules import AgeCutoff

    lh, txn, staged = in_flight(tmp_path)
    if planted:
        monkeypatch.setattr(AgeCutoff, "checks", lambda self: (("gt", 0.0),))
    res = run_local("orphans", lh.uri)
    monkeypatch.undo()
    assert res.status == "succeeded"
    found = in_flight_problems(lh, txn, staged)
    if not planted:
        assert found == []
    else:
        assert found and "staged file" in found[0], found


@CLEAN_PLANTED
def test_orphans_that_accept_a_cutoff_below_the_ttl_are_caught(tmp_path, monkeypatch, planted):
    from trinitylake.errors import UnsafeOperationError
    from trinitylake.jobs.orphans import job as orphans_job
    from trinitylake.jobs.runner import JobFailedError

    lh, txn, staged = in_flight(tmp_path)
    if planted:
        monkeypatch.setattr(orphans_job, "effective_orphan_min_age",
                            lambda cfg, *, txn_ttl_ms: cfg.older_than if cfg.older_than is not None else txn_ttl_ms)
    found = []
    try:
        run_local("orphans", lh.uri, older_than=1000)  # one second: below the one-minute TTL, not unsafe
        found.append("a run with older_than below the transaction TTL was not refused")
    except JobFailedError as e:
        assert isinstance(e.__cause__, UnsafeOperationError), e
    monkeypatch.undo()
    found += in_flight_problems(lh, txn, staged)
    if not planted:
        assert found == []
    else:
        assert found[0].startswith("a run with older_than below") and any("staged file" in p for p in found), found


def test_the_rest_scenarios_run_over_http(served):
    """The in-process server answers as the served one: no token, 401 with the error model."""
    r = requests.get(served.url + "/v1/config", timeout=30)
    assert r.status_code == 401 and r.json()["error"]["type"] == "NotAuthorizedException"
