"""The catalog server with PyIceberg's RestCatalog as its client (and raw HTTP where the
protocol's answers themselves are checked): the real `tlake catalog serve` on a free port."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    ForbiddenError,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)

from tests.rest_catalog.server import TLAKE, new_lakehouse, start
from trinitylake.control import ControlTable
from trinitylake.lakehouse import Lakehouse

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("who", pa.string())])


def rows(ids: list[int], who: str = "a") -> pa.Table:
    return pa.table({"id": ids, "who": [who] * len(ids)}, schema=SCHEMA)


def ids_of(table) -> list[int]:
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def client(srv, **props) -> RestCatalog:
    return RestCatalog("tl", uri=srv.url, token=srv.token, **props)


def own_catalog(lakehouse: str, **props):
    return load_catalog("own", **{"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog", "lakehouse": lakehouse,
                                  "audit": "false", **props})


def fresh_ns(cat: RestCatalog) -> str:
    ns = f"ns_{uuid.uuid4().hex[:8]}"
    cat.create_namespace(ns)
    return ns


def http(srv, method: str, path: str, token: str | None = "", **kw) -> requests.Response:
    headers = kw.pop("headers", {})
    tok = srv.token if token == "" else token
    if tok is not None:
        headers["Authorization"] = f"Bearer {tok}"
    return requests.request(method, srv.url + path, headers=headers, timeout=30, **kw)


# ---- the round trip -------------------------------------------------------------------------------
def test_create_append_read_back_and_the_lakehouse_sees_the_same_table(served):
    cat = client(served)
    ns = fresh_ns(cat)
    t = cat.create_table(f"{ns}.orders", schema=SCHEMA)
    t.append(rows([1, 2, 3]))
    t.append(rows([4]))
    assert ids_of(cat.load_table(f"{ns}.orders")) == [1, 2, 3, 4]
    assert (ns, "orders") in cat.list_tables(ns)
    assert (ns,) in cat.list_namespaces()

    own = own_catalog(served.lakehouse)
    assert ids_of(own.load_table(f"{ns}.orders")) == [1, 2, 3, 4]
    out = subprocess.run([TLAKE, "--lakehouse", served.lakehouse, "table", "describe", f"{ns}.orders", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    described = json.loads(out.stdout)
    assert cat.load_table(f"{ns}.orders").metadata_location in json.dumps(described)


def test_namespaces_properties_rename_register_drop(served):
    cat = client(served)
    ns = f"ns_{uuid.uuid4().hex[:8]}"
    cat.create_namespace(ns, {"owner": "sales"})
    with pytest.raises(NamespaceAlreadyExistsError):
        cat.create_namespace(ns)
    assert cat.load_namespace_properties(ns)["owner"] == "sales"
    summary = cat.update_namespace_properties(ns, removals={"owner", "nope"}, updates={"team": "x"})
    assert summary.removed == ["owner"] and summary.updated == ["team"] and summary.missing == ["nope"]
    assert cat.load_namespace_properties(ns) == {"team": "x"}
    assert cat.namespace_exists(ns) and not cat.namespace_exists("no_such_ns")

    t = cat.create_table((ns, "a"), schema=SCHEMA)
    t.append(rows([7]))
    with pytest.raises(TableAlreadyExistsError):
        cat.create_table((ns, "a"), schema=SCHEMA)
    cat.rename_table((ns, "a"), (ns, "b"))
    assert cat.table_exists((ns, "b")) and not cat.table_exists((ns, "a"))
    assert ids_of(cat.load_table((ns, "b"))) == [7]

    location = cat.load_table((ns, "b")).metadata_location
    registered = cat.register_table((ns, "c"), location)
    assert ids_of(registered) == [7]

    cat.purge_table((ns, "c"))  # purgeRequested: the files stay (earlier versions still read them)
    assert not cat.table_exists((ns, "c"))
    assert ids_of(cat.load_table((ns, "b"))) == [7]
    cat.drop_table((ns, "b"))
    with pytest.raises(NoSuchTableError):
        cat.load_table((ns, "b"))
    assert cat.list_views(ns) == []
    cat.drop_namespace(ns)
    with pytest.raises(NoSuchNamespaceError):
        cat.load_namespace_properties(ns)


# ---- concurrency ----------------------------------------------------------------------------------
def test_stale_writer_gets_commit_failed_and_no_row_is_lost(served):
    cat = client(served)
    ns = fresh_ns(cat)
    cat.create_table(f"{ns}.t", schema=SCHEMA).append(rows(list(range(10))))
    stale = cat.load_table(f"{ns}.t")
    cat.load_table(f"{ns}.t").append(rows(list(range(10, 20))))
    with pytest.raises(CommitFailedException):
        stale.append(rows([99]))
    assert ids_of(cat.load_table(f"{ns}.t")) == list(range(20))


def test_eight_concurrent_writers_every_append_committed_or_refused_and_retried(served):
    cat = client(served)
    ns = fresh_ns(cat)
    cat.create_table(f"{ns}.t", schema=SCHEMA)
    writers, per_writer = 8, 3
    refused = [0] * writers
    errors: list[BaseException] = []
    start_line = threading.Barrier(writers)

    def write(w: int) -> None:
        try:
            mine = client(served)
            start_line.wait()
            for i in range(per_writer):
                while True:
                    t = mine.load_table(f"{ns}.t")
                    try:
                        t.append(rows([w * 100 + i], who=f"w{w}"))
                        break
                    except CommitFailedException:
                        refused[w] += 1
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    assert not errors, errors
    got = ids_of(cat.load_table(f"{ns}.t"))
    assert got == sorted(w * 100 + i for w in range(writers) for i in range(per_writer))
    assert sum(refused) > 0  # they did collide, and the refused ones were retried
    assert len(cat.load_table(f"{ns}.t").metadata.snapshots) == writers * per_writer


# ---- time travel ----------------------------------------------------------------------------------
def test_time_travel_by_query_parameter_and_prefix_is_read_only(served):
    cat = client(served)
    ns = fresh_ns(cat)
    cat.create_table(f"{ns}.t", schema=SCHEMA).append(rows([1]))
    before = Lakehouse.open(served.lakehouse, audit=False).latest_version()
    cat.load_table(f"{ns}.t").append(rows([2]))

    r = http(served, "GET", f"/v1/namespaces/{ns}/tables/t", params={"version": before})
    assert r.status_code == 200
    past = cat.load_table(f"{ns}.t")
    assert r.json()["metadata-location"] != past.metadata_location

    # a client pinned by the warehouse (the server answers it as a prefix)
    old = client(served, warehouse=f"version-{before}")
    assert ids_of(old.load_table(f"{ns}.t")) == [1]
    assert ids_of(cat.load_table(f"{ns}.t")) == [1, 2]
    with pytest.raises(ForbiddenError):
        old.create_namespace(f"x_{uuid.uuid4().hex[:6]}")
    with pytest.raises(ForbiddenError):
        old.load_table(f"{ns}.t").append(rows([3]))
    assert ids_of(cat.load_table(f"{ns}.t")) == [1, 2]
    r = http(served, "POST", "/v1/namespaces", params={"version": before}, json={"namespace": ["y"]})
    assert r.status_code == 403 and r.json()["error"]["type"] == "ForbiddenException"
    r = http(served, "GET", f"/v1/namespaces/{ns}/tables/t", params={"version": 10**9})
    assert r.status_code == 404 and "Traceback" not in r.text


# ---- multi-table transactions ---------------------------------------------------------------------
def _uuid(srv, ns: str, t: str) -> str:
    return http(srv, "GET", f"/v1/namespaces/{ns}/tables/{t}").json()["metadata"]["table-uuid"]


def test_transactions_commit_is_one_lakehouse_version_all_or_nothing(served):
    cat = client(served)
    ns = fresh_ns(cat)
    for name in ("a", "b"):
        cat.create_table((ns, name), schema=SCHEMA).append(rows([1]))
    lh = Lakehouse.open(served.lakehouse, audit=False)
    v0 = lh.latest_version()
    change = [{"identifier": {"namespace": [ns], "name": name},
               "requirements": [{"type": "assert-table-uuid", "uuid": _uuid(served, ns, name)}],
               "updates": [{"action": "set-properties", "updates": {"batch": "1"}}]} for name in ("a", "b")]
    r = http(served, "POST", "/v1/transactions/commit", json={"table-changes": change})
    assert r.status_code == 204, r.text
    assert lh.latest_version() == v0 + 1
    assert all(cat.load_table((ns, n)).properties["batch"] == "1" for n in ("a", "b"))

    # one table's requirement fails: nothing is committed
    snap = cat.load_table((ns, "b")).metadata.current_snapshot_id
    bad = [{**change[0], "updates": [{"action": "set-properties", "updates": {"batch": "2"}}]},
           {**change[1], "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snap + 1}],
            "updates": [{"action": "set-properties", "updates": {"batch": "2"}}]}]
    r = http(served, "POST", "/v1/transactions/commit", json={"table-changes": bad})
    assert r.status_code == 409 and r.json()["error"]["type"] == "CommitFailedException"
    assert lh.latest_version() == v0 + 1
    assert all(cat.load_table((ns, n)).properties["batch"] == "1" for n in ("a", "b"))


def test_stage_create_then_commit_with_assert_create(served):
    cat = client(served)
    ns = fresh_ns(cat)
    txn = cat.create_table_transaction((ns, "staged"), schema=SCHEMA)
    txn.set_properties(made="in a create transaction")
    assert not cat.table_exists((ns, "staged"))
    txn.commit_transaction()
    t = cat.load_table((ns, "staged"))
    assert t.properties["made"] == "in a create transaction"
    t.append(rows([5]))
    assert ids_of(own_catalog(served.lakehouse).load_table((ns, "staged"))) == [5]


# ---- the protocol's errors ------------------------------------------------------------------------
def test_errors_follow_the_spec_model_never_a_traceback(served):
    r = http(served, "GET", "/v1/config", token=None)
    assert r.status_code == 401 and r.json()["error"]["type"] == "NotAuthorizedException"
    r = http(served, "GET", "/v1/config", token="wrong-" + served.token)
    assert r.status_code == 401 and served.token not in r.text
    with pytest.raises(Exception, match="401|Unauthorized|NotAuthorized"):
        RestCatalog("tl", uri=served.url, token="not-the-token")

    cat = client(served)
    ns = fresh_ns(cat)
    for body in (b"{not json", b"[1, 2]", b'{"namespace": "not a list"}'):
        r = http(served, "POST", "/v1/namespaces", data=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["type"] == "BadRequestException" and err["code"] == 400 and "Traceback" not in r.text
    r = http(served, "POST", f"/v1/namespaces/{ns}/tables/nope", json={"requirements": [], "updates": []})
    assert r.status_code == 404 and r.json()["error"]["type"] == "NoSuchTableException"
    r = http(served, "GET", "/v1/namespaces/no_such_ns/tables")
    assert r.status_code == 404 and r.json()["error"]["type"] == "NoSuchNamespaceException"
    r = http(served, "GET", "/v1/no/such/route/here")
    assert r.status_code == 404 and r.json()["error"]["code"] == 404
    r = http(served, "POST", "/v1/namespaces", data=b"{" + b" " * (9 << 20) + b"}",
             headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == 413
    r = http(served, "GET", "/v1/versionx-3/namespaces")
    assert r.status_code == 400


def test_commits_are_audit_rows_naming_the_server_and_never_the_token(served):
    cat = client(served)
    ns = fresh_ns(cat)
    cat.create_table((ns, "audited"), schema=SCHEMA).append(rows([1]))
    control = ControlTable(served.lakehouse.rstrip("/") + "/_control").to_arrow().to_pylist()
    mine = [r for r in control if f"{ns}.audited" in (r["command"] or "")]
    commands = {r["command"] for r in mine if r["record_type"] == "committed"}
    assert f"catalog serve create table {ns}.audited" in commands
    assert f"catalog serve commit table {ns}.audited" in commands
    assert all(json.loads(r["arguments"])["client"] == "token" for r in mine)
    assert served.token not in json.dumps(control, default=str)
    assert served.token not in served.output()
    assert "POST /v1/namespaces" in served.output()  # the access log is on, without headers


# ---- modes and credentials ------------------------------------------------------------------------
def test_read_only_server_refuses_writes(tmp_path):
    lh = new_lakehouse(tmp_path / "lh")
    own = own_catalog(lh)
    own.create_namespace("s")
    own.create_table("s.t", schema=SCHEMA).append(rows([1]))
    srv = start(lh, tmp_path, "--read-only")
    try:
        cat = client(srv)
        assert ids_of(cat.load_table("s.t")) == [1]
        with pytest.raises(ForbiddenError):
            cat.create_namespace("other")
        with pytest.raises(ForbiddenError):
            cat.load_table("s.t").append(rows([2]))
        with pytest.raises(ForbiddenError):
            cat.drop_table("s.t")
        assert ids_of(own.load_table("s.t")) == [1]
    finally:
        srv.stop()


def test_oauth2_client_credentials_issue_tokens_and_secrets_stay_out_of_the_output(tmp_path):
    lh = new_lakehouse(tmp_path / "lh")
    secret = f"sec-{uuid.uuid4().hex}"
    srv = start(lh, tmp_path, token="", env={"TLAKE_CATALOG_CREDENTIAL": f"spark-etl:{secret}"})
    try:
        cat = RestCatalog("tl", uri=srv.url, credential=f"spark-etl:{secret}")
        cat.create_namespace("s")
        cat.create_table("s.t", schema=SCHEMA).append(rows([1, 2]))
        assert ids_of(cat.load_table("s.t")) == [1, 2]
        with pytest.raises(Exception, match="invalid_client|401|Unauthorized"):
            RestCatalog("tl", uri=srv.url, credential="spark-etl:wrong")
        r = requests.post(srv.url + "/v1/oauth/tokens", timeout=10,
                          data={"grant_type": "client_credentials", "client_id": "spark-etl", "client_secret": secret})
        token = r.json()["access_token"]
        assert http(srv, "GET", "/v1/config", token=token).status_code == 200
        assert http(srv, "GET", "/v1/config", token=token[:-2] + "xx").status_code == 401
        rows_ = ControlTable(lh.rstrip("/") + "/_control").to_arrow().to_pylist()
        assert any(json.loads(r["arguments"] or "{}").get("client") == "spark-etl" for r in rows_)
        out = srv.output()
        assert secret not in out and token not in out
        assert secret not in json.dumps(rows_, default=str) and token not in json.dumps(rows_, default=str)
    finally:
        srv.stop()


def test_refuses_to_start_without_a_token(tmp_path):
    lh = new_lakehouse(tmp_path / "lh")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TLAKE_CATALOG_")}
    out = subprocess.run([TLAKE, "--lakehouse", lh, "catalog", "serve", "--port", "1"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 1
    assert "TLAKE_CATALOG_TOKEN" in out.stderr and "Traceback" not in out.stderr
