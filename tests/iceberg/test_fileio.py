"""`TrinityLakeFileIO`: PyIceberg's FileIO on the project's storage, on local files and on the
tests' S3 server (moto): PyIceberg's contract (input, output, exclusive create, delete), the
batches, the catalog's default, a table written and read through it, credentials never shown."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.io.pyarrow import PyArrowFileIO

from trinitylake.errors import ConfigError
from trinitylake.iceberg.fileio import FILE_IO_IMPL, TrinityLakeFileIO, storage_options_of
from trinitylake.lakehouse import Lakehouse

SECRET = "very-secret-value-42"


def _contract(fio: TrinityLakeFileIO, base: str) -> None:
    loc = f"{base}/d/one.bin"
    out = fio.new_output(loc)
    assert not out.exists()
    with out.create() as s:
        s.write(b"hello ")
        s.write(b"world")
    assert len(out) == 11 and out.exists()
    inp = fio.new_input(loc)
    assert inp.exists() and len(inp) == 11
    with inp.open() as f:
        assert f.read(5) == b"hello"
        f.seek(6)
        assert f.read() == b"world"
    assert out.to_input_file().location == loc
    with pytest.raises(FileExistsError, match="one.bin"), fio.new_output(loc).create(overwrite=False) as s:
        s.write(b"other")
    with fio.new_input(loc).open() as f:
        assert f.read() == b"hello world"  # the refused create changed nothing
    with fio.new_output(loc).create(overwrite=True) as s:
        s.write(b"replaced")
    with fio.new_input(loc).open() as f:
        assert f.read() == b"replaced"
    with pytest.raises(RuntimeError), fio.new_output(f"{base}/d/failed.bin").create() as s:
        s.write(b"half")
        raise RuntimeError("the writer failed")
    assert not fio.new_input(f"{base}/d/failed.bin").exists()  # nothing stored for a failed writer
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        fio.new_input(f"{base}/d/missing.bin").open()
    fio.delete(loc)
    assert not fio.new_input(loc).exists()
    fio.delete(fio.new_input(loc))  # a missing file counts as deleted

    items = [(f"{base}/b/{i}.json", f"{{\"i\": {i}}}".encode()) for i in range(5)]
    assert fio.create_many(items) == [None] * 5
    again = fio.create_many([(items[0][0], b"another writer's"), (f"{base}/b/new.json", b"x")])
    assert isinstance(again[0], FileExistsError) and again[1] is None
    got = fio.read_many([loc for loc, _ in items] + [f"{base}/b/absent.json"])
    assert got[:5] == [d for _, d in items] and isinstance(got[5], FileNotFoundError)
    assert fio.delete_many([loc for loc, _ in items]) == []
    assert not any(fio.new_input(loc).exists() for loc, _ in items)


def test_the_contract_on_local_files(tmp_path):
    fio = TrinityLakeFileIO({})
    _contract(fio, (tmp_path / "files").as_uri())
    # A plain path is the same file as its file:// URI.
    with fio.new_output(str(tmp_path / "plain.txt")).create() as s:
        s.write(b"abc")
    assert fio.new_input((tmp_path / "plain.txt").as_uri()).exists()


@pytest.mark.s3
def test_the_contract_on_s3(s3_server):
    bucket = s3_server.create_bucket()
    fio = TrinityLakeFileIO({"s3.endpoint": s3_server.endpoint_url, "s3.access-key-id": s3_server.key,
                             "s3.secret-access-key": s3_server.secret, "s3.region": s3_server.region})
    _contract(fio, f"s3://{bucket}/t")
    # s3a:// names the same object
    with fio.new_output(f"s3a://{bucket}/t/a.bin").create() as s:
        s.write(b"a")
    assert fio.new_input(f"s3://{bucket}/t/a.bin").exists()
    clone = pickle.loads(pickle.dumps(fio))  # Spark executors receive it in closures
    assert clone.new_input(f"s3://{bucket}/t/a.bin").exists()


@pytest.mark.s3
def test_a_lakehouse_on_s3_serves_its_tables_through_it(s3_server, s3_storage_options, monkeypatch):
    monkeypatch.setenv("TLAKE_S3_ENDPOINT_URL", s3_server.endpoint_url)
    bucket = s3_server.create_bucket()
    lh = Lakehouse.create(f"s3://{bucket}/lh", storage_options=s3_storage_options, audit=False).uri
    cat = load_catalog("t", **{"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog", "lakehouse": lh,
                               "audit": "false", **{f"lakehouse.storage.{k}": v for k, v in s3_storage_options.items()}})
    cat.create_namespace("n")
    t = cat.create_table("n.t", schema=pa.schema([pa.field("id", pa.int64())]))
    t.append(pa.table({"id": [1, 2, 3]}))
    t = cat.load_table("n.t")
    assert isinstance(t.io, TrinityLakeFileIO) and t.metadata_location.startswith(f"s3://{bucket}/lh/warehouse/")
    assert sorted(t.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_the_catalog_uses_it_unless_told_otherwise(tmp_path):
    lh = str(tmp_path / "lh")
    Lakehouse.create(lh, audit=False)
    props = {"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog", "lakehouse": lh, "audit": "false"}
    cat = load_catalog("t", **props)
    assert cat.properties["py-io-impl"] == FILE_IO_IMPL
    cat.create_namespace("n")
    t = cat.create_table("n.t", schema=pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())]))
    t.append(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    t.delete("id = 1")  # a rewrite: reads the data file back
    t = cat.load_table("n.t")
    assert type(t.io).__module__.startswith("trinitylake") and t.io is cat.load_table("n.t").io
    assert t.scan().to_arrow().to_pydict() == {"id": [2], "v": ["b"]}
    theirs = load_catalog("t", **props, **{"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}).load_table("n.t")
    assert isinstance(theirs.io, PyArrowFileIO)
    assert theirs.scan().to_arrow().to_pydict() == {"id": [2], "v": ["b"]}  # the same files, either way


def test_options_from_the_catalogs_properties_and_no_credential_shown():
    props = {"lakehouse": "s3://b/lh", "lakehouse.storage.endpoint_url": "http://lakehouse:9000",
             "lakehouse.storage.key": "lk", "s3.access-key-id": "tk", "s3.secret-access-key": SECRET,
             "s3.region": "eu-west-1", "s3.connect-timeout": "5"}
    opts = storage_options_of(props, "s3")
    assert opts["endpoint_url"] == "http://lakehouse:9000" and opts["key"] == "tk"  # the tables' own win
    assert opts["secret"] == SECRET and opts["client_kwargs"] == {"region_name": "eu-west-1"}
    assert storage_options_of({"lakehouse": "/tmp/lh", "lakehouse.storage.x": "y"}, "s3") == {}
    fio = TrinityLakeFileIO(props)
    assert SECRET not in repr(fio) and SECRET not in str(fio)
    with pytest.raises(ConfigError, match="s3.signer") as e:
        storage_options_of({**props, "s3.signer": "S3V4RestSigner"}, "s3")
    assert SECRET not in str(e.value)
    with pytest.raises(ConfigError, match="frobnicate") as e:
        storage_options_of({"lakehouse": "s3://b/lh", "lakehouse.storage.frobnicate": SECRET}, "s3")
    assert SECRET not in str(e.value)
