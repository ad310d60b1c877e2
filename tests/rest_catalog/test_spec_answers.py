"""The catalog server's answers as the Iceberg REST spec and the Java reference server give them
(what Iceberg's REST Compatibility Kit asserts): requirement and conflict messages, a missing
metadata file, ids reassigned as Iceberg's ``TableMetadata`` builder does, warehouse names at
``/v1/config``, and format v3 (row lineage, default values). The real `tlake catalog serve`, raw HTTP."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import requests

from tests.rest_catalog.server import Server
from trinitylake.lakehouse import Lakehouse

SCHEMA = {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": True},
    {"id": 2, "name": "data", "type": "string", "required": False}]}


def http(srv: Server, method: str, path: str, **kw) -> requests.Response:
    return requests.request(method, srv.url + path, headers={"Authorization": f"Bearer {srv.token}"}, timeout=60, **kw)


def new_ns(srv: Server) -> str:
    ns = f"ns_{uuid.uuid4().hex[:8]}"
    assert http(srv, "POST", "/v1/namespaces", json={"namespace": [ns]}).status_code == 200
    return ns


def create(srv: Server, ns: str, name: str, **body) -> requests.Response:
    return http(srv, "POST", f"/v1/namespaces/{ns}/tables", json={"name": name, "schema": SCHEMA, **body})


def commit(srv: Server, ns: str, name: str, requirements: list, updates: list) -> requests.Response:
    return http(srv, "POST", f"/v1/namespaces/{ns}/tables/{name}",
                json={"requirements": requirements, "updates": updates})


def error(r: requests.Response) -> tuple[int, str, str]:
    e = r.json()["error"]
    return r.status_code, e["type"], e["message"]


# ---- messages -------------------------------------------------------------------------------------
def test_a_concurrent_schema_change_is_409_with_the_java_requirement_message(served):
    ns = new_ns(served)
    assert create(served, ns, "t").status_code == 200
    added = {"type": "struct", "schema-id": 1, "fields": [*SCHEMA["fields"], {"id": 3, "name": "x", "type": "int",
                                                                              "required": False}]}
    # two writers built their change on schema 0; the first commits
    first = commit(served, ns, "t", [{"type": "assert-current-schema-id", "current-schema-id": 0}],
                   [{"action": "add-schema", "schema": added}, {"action": "set-current-schema", "schema-id": -1}])
    assert first.status_code == 200, first.text
    second = commit(served, ns, "t", [{"type": "assert-current-schema-id", "current-schema-id": 0}],
                    [{"action": "set-properties", "updates": {"k": "v"}}])
    assert error(second) == (409, "CommitFailedException",
                             "Requirement failed: current schema changed: expected id 0 != 1")
    r = commit(served, ns, "t", [{"type": "assert-last-assigned-field-id", "last-assigned-field-id": 2}], [])
    assert error(r) == (409, "CommitFailedException",
                        "Requirement failed: last assigned field id changed: expected id 2 != 3")
    r = commit(served, ns, "t", [{"type": "assert-table-uuid", "uuid": str(uuid.UUID(int=0))}], [])
    assert r.status_code == 409 and error(r)[2].startswith("Requirement failed: UUID does not match: expected ")
    r = commit(served, ns, "t", [{"type": "assert-default-spec-id", "default-spec-id": 3}], [])
    assert error(r)[2] == "Requirement failed: default partition spec changed: expected id 3 != 0"
    r = commit(served, ns, "t", [{"type": "assert-default-sort-order-id", "default-sort-order-id": 3}], [])
    assert error(r)[2] == "Requirement failed: default sort order changed: expected id 3 != 0"
    r = commit(served, ns, "t", [{"type": "assert-create"}], [])
    assert error(r) == (409, "CommitFailedException", "Requirement failed: table already exists")
    loaded = http(served, "GET", f"/v1/namespaces/{ns}/tables/t").json()["metadata"]
    assert "k" not in loaded["properties"] and loaded["current-schema-id"] == 1


def test_already_exists_texts_name_the_object_as_iceberg_does(served):
    ns = new_ns(served)
    assert create(served, ns, "t").status_code == 200
    assert error(create(served, ns, "t")) == (409, "AlreadyExistsException", f"Table already exists: {ns}.t")
    r = http(served, "POST", "/v1/namespaces", json={"namespace": [ns]})
    assert error(r) == (409, "AlreadyExistsException", f"Namespace already exists: {ns}")
    assert create(served, ns, "u").status_code == 200
    r = http(served, "POST", "/v1/tables/rename", json={"source": {"namespace": [ns], "name": "u"},
                                                       "destination": {"namespace": [ns], "name": "t"}})
    assert error(r) == (409, "AlreadyExistsException", f"Table already exists: {ns}.t")


def test_a_missing_metadata_file_is_404_not_found_at_once(served):
    ns = new_ns(served)
    created = create(served, ns, "t").json()
    Path(created["metadata-location"].removeprefix("file://")).unlink()
    r = http(served, "GET", f"/v1/namespaces/{ns}/tables/t")
    status, kind, message = error(r)
    assert (status, kind) == (404, "NotFoundException")
    assert message.startswith("Failed to open input stream for file: " + created["metadata-location"])
    assert "Errno" not in message and "Traceback" not in r.text
    assert http(served, "HEAD", f"/v1/namespaces/{ns}/tables/t").status_code == 404


# ---- ids as Iceberg's TableMetadata builder assigns them -------------------------------------------------
def _order(direction: str) -> dict:
    return {"order-id": 1, "fields": [{"source-id": 1, "transform": "identity", "direction": direction,
                                       "null-order": "nulls-first"}]}


def test_two_concurrent_replaces_with_different_sort_orders_both_commit(served):
    ns = new_ns(served)
    uid = create(served, ns, "t").json()["metadata"]["table-uuid"]
    # both transactions were built on the unsorted table, each adding its order as id 1
    for direction in ("asc", "desc"):
        r = commit(served, ns, "t", [{"type": "assert-table-uuid", "uuid": uid}],
                   [{"action": "add-sort-order", "sort-order": _order(direction)},
                    {"action": "set-default-sort-order", "sort-order-id": -1}])
        assert r.status_code == 200, r.text
    md = http(served, "GET", f"/v1/namespaces/{ns}/tables/t").json()["metadata"]
    orders = {o["order-id"]: o["fields"][0]["direction"] for o in md["sort-orders"] if o["fields"]}
    assert orders == {1: "asc", 2: "desc"} and md["default-sort-order-id"] == 2
    # an order the table already has keeps its id (and is not "added": -1 does not name it, as in Java's
    # builder); so does a schema; a new spec takes the next id
    r = commit(served, ns, "t", [], [{"action": "add-sort-order", "sort-order": {**_order("asc"), "order-id": 7}},
                                     {"action": "set-default-sort-order", "sort-order-id": -1}])
    assert error(r)[:2] == (400, "BadRequestException") and "no sort order has been added" in error(r)[2]
    r = commit(served, ns, "t", [], [{"action": "add-sort-order", "sort-order": {**_order("asc"), "order-id": 7}},
                                     {"action": "set-default-sort-order", "sort-order-id": 1}])
    assert r.json()["metadata"]["default-sort-order-id"] == 1 and len(r.json()["metadata"]["sort-orders"]) == 3
    spec = {"spec-id": 0, "fields": [{"source-id": 1, "field-id": 1000, "name": "id_b", "transform": "bucket[4]"}]}
    r = commit(served, ns, "t", [], [{"action": "add-spec", "spec": spec}, {"action": "set-default-spec", "spec-id": -1}])
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["default-spec-id"] == 1
    r = commit(served, ns, "t", [], [{"action": "add-schema", "schema": {**SCHEMA, "schema-id": 4}},
                                     {"action": "set-current-schema", "schema-id": 0}])
    assert r.status_code == 200 and [s["schema-id"] for s in r.json()["metadata"]["schemas"]] == [0]


# ---- the warehouse a client configures ---------------------------------------------------------------
def test_configured_warehouse_names_are_accepted_and_an_unknown_prefix_fails_at_config(served):
    for name in ("rck_warehouse", "prod", served.lakehouse):
        r = http(served, "GET", "/v1/config", params={"warehouse": name})
        assert r.status_code == 200, r.text
        assert "prefix" not in r.json()["overrides"]
    assert http(served, "GET", "/v1/config", params={"warehouse": "version-0"}).json()["overrides"] == {
        "prefix": "version-0"}
    for bad, says in (("export-nope", "no exported snapshot named 'nope'"), ("version-999999", "version 999999"),
                      ("as-of-1999-01-01", "no version was created at or before")):
        r = http(served, "GET", "/v1/config", params={"warehouse": bad})
        status, kind, message = error(r)
        assert (status, kind) == (400, "BadRequestException"), r.text
        assert message.startswith(f"unknown warehouse {bad!r}") and says in message


# ---- format v3 ---------------------------------------------------------------------------------------------
def _files(location: str) -> list[Path]:
    root = Path(location.removeprefix("file://"))
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_v3_tables_row_lineage_and_default_values(served):
    ns = new_ns(served)
    with_defaults = {"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "c", "type": "int", "required": True, "initial-default": 12, "write-default": 10}]}
    r = http(served, "POST", f"/v1/namespaces/{ns}/tables",
             json={"name": "v3", "schema": with_defaults, "properties": {"format-version": "3"}})
    assert r.status_code == 200, r.text
    md = r.json()["metadata"]
    assert md["format-version"] == 3 and md["next-row-id"] == 0
    assert md["schemas"][0]["fields"][0]["initial-default"] == 12 and md["schemas"][0]["fields"][0]["write-default"] == 10
    stored = json.loads(Path(r.json()["metadata-location"].removeprefix("file://")).read_text())
    assert stored["format-version"] == 3 and stored["next-row-id"] == 0

    def snapshot(sid: int, first_row_id: int, added: int, parent: int | None) -> dict:
        return {"action": "add-snapshot", "snapshot": {
            "snapshot-id": sid, "parent-snapshot-id": parent, "sequence-number": sid, "timestamp-ms": 1_700_000_000_000 + sid,
            "manifest-list": f"{md['location']}/metadata/snap-{sid}.avro", "summary": {"operation": "append"},
            "schema-id": 0, "first-row-id": first_row_id, "added-rows": added}}

    main = {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch"}
    r = commit(served, ns, "v3", [], [snapshot(1, 0, 5, None), {**main, "snapshot-id": 1}])
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["next-row-id"] == 5
    assert r.json()["metadata"]["snapshots"][0]["first-row-id"] == 0
    assert r.json()["metadata"]["snapshots"][0]["added-rows"] == 5
    r = commit(served, ns, "v3", [], [snapshot(2, 3, 1, 1), {**main, "snapshot-id": 2}])
    assert error(r)[0] == 409 and "first-row-id is behind table next-row-id: 3 < 5" in error(r)[2]
    r = commit(served, ns, "v3", [], [snapshot(2, 5, 2, 1), {**main, "snapshot-id": 2}])
    assert r.status_code == 200 and r.json()["metadata"]["next-row-id"] == 7

    # default values need v3; the refused create leaves no file behind
    r = http(served, "POST", f"/v1/namespaces/{ns}/tables", json={"name": "v2", "schema": with_defaults})
    assert error(r)[:2] == (400, "BadRequestException") and "not supported until v3" in error(r)[2]
    assert _files(f"{md['location'].rsplit('/', 1)[0]}/v2") == []


def test_v3_by_create_transaction_and_by_upgrade(served):
    ns = new_ns(served)
    staged = http(served, "POST", f"/v1/namespaces/{ns}/tables",
                  json={"name": "t", "schema": SCHEMA, "stage-create": True, "properties": {"format-version": "3"}})
    assert staged.status_code == 200, staged.text
    location = staged.json()["metadata"]["location"]
    assert _files(location) == []  # a staged create writes nothing
    r = commit(served, ns, "t", [{"type": "assert-create"}], [
        {"action": "assign-uuid", "uuid": str(uuid.uuid4())},
        {"action": "upgrade-format-version", "format-version": 3},
        {"action": "add-schema", "schema": SCHEMA}, {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}}, {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": location}])
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["format-version"] == 3 and r.json()["metadata"]["next-row-id"] == 0

    assert create(served, ns, "old").status_code == 200
    r = commit(served, ns, "old", [], [{"action": "upgrade-format-version", "format-version": 3}])
    assert r.status_code == 200 and r.json()["metadata"]["format-version"] == 3
    assert r.json()["metadata"]["next-row-id"] == 0
    r = commit(served, ns, "old", [], [{"action": "upgrade-format-version", "format-version": 4}])
    assert error(r)[:2] == (400, "BadRequestException") and "unsupported format version: v4" in error(r)[2]
    r = commit(served, ns, "old", [], [{"action": "upgrade-format-version", "format-version": 2}])
    assert error(r)[:2] == (400, "BadRequestException") and "Cannot downgrade v3 table to v2" in error(r)[2]
    # the lakehouse's own catalog reads the v3 table back
    own = Lakehouse.open(served.lakehouse, audit=False)
    assert own.view().table_exists(ns, "old")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Server:
    from tests.rest_catalog.server import new_lakehouse, start

    base = tmp_path_factory.mktemp("spec")
    srv = start(new_lakehouse(base / "lh", audit=False), base, audit=False)
    yield srv
    srv.stop()


def test_a_create_refused_by_a_concurrent_create_leaves_no_metadata_file(tmp_path, monkeypatch):
    """A writer that creates the same table between this create's checks and its commit (injected at
    the view-name check): the refused create deletes the metadata file it wrote, which nothing references."""
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import TableAlreadyExistsError

    from trinitylake.iceberg import TrinityLakeCatalog

    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    props = {"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog", "lakehouse": lh.uri, "audit": "false"}
    mine, other = load_catalog("mine", **props), load_catalog("other", **props)
    mine.create_namespace("s")
    schema = pa.schema([pa.field("id", pa.int64())])
    checks, injected = TrinityLakeCatalog._refuse_view_name, []

    def concurrent_create(view, ns, table):
        checks(view, ns, table)
        if not injected:
            injected.append(True)
            other.create_table((ns, table), schema=schema, location=str(tmp_path / "other"))

    monkeypatch.setattr(TrinityLakeCatalog, "_refuse_view_name", staticmethod(concurrent_create))
    with pytest.raises(TableAlreadyExistsError, match=r"^Table already exists: s\.t$"):
        mine.create_table("s.t", schema=schema, location=str(tmp_path / "mine"))
    assert _files(str(tmp_path / "mine")) == []
    assert len(_files(str(tmp_path / "other"))) == 1


# ---- statistics of expired snapshots -----------------------------------------------------------------
def test_an_expiry_that_removes_a_snapshot_and_then_its_statistics_commits(served):
    """Iceberg's Java expiry sends remove-snapshots, then remove-statistics of the same snapshots,
    which the first update already dropped: Java's builder ignores the second (here it was a 400
    "Statistics with snapshot id ... does not exist" for Spark's expire_snapshots after
    compute_table_stats)."""
    ns = new_ns(served)
    assert create(served, ns, "t").status_code == 200
    snapshots = []
    for i, sid in enumerate((101, 102), start=1):
        snapshot = {"snapshot-id": sid, "sequence-number": i, "timestamp-ms": 1_700_000_000_000 + i,
                    "manifest-list": f"/nowhere/snap-{sid}.avro", "summary": {"operation": "append"},
                    "schema-id": 0, **({"parent-snapshot-id": snapshots[-1]} if snapshots else {})}
        r = commit(served, ns, "t", [], [{"action": "add-snapshot", "snapshot": snapshot},
                                         {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                                          "snapshot-id": sid}])
        assert r.status_code == 200, r.text
        snapshots.append(sid)
    stats = {"snapshot-id": 101, "statistics-path": "/nowhere/101.stats", "file-size-in-bytes": 10,
             "file-footer-size-in-bytes": 5, "blob-metadata": []}
    r = commit(served, ns, "t", [], [{"action": "set-statistics", "snapshot-id": 101, "statistics": stats}])
    assert r.status_code == 200, r.text
    assert [s["snapshot-id"] for s in r.json()["metadata"]["statistics"]] == [101]
    r = commit(served, ns, "t", [], [{"action": "remove-snapshots", "snapshot-ids": [101]},
                                     {"action": "remove-statistics", "snapshot-id": 101}])
    assert r.status_code == 200, r.text
    md = r.json()["metadata"]
    assert [s["snapshot-id"] for s in md["snapshots"]] == [102] and not md.get("statistics")
