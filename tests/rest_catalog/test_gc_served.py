"""No client can break a retained lakehouse version through the catalog server: the tables as
served carry ``gc.enabled=false`` and ``write.metadata.delete-after-commit.enabled=false`` (and
``trinitylake.gc`` naming the lakehouse's own maintenance), the stored metadata does not, and the
server itself deletes no file a retained version reads (a purge drops from the lakehouse only).
The real `tlake catalog serve`; raw HTTP and PyIceberg's RestCatalog."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.rest_catalog.server import Server, new_lakehouse, start
from trinitylake.lakehouse import Lakehouse

SCHEMA = pa.schema([pa.field("id", pa.int64())])
GC_KEYS = ("gc.enabled", "write.metadata.delete-after-commit.enabled", "trinitylake.gc")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Server:
    base = tmp_path_factory.mktemp("gc")
    srv = start(new_lakehouse(base / "lh"), base)
    yield srv
    srv.stop()


def http(srv: Server, method: str, path: str, **kw) -> requests.Response:
    return requests.request(method, srv.url + path, headers={"Authorization": f"Bearer {srv.token}"}, timeout=60, **kw)


def stored_properties(srv: Server, ns: str, table: str) -> dict[str, str]:
    """The properties in the table's current metadata file, as the lakehouse stores it."""
    d = Lakehouse.open(srv.lakehouse, audit=False).view().load_table(ns, table)
    location = d.format_properties["metadata_location"]
    return json.loads(Path(location.removeprefix("file://")).read_text())["properties"]


def new_table(srv: Server, **props: str) -> tuple[RestCatalog, str]:
    cat = RestCatalog("tl", uri=srv.url, token=srv.token)
    ns = f"ns_{uuid.uuid4().hex[:8]}"
    cat.create_namespace(ns)
    cat.create_table(f"{ns}.t", schema=SCHEMA, properties=props)
    return cat, ns


def test_tables_are_served_with_gc_disabled_and_stored_without(served):
    cat, ns = new_table(served)
    t = cat.load_table(f"{ns}.t")
    assert t.properties["gc.enabled"] == "false"
    assert t.properties["write.metadata.delete-after-commit.enabled"] == "false"
    assert "tlake tables expire-snapshots" in t.properties["trinitylake.gc"]
    t.append(pa.table({"id": [1, 2]}, schema=SCHEMA))  # a commit response is served the same way
    assert cat.load_table(f"{ns}.t").properties["gc.enabled"] == "false"
    assert not set(GC_KEYS) & set(stored_properties(served, ns, "t"))
    staged = http(served, "POST", f"/v1/namespaces/{ns}/tables",
                  json={"name": "s", "stage-create": True,
                        "schema": {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long",
                                                                 "required": False}]}})
    assert staged.json()["metadata"]["properties"]["gc.enabled"] == "false"


def test_echoed_served_properties_are_not_stored_and_the_users_own_setting_is(served):
    cat, ns = new_table(served)
    served_props = cat.load_table(f"{ns}.t").properties
    # a client copying the served properties back (e.g. a replace with the loaded table's properties)
    r = http(served, "POST", f"/v1/namespaces/{ns}/tables/t",
             json={"requirements": [], "updates": [{"action": "set-properties",
                                                     "updates": {**served_props, "owner": "me"}}]})
    assert r.status_code == 200, r.text
    stored = stored_properties(served, ns, "t")
    assert stored.get("owner") == "me" and not set(GC_KEYS) & set(stored)
    # removing a served-only property is a no-op, not an error
    r = http(served, "POST", f"/v1/namespaces/{ns}/tables/t",
             json={"requirements": [], "updates": [{"action": "remove-properties", "removals": list(GC_KEYS)}]})
    assert r.status_code == 200, r.text
    # the user's own opt-out is stored (the lakehouse's maintenance then leaves the table alone too)
    with cat.load_table(f"{ns}.t").transaction() as tx:
        tx.set_properties({"gc.enabled": "false"})
    assert stored_properties(served, ns, "t")["gc.enabled"] == "false"
    # an explicit opt-in to client-side GC is stored and served as the owner set it
    cat2, ns2 = new_table(served, **{"gc.enabled": "true"})
    assert cat2.load_table(f"{ns2}.t").properties["gc.enabled"] == "true"
    assert "trinitylake.gc" not in cat2.load_table(f"{ns2}.t").properties
    assert stored_properties(served, ns2, "t")["gc.enabled"] == "true"


def test_a_purge_drops_from_the_lakehouse_and_keeps_every_file_a_retained_version_reads(served):
    cat, ns = new_table(served)
    cat.load_table(f"{ns}.t").append(pa.table({"id": [1, 2, 3]}, schema=SCHEMA))
    t = cat.load_table(f"{ns}.t")
    files = [p for p in Path(t.location().removeprefix("file://")).rglob("*") if p.is_file()]
    before = Lakehouse.open(served.lakehouse, audit=False).latest_version()
    cat.purge_table(f"{ns}.t")  # DELETE ...?purgeRequested=true
    assert not cat.table_exists(f"{ns}.t")
    assert files and all(p.exists() for p in files)
    old = RestCatalog("old", uri=served.url, token=served.token, warehouse=f"version-{before}")
    assert sorted(old.load_table(f"{ns}.t").scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_allow_purge_no_longer_deletes(tmp_path):
    srv = start(new_lakehouse(tmp_path / "lh"), tmp_path, "--allow-purge")
    try:
        cat, ns = new_table(srv)
        cat.load_table(f"{ns}.t").append(pa.table({"id": [1]}, schema=SCHEMA))
        files = [p for p in Path(cat.load_table(f"{ns}.t").location().removeprefix("file://")).rglob("*")
                 if p.is_file()]
        cat.purge_table(f"{ns}.t")
        assert files and all(p.exists() for p in files)
        assert "allow_purge (--allow-purge) is ignored" in srv.output()
    finally:
        srv.stop()
