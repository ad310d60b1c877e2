"""Loads without re-reading what has not changed (issue 57; rest_catalog/load_cache.py,
iceberg/metadata_cache.py): load-table answers ``ETag``, ``If-None-Match`` with the current one
is ``304 Not Modified``, and what one server keeps never hides another process's commit."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.rest_catalog.server import new_lakehouse, start

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def _get(srv, path: str, etag: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {srv.token}"}
    if etag is not None:
        headers["If-None-Match"] = etag
    return requests.get(f"{srv.url}/v1/{path}", headers=headers, timeout=30)


def test_etag_304_and_another_servers_commit_is_seen_at_the_next_load(tmp_path: Path) -> None:
    lh = new_lakehouse(tmp_path / "lh")
    a, b = start(lh, tmp_path), start(lh, tmp_path)
    try:
        ca = RestCatalog("a", uri=a.url, token=a.token)
        cb = RestCatalog("b", uri=b.url, token=b.token)
        ca.create_namespace("n")
        ca.create_table("n.t", schema=SCHEMA)
        path = "namespaces/n/tables/t"

        first = _get(a, path)
        assert first.status_code == 200
        etag = first.headers["ETag"]
        assert etag.startswith('"') and etag.endswith('"')
        again = _get(a, path, etag)
        assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == etag
        assert _get(a, path, f"W/{etag}").status_code == 304  # weak comparison, as RFC 9110 asks
        assert _get(a, path, '"something-else"').status_code == 200
        # the other server answers the same ETag for the same metadata
        assert _get(b, path).headers["ETag"] == etag

        # another process commits: the next load through `a` sees it, with a new ETag
        t = cb.load_table("n.t")
        with t.transaction() as tx:
            tx.set_properties(k="from-b")
        after = _get(a, path, etag)
        assert after.status_code == 200
        assert after.json()["metadata"]["properties"]["k"] == "from-b"
        assert after.json()["metadata-location"] == cb.load_table("n.t").metadata_location
        assert after.headers["ETag"] != etag
        assert _get(a, path, after.headers["ETag"]).status_code == 304

        # a commit's answer carries the ETag its next load answers
        t = ca.load_table("n.t")
        with t.transaction() as tx:
            tx.set_properties(k="from-a")
        now = _get(b, path)
        assert now.json()["metadata"]["properties"]["k"] == "from-a"
        assert _get(a, path).headers["ETag"] == now.headers["ETag"]

        # a metadata file deleted behind the servers' backs is reported missing, kept or not
        loc = now.json()["metadata-location"]
        os.remove(loc.removeprefix("file://"))
        for srv in (a, b):
            gone = _get(srv, path)
            assert gone.status_code == 404, gone.text
            assert "metadata file is missing" in gone.json()["error"]["message"]
    finally:
        a.stop()
        b.stop()


def test_a_kept_table_is_answered_while_its_version_is_the_latest_and_a_drop_elsewhere_is_seen(tmp_path: Path) -> None:
    """LatestTables answers a table kept for the latest version until a next version's root
    exists (any process's commit, of any table), and a drop through another server is a 404 at
    the next load of the server that kept the table."""
    from trinitylake.iceberg import TrinityLakeCatalog
    from trinitylake.rest_catalog.load_cache import LatestTables

    lh = new_lakehouse(tmp_path / "lh")
    cat = TrinityLakeCatalog("c", lakehouse=lh)
    cat.create_namespace("n")
    t = cat.create_table("n.t", schema=SCHEMA)
    kept = LatestTables(cat.lakehouse.storage)
    v = cat.lakehouse.latest_version()
    kept.put(v, ("n", "t"), t.metadata, t.metadata_location)
    assert kept.get(("n", "t")) == (t.metadata, t.metadata_location)
    assert kept.get(("n", "other")) is None
    kept.put(v - 1, ("n", "old"), t.metadata, t.metadata_location)  # an older version's read is not kept
    assert kept.get(("n", "old")) is None
    cat.create_table("n.u", schema=SCHEMA)  # another table's commit: version v + 1 exists
    assert kept.get(("n", "t")) is None

    a, b = start(lh, tmp_path), start(lh, tmp_path)
    try:
        path = "namespaces/n/tables/t"
        assert _get(a, path).status_code == 200
        assert _get(a, path).status_code == 200  # kept now
        RestCatalog("b", uri=b.url, token=b.token).drop_table("n.t")
        gone = _get(a, path)
        assert gone.status_code == 404, gone.text
        head = requests.head(f"{a.url}/v1/{path}", headers={"Authorization": f"Bearer {a.token}"}, timeout=30)
        assert head.status_code == 404
    finally:
        a.stop()
        b.stop()


def test_a_kept_tables_file_is_checked_while_the_next_root_is_probed(tmp_path: Path, monkeypatch) -> None:
    """On an object store a kept load makes two requests (is there a next root, is the metadata
    file there): `beside` checks the file on another thread while the root is probed, and a
    missing file, or a next root, is a miss."""
    import threading

    from trinitylake.iceberg import TrinityLakeCatalog
    from trinitylake.rest_catalog.load_cache import LatestTables

    lh = new_lakehouse(tmp_path / "lh")
    cat = TrinityLakeCatalog("c", lakehouse=lh)
    cat.create_namespace("n")
    t = cat.create_table("n.t", schema=SCHEMA)
    kept = LatestTables(cat.lakehouse.storage)
    kept.put(cat.lakehouse.latest_version(), ("n", "t"), t.metadata, t.metadata_location)
    started = threading.Event()
    seen_during_probe: list[bool] = []
    storage = cat.lakehouse.storage
    real_exists = type(storage).exists

    def probing(self, path):  # the next root's probe: has the file's check begun meanwhile?
        seen_during_probe.append(started.wait(5))
        return real_exists(self, path)

    def check(location: str) -> bool:
        started.set()
        return cat.io.new_input(location).exists()

    monkeypatch.setattr(type(storage), "exists", probing)
    assert kept.get(("n", "t"), beside=check) == (t.metadata, t.metadata_location)
    assert seen_during_probe and all(seen_during_probe)
    assert kept.get(("n", "t"), beside=lambda _location: False) is None  # the file is gone
    monkeypatch.undo()
    cat.create_table("n.u", schema=SCHEMA)
    assert kept.get(("n", "t"), beside=check) is None  # a next root
