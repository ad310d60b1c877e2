"""Iceberg views through the catalog server, stored as the lakehouse's ViewDefs: PyIceberg's
RestCatalog for create/list/exists/load/drop, plain HTTP with the spec's JSON for replace,
rename and the answers' texts; time travel by prefix; the view builder's rules."""

from __future__ import annotations

import json
import uuid

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchViewError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

from trinitylake.iceberg.view_metadata import ViewMetadataBuilder, ViewStateError, ViewValidationError
from trinitylake.lakehouse import Lakehouse
from trinitylake.lakehouse.view import VIEW_METADATA_LOCATION

SCHEMA = {"type": "struct", "schema-id": 7, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
OTHER = {"type": "struct", "schema-id": 3,
         "fields": [{"id": 1, "name": "some_id", "type": "long", "required": False},
                    {"id": 2, "name": "who", "type": "string", "required": False}]}


def version(sql: str, dialect: str = "spark", ns: str = "ns", version_id: int = 1, schema_id: int = 0) -> dict:
    return {"version-id": version_id, "schema-id": schema_id, "timestamp-ms": 1_700_000_000_000,
            "summary": {"engine-name": "test"}, "default-namespace": [ns],
            "representations": [{"type": "sql", "sql": sql, "dialect": dialect}]}


def http(srv, method: str, path: str, body: dict | None = None) -> requests.Response:
    return requests.request(method, srv.url + path, headers={"Authorization": f"Bearer {srv.token}"},
                            data=json.dumps(body) if body is not None else None, timeout=30)


def fresh_ns(srv) -> str:
    ns = f"ns_{uuid.uuid4().hex[:8]}"
    assert http(srv, "POST", "/v1/namespaces", {"namespace": [ns]}).status_code == 200
    return ns


def create(srv, ns: str, name: str, sql: str = "select 1", **extra) -> dict:
    r = http(srv, "POST", f"/v1/namespaces/{ns}/views",
             {"name": name, "schema": SCHEMA, "view-version": version(sql, ns=ns), "properties": {}, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def error(r: requests.Response) -> tuple[int, str, str]:
    e = r.json()["error"]
    return r.status_code, e["type"], e["message"]


def test_config_advertises_the_view_endpoints(served):
    endpoints = http(served, "GET", "/v1/config").json()["endpoints"]
    for e in ("POST /v1/{prefix}/namespaces/{namespace}/views", "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
              "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
              "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
              "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}", "POST /v1/{prefix}/views/rename"):
        assert e in endpoints


def test_pyiceberg_create_list_load_drop(served):
    cat = RestCatalog("tl", uri=served.url, token=served.token)
    ns = fresh_ns(served)
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "who", StringType(), required=False))
    vv = ViewVersion(version_id=1, schema_id=0, default_namespace=(ns,), representations=[
        ViewRepresentation(SQLViewRepresentation(type="sql", sql=f"select id, who from {ns}.t", dialect="spark"))])
    view = cat.create_view((ns, "v"), schema, vv, properties={"comment": "hi"})
    assert view.metadata.current_version_id == 1 and view.metadata.properties == {"comment": "hi"}
    assert cat.list_views(ns) == [(ns, "v")]
    assert cat.view_exists((ns, "v"))
    loaded = cat.load_view((ns, "v"))
    assert loaded.metadata.view_uuid == view.metadata.view_uuid
    assert [e.version_id for e in loaded.metadata.version_log] == [1]
    assert loaded.metadata.schemas[0].schema_id == 0
    assert cat.list_tables(ns) == []  # a view is no table
    # stored as the lakehouse's view object, pointing at the metadata file the server answered
    d = Lakehouse.open(served.lakehouse, audit=False).view().load_view(ns, "v")
    r = http(served, "GET", f"/v1/namespaces/{ns}/views/v").json()
    assert d.properties[VIEW_METADATA_LOCATION] == r["metadata-location"]
    assert r["metadata-location"].endswith(".metadata.json") and "/metadata/00000-" in r["metadata-location"]
    cat.drop_view((ns, "v"))
    assert not cat.view_exists((ns, "v"))
    with pytest.raises(NoSuchViewError):
        cat.load_view((ns, "v"))


def test_replace_applies_updates_as_the_java_builder(served):
    ns = fresh_ns(served)
    created = create(served, ns, "v", "select * from t")
    meta = created["metadata"]
    assert meta["schemas"][0]["schema-id"] == 0  # reassigned from the request's 7
    assert meta["versions"][0]["schema-id"] == 0 and meta["current-version-id"] == 1
    uid = meta["view-uuid"]
    body = {"requirements": [{"type": "assert-view-uuid", "uuid": uid}],
            "updates": [{"action": "add-schema", "schema": OTHER, "last-column-id": 2},
                        {"action": "add-view-version", "view-version": {**version("select some_id, who from t"),
                                                                        "version-id": 2, "schema-id": -1}},
                        {"action": "set-current-view-version", "view-version-id": -1},
                        {"action": "set-properties", "updates": {"k": "v"}}]}
    r = http(served, "POST", f"/v1/namespaces/{ns}/views/v", body)
    assert r.status_code == 200, r.text
    m2 = r.json()["metadata"]
    assert m2["current-version-id"] == 2 and m2["properties"] == {"k": "v"}
    assert [s["schema-id"] for s in m2["schemas"]] == [0, 1]
    assert m2["versions"][1]["schema-id"] == 1
    assert [e["version-id"] for e in m2["version-log"]] == [1, 2]
    assert r.json()["metadata-location"].rsplit("/", 1)[-1].startswith("00001-")

    # The same version sent again: it is identical to version 2, so its id is reused, nothing
    # changes and nothing new is written (-1 would not name it: it was not added by this commit)
    again = http(served, "POST", f"/v1/namespaces/{ns}/views/v", {
        "requirements": [{"type": "assert-view-uuid", "uuid": uid}],
        "updates": [{"action": "add-view-version", "view-version": {**version("select some_id, who from t"),
                                                                    "version-id": 5, "schema-id": 1}},
                    {"action": "set-current-view-version", "view-version-id": 2}]})
    assert again.status_code == 200, again.text
    assert again.json()["metadata-location"] == r.json()["metadata-location"]

    # A version new to the view with a stale id gets the next id (server-side retry)
    third = http(served, "POST", f"/v1/namespaces/{ns}/views/v", {
        "requirements": [{"type": "assert-view-uuid", "uuid": uid}],
        "updates": [{"action": "add-view-version", "view-version": {**version("select count(*) from t"),
                                                                    "version-id": 2, "schema-id": 0}},
                    {"action": "set-current-view-version", "view-version-id": -1}]})
    assert third.status_code == 200, third.text
    m3 = third.json()["metadata"]
    assert m3["current-version-id"] == 3 and m3["versions"][2]["schema-id"] == 0

    # requirements
    bad = http(served, "POST", f"/v1/namespaces/{ns}/views/v", {
        "requirements": [{"type": "assert-view-uuid", "uuid": str(uuid.uuid4())}],
        "updates": [{"action": "set-properties", "updates": {"x": "y"}}]})
    status, kind, msg = error(bad)
    assert (status, kind) == (409, "CommitFailedException")
    assert msg.startswith(f"Requirement failed: view UUID does not match: expected {uid} != ")
    # the builder's refusals answer Java's exception type
    dup = http(served, "POST", f"/v1/namespaces/{ns}/views", {
        "name": "dup", "schema": SCHEMA, "properties": {},
        "view-version": {**version("select 1", dialect="trino"),
                         "representations": [{"type": "sql", "sql": "a", "dialect": "trino"},
                                             {"type": "sql", "sql": "b", "dialect": "Trino"}]}})
    assert error(dup) == (400, "IllegalArgumentException",
                          "Invalid view version: Cannot add multiple queries for dialect trino")
    assert http(served, "HEAD", f"/v1/namespaces/{ns}/views/dup").status_code == 404


def test_names_shared_with_tables_and_renames(served):
    ns, other = fresh_ns(served), fresh_ns(served)
    create(served, ns, "v")
    r = http(served, "POST", f"/v1/namespaces/{ns}/tables", {"name": "t", "schema": SCHEMA})
    assert r.status_code == 200, r.text
    assert error(http(served, "POST", f"/v1/namespaces/{ns}/views",
                      {"name": "v", "schema": SCHEMA, "view-version": version("x", ns=ns)})) == (
        409, "AlreadyExistsException", f"View already exists: {ns}.v")
    assert error(http(served, "POST", f"/v1/namespaces/{ns}/views",
                      {"name": "t", "schema": SCHEMA, "view-version": version("x", ns=ns)})) == (
        409, "AlreadyExistsException", f"Table with same name already exists: {ns}.t")
    status, kind, msg = error(http(served, "POST", f"/v1/namespaces/{ns}/tables", {"name": "v", "schema": SCHEMA}))
    assert (status, kind) == (409, "AlreadyExistsException") and msg.startswith(f"View with same name already exists: {ns}.v")
    # a table never loads as a view, nor a view as a table
    assert error(http(served, "GET", f"/v1/namespaces/{ns}/views/t"))[:2] == (404, "NoSuchViewException")
    assert error(http(served, "GET", f"/v1/namespaces/{ns}/tables/v"))[:2] == (404, "NoSuchTableException")

    def rename(src, dst):
        return http(served, "POST", "/v1/views/rename", {"source": {"namespace": [src[0]], "name": src[1]},
                                                          "destination": {"namespace": [dst[0]], "name": dst[1]}})

    assert error(rename((ns, "v"), (ns, "t"))) == (409, "AlreadyExistsException",
                                                   f"Cannot rename {ns}.v to {ns}.t. Table already exists")
    create(served, ns, "v2")
    assert error(rename((ns, "v"), (ns, "v2"))) == (409, "AlreadyExistsException",
                                                    f"Cannot rename {ns}.v to {ns}.v2. View already exists")
    assert error(rename((ns, "v"), ("missing_ns", "v"))) == (404, "NoSuchNamespaceException",
                                                             "Namespace does not exist: missing_ns")
    assert error(rename((ns, "nope"), (ns, "x")))[:2] == (404, "NoSuchViewException")
    r_table = http(served, "POST", "/v1/tables/rename", {"source": {"namespace": [ns], "name": "t"},
                                                         "destination": {"namespace": [ns], "name": "v2"}})
    assert error(r_table) == (409, "AlreadyExistsException", f"Cannot rename {ns}.t to {ns}.v2. View already exists")

    before = http(served, "GET", f"/v1/namespaces/{ns}/views/v").json()
    assert rename((ns, "v"), (other, "moved")).status_code == 204
    after = http(served, "GET", f"/v1/namespaces/{other}/views/moved").json()
    assert after["metadata"]["view-uuid"] == before["metadata"]["view-uuid"]
    assert http(served, "GET", f"/v1/namespaces/{ns}/views").json()["identifiers"] == [{"namespace": [ns], "name": "v2"}]
    assert http(served, "GET", f"/v1/namespaces/{other}/views").json()["identifiers"] == [
        {"namespace": [other], "name": "moved"}]
    # a namespace holding a view is not empty
    status, kind, _ = error(http(served, "DELETE", f"/v1/namespaces/{other}"))
    assert (status, kind) == (409, "NamespaceNotEmptyException")


def test_concurrent_replaces_both_commit_and_leave_no_stray_file(served):
    """Two clients replace one view at once from the same base: the commit that loses the
    lakehouse race is retried on the new view (requirements checked again), so both land, and
    the loser's unreferenced metadata file is deleted."""
    import os
    import threading

    ns = fresh_ns(served)
    base = create(served, ns, "v", "select 0")
    uid = base["metadata"]["view-uuid"]
    answers: list[requests.Response] = []
    go = threading.Barrier(4)

    def replace(i: int) -> None:
        go.wait()
        answers.append(http(served, "POST", f"/v1/namespaces/{ns}/views/v", {
            "requirements": [{"type": "assert-view-uuid", "uuid": uid}],
            "updates": [{"action": "add-view-version", "view-version": {**version(f"select {i}"), "version-id": 2}},
                        {"action": "set-current-view-version", "view-version-id": -1}]}))

    threads = [threading.Thread(target=replace, args=(i,)) for i in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]
    final = http(served, "GET", f"/v1/namespaces/{ns}/views/v").json()
    sqls = sorted(v["representations"][0]["sql"] for v in final["metadata"]["versions"])
    assert sqls == ["select 0", "select 1", "select 2", "select 3", "select 4"]
    assert sorted(v["version-id"] for v in final["metadata"]["versions"]) == [1, 2, 3, 4, 5]
    folder = final["metadata-location"][len("file://"):].rsplit("/", 1)[0]
    assert len(os.listdir(folder)) == 5  # one metadata file per committed change, none left over


def test_views_travel_in_time_by_prefix(served):
    lh = Lakehouse.open(served.lakehouse, audit=False)
    ns = fresh_ns(served)
    first = create(served, ns, "v", "select 1")
    v1 = lh.latest_version()
    r = http(served, "POST", f"/v1/namespaces/{ns}/views/v", {
        "requirements": [{"type": "assert-view-uuid", "uuid": first["metadata"]["view-uuid"]}],
        "updates": [{"action": "add-view-version", "view-version": {**version("select 2"), "version-id": 2}},
                    {"action": "set-current-view-version", "view-version-id": -1}]})
    assert r.status_code == 200, r.text
    v2 = lh.latest_version()
    assert http(served, "DELETE", f"/v1/namespaces/{ns}/views/v").status_code == 204

    def sql_at(prefix: str) -> str:
        m = http(served, "GET", f"/v1/{prefix}/namespaces/{ns}/views/v").json()["metadata"]
        cur = next(x for x in m["versions"] if x["version-id"] == m["current-version-id"])
        return cur["representations"][0]["sql"]

    assert sql_at(f"version-{v1}") == "select 1"
    assert sql_at(f"version-{v2}") == "select 2"
    assert http(served, "GET", f"/v1/version-{v2}/namespaces/{ns}/views").json()["identifiers"] == [
        {"namespace": [ns], "name": "v"}]
    assert http(served, "HEAD", f"/v1/version-{v1}/namespaces/{ns}/views/v").status_code == 204
    assert error(http(served, "GET", f"/v1/latest/namespaces/{ns}/views/v"))[:2] == (404, "NoSuchViewException")
    # writes under time travel are refused, and write nothing
    status, kind, _ = error(http(served, "POST", f"/v1/version-{v1}/namespaces/{ns}/views",
                                 {"name": "w", "schema": SCHEMA, "view-version": version("x", ns=ns)}))
    assert (status, kind) == (403, "ForbiddenException")


# ---- the builder alone ---------------------------------------------------------------------------
def _created(**props) -> dict:
    return (ViewMetadataBuilder().set_properties(props).set_location("file:///w/v")
            .set_current_version(version("select 1", dialect="trino"), SCHEMA).build())


def test_builder_expires_versions_past_the_history_size():
    m = _created(**{"version.history.num-entries": "2", "replace.drop-dialect.allowed": "true"})
    for i in range(2, 6):
        b = ViewMetadataBuilder(m)
        b.set_current_version({**version(f"select {i}", dialect="trino"), "version-id": i}, SCHEMA)
        m = b.build()
    assert [v["version-id"] for v in m["versions"]] == [5, 4]
    assert [e["version-id"] for e in m["version-log"]] == [4, 5]


def test_builder_refuses_dropping_a_dialect_and_unknown_last_added():
    m = _created()
    b = ViewMetadataBuilder(m)
    b.set_current_version({**version("select 2", dialect="spark"), "version-id": 2}, SCHEMA)
    with pytest.raises(ViewStateError, match=r"Cannot replace view due to loss of view dialects"):
        b.build()
    with pytest.raises(ViewValidationError, match="Cannot set last version id: no current version id has been set"):
        ViewMetadataBuilder(m).apply({"action": "set-current-view-version", "view-version-id": -1})
    # re-activating an old version logs it at the time of the change
    b = ViewMetadataBuilder(m)
    b.set_current_version({**version("select 1", dialect="trino"), "version-id": 9}, SCHEMA)
    m2 = b.build()
    assert m2["current-version-id"] == 1 and not b.changes  # identical: reused, nothing changed


# ---- Spark SQL ------------------------------------------------------------------------------------
@pytest.mark.spark
def test_spark_create_select_show_replace_drop_view(served):
    """Spark 4.1 with Iceberg's runtime (`type=rest`): CREATE VIEW, SELECT, SHOW VIEWS, CREATE OR
    REPLACE VIEW and DROP VIEW through the server; the version before the replace still reads
    the first definition."""
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spark_py = root / ".venv-spark41" / "bin" / "python"
    jar = root / "build" / "iceberg-spark41" / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"
    missing = [str(p) for p in (spark_py, jar) if not p.exists()]
    assert not missing, f"the Spark 4.1 environment is not built (run `make spark41`): missing {missing}"
    env = {**os.environ, "TLAKE_CATALOG_TOKEN": served.token}
    env.pop("PYTHONPATH", None)
    r = subprocess.run([str(spark_py), str(Path(__file__).with_name("spark_views_job.py")), str(jar), served.url,
                        "sparkviews"], capture_output=True, text=True, timeout=420, env=env)
    result = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert r.returncode == 0 and result, f"the Spark job failed ({r.returncode}): {r.stderr[-4000:]}"
    out = json.loads(result[-1][len("RESULT "):])
    assert out["view_rows"] == [[1], [3]]
    assert out["views"] == ["gone", "only_a"] and out["tables"] == ["base"]
    assert out["replaced_rows"] == [[2, "b"]]
    assert out["views_after_drop"] == ["only_a"]
    assert "already exists" in out["view_on_table_name"]

    # the lakehouse's versions: the view as Spark created it, then replaced
    lh = Lakehouse.open(served.lakehouse, audit=False)
    latest = lh.latest_version()
    sqls = []
    for v in range(latest + 1):
        if lh.view(version=v).namespace_exists("sparkviews") and lh.view(version=v).view_exists("sparkviews", "only_a"):
            m = http(served, "GET", f"/v1/version-{v}/namespaces/sparkviews/views/only_a").json()["metadata"]
            cur = next(x for x in m["versions"] if x["version-id"] == m["current-version-id"])
            sqls.append(cur["representations"][0]["sql"])
    assert len(set(sqls)) == 2 and "kind = 'a'" in sqls[0] and "kind = 'b'" in sqls[-1]
