"""The catalog server on a lakehouse in S3 (the tests' moto server): the lakehouse's storage
from TLAKE_S3_ENDPOINT_URL and the environment's keys, the tables' files through PyIceberg's
FileIO settings given as catalog properties (`--property`), no secret on the command line."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.rest_catalog.server import start
from trinitylake.lakehouse import Lakehouse

pytestmark = pytest.mark.s3


def test_served_lakehouse_in_s3_round_trip(s3_server, s3_storage_options, tmp_path, monkeypatch):
    monkeypatch.setenv("TLAKE_S3_ENDPOINT_URL", s3_server.endpoint_url)
    bucket = s3_server.create_bucket()
    lh = Lakehouse.create(f"s3://{bucket}/lh", storage_options=s3_storage_options, audit=False).uri
    srv = start(lh, tmp_path, "--property", f"s3.endpoint={s3_server.endpoint_url}",
                "--property", f"s3.region={s3_server.region}", audit=False,
                env={"TLAKE_S3_ENDPOINT_URL": s3_server.endpoint_url})
    try:
        io = {"s3.endpoint": s3_server.endpoint_url, "s3.region": s3_server.region,
              "s3.access-key-id": s3_server.key, "s3.secret-access-key": s3_server.secret}
        cat = RestCatalog("tl", uri=srv.url, token=srv.token, **io)
        cat.create_namespace("s")
        schema = pa.schema([pa.field("id", pa.int64())])
        t = cat.create_table("s.t", schema=schema)
        assert t.metadata_location.startswith(f"s3://{bucket}/lh/warehouse/")
        t.append(pa.table({"id": [1, 2, 3]}, schema=schema))
        assert sorted(cat.load_table("s.t").scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
        assert Lakehouse.open(lh, storage_options=s3_storage_options, audit=False).view().table_exists("s", "t")
    finally:
        srv.stop()
