"""The oracle's protobuf wire reader (`tests.oracle.wire`, `tests.oracle.defs`) against the
library's generated code: on every lakehouse definition and transaction state file of a real
lakehouse (exports recorded and pinned, versions expired, a distributed transaction staged, then
committed and another aborted), on a Java-layout lakehouse's definition, and on messages with
every field at its edges; and the table definitions the tables' oracle reads (real Iceberg
tables' definitions, edge cases, the legacy enum encoding). Both must read the same values,
field by field."""

from __future__ import annotations

import dataclasses
import os
import random

import pytest

from tests.format.oracle import root_name
from tests.format.test_java_interop import write_java_lakehouse
from tests.maintenance.helpers import build_history, write_minimal_export
from tests.oracle import defs as OD
from tests.oracle.reader import TXN_FILE, Oracle
from tests.support.jobs import run_local
from trinitylake.format import definitions_pb2 as pb
from trinitylake.lakehouse import Lakehouse
from trinitylake.lakehouse import distributed as DT

U64 = (1 << 64) - 1


def _library(msg, oracle_cls) -> dict:
    """The library's decoding, shaped as the oracle's dataclass (maps as dicts)."""
    out = {}
    for f in dataclasses.fields(oracle_cls):
        v = getattr(msg, f.name)
        out[f.name] = dict(v) if isinstance(getattr(oracle_cls(), f.name), dict) else v
    return out


def _agree_lakehouse_def(data: bytes, where: str) -> OD.LakehouseDef:
    mine = OD.lakehouse_def(data, where)
    theirs = pb.LakehouseDef()
    theirs.ParseFromString(data)
    assert dataclasses.asdict(mine) == _library(theirs, OD.LakehouseDef), where
    return mine


def _agree_txn_def(data: bytes, where: str) -> OD.TransactionDef:
    mine = OD.transaction_def(data, where)
    theirs = pb.TransactionDef()
    theirs.ParseFromString(data)
    assert dataclasses.asdict(mine) == _library(theirs, OD.TransactionDef), where
    return mine


@pytest.fixture(scope="module")
def lakehouse(tmp_path_factory) -> Lakehouse:
    base = tmp_path_factory.mktemp("wire")
    lh = Lakehouse.create(str(base / "lh"), order=4, node_max_bytes=4096, audit=False, txn_ttl_millis=60_000)
    build_history(lh, seed=9, ops=16)
    write_minimal_export(lh, lh.latest_version() - 1, str(base / "exports" / "m1"), "m1")
    write_minimal_export(lh, lh.latest_version() - 2, str(base / "exports" / "u1"), "u1", pin=False)
    res = run_local("expire", lh.uri, min_versions_to_keep=3)
    assert res.status == "succeeded" and res.counts["versions_expired"] > 0
    committed = DT.DistributedTransaction.begin(lh, txn_id="c-1")
    committed.stage(lambda t: t.create_namespace("dn"))
    committed.stage(lambda t: t.create_table("dn", "t"))
    committed.commit()
    aborted = DT.DistributedTransaction.begin(lh, txn_id="a-1", isolation="serializable", ttl_millis=30_000)
    aborted.stage(lambda t: t.list_tables("dn") and t.create_table("dn", "u"))
    aborted.abort()
    DT.DistributedTransaction.begin(lh, txn_id="o-1").stage(lambda t: t.create_table("dn", "open"))
    return Lakehouse.open(lh.uri, audit=False)


def test_every_lakehouse_definition_of_a_real_lakehouse_decodes_as_the_library_decodes_it(lakehouse):
    root = lakehouse.storage.root[len("file://") :]
    names = sorted(n for n in os.listdir(root) if n.startswith("_lakehouse_def_"))
    decoded = [_agree_lakehouse_def(open(os.path.join(root, n), "rb").read(), n) for n in names]
    # The fields that decide which roots are live were set, and read.
    last = Oracle(lakehouse.uri).latest()[1]
    assert last in decoded and last.oldest_retained_version > 0
    assert set(last.exported_snapshots) == {"m1", "u1"} and set(last.exported_snapshot_pins) == {"m1"}
    assert (
        last.exported_snapshot_pins["m1"]
        == lakehouse.load_root(lakehouse.latest_version()).lakehouse_def.exported_snapshot_pins["m1"]
    )
    assert last.order == 4 and last.txn_ttl_millis == 60_000 and last.id


def test_every_transaction_state_file_decodes_as_the_library_decodes_it(lakehouse):
    o = Oracle(lakehouse.uri)
    paths = sorted(p for p in o.files.list(o.root) if TXN_FILE.match(p))
    states = {p: _agree_txn_def(o.files.read(f"{o.root}/{p}"), p) for p in paths}
    by_id: dict[str, list[str]] = {}
    for d in states.values():
        by_id.setdefault(d.id, []).append(d.state)
    assert by_id["c-1"][-1] == "committed" and "committing" in by_id["c-1"]
    assert by_id["a-1"][-1] == "aborted" and by_id["o-1"] == ["open", "open"]
    # The oracle's notion of each transaction's latest state is the library's.
    for txn_id, t in o.transactions().items():
        info = DT.DistributedTransaction(lakehouse, txn_id).info()
        assert (t.state_number, t.d.state, t.d.expire_at_millis) == (
            info["state_number"],
            info["state"],
            info["expire_at_millis"],
        ), txn_id
    assert [t.id for t in o.live_transactions()] == ["o-1"]


def test_a_java_written_lakehouse_definition_decodes_as_the_library_decodes_it(tmp_path):
    write_java_lakehouse(tmp_path / "j", ["n00"], [("n00", "t0")])
    (name,) = [n for n in os.listdir(tmp_path / "j") if n.startswith("_lakehouse_def_")]
    d = _agree_lakehouse_def((tmp_path / "j" / name).read_bytes(), name)
    assert d.order == 4


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_messages_with_every_field_at_its_edges_decode_alike(seed):
    rng = random.Random(seed)
    text = ["", "a", "é€😀", "x" * 300, "s3://b/k/_0101.arrow", "\x00\x7f"]

    def num(bits: int) -> int:
        return rng.choice([0, 1, 127, 128, 300, (1 << bits) - 1, rng.randrange(1 << bits)])

    d = pb.LakehouseDef(
        id=rng.choice(text),
        major_version=num(32),
        order=num(32),
        namespace_name_max_size_bytes=num(32),
        table_name_max_size_bytes=num(32),
        view_name_max_size_bytes=num(32),
        node_file_max_size_bytes=num(64),
        txn_ttl_millis=num(64),
        txn_isolation_level=rng.choice([0, 1]),
        maximum_version_age_millis=num(64),
        minimum_versions_to_keep=num(32),
        oldest_retained_version=num(64),
    )
    for i in range(rng.randint(0, 5)):
        d.properties[rng.choice(text) + str(i)] = rng.choice(text)
        d.maximum_version_age_millis_overrides[num(64)] = num(64)
        d.exported_snapshots[f"e{i}"] = rng.choice(text)
        d.exported_snapshot_pins[f"e{i}" + rng.choice(text)] = num(64)
    _agree_lakehouse_def(d.SerializeToString(), f"lakehouse def of seed {seed}")
    t = pb.TransactionDef(
        id=rng.choice(text),
        isolation_level=rng.choice([0, 1]),
        beginning_root_node_file_path=rng.choice(text),
        running_root_node_file_path=rng.choice(text),
        began_at_millis=num(64),
        expire_at_millis=num(64),
        state_number=num(64),
        state=rng.choice(["", "open", "committing", "committed", "aborted"]),
        committed_version=num(64),
        ttl_millis=num(64),
        read_keys=text[:3],
        read_prefixes=text[3:],
    )
    _agree_txn_def(t.SerializeToString(), f"transaction def of seed {seed}")


def test_truncated_or_corrupt_bytes_are_refused_not_misread():
    good = pb.LakehouseDef(id="x", order=4, exported_snapshots={"e": "s3://b/_0.arrow"}).SerializeToString()
    for bad in (good[:-1], good[:4], b"\x80", b"\x0b\x01", bytes([0x3A, 0x05]) + b"ab"):
        with pytest.raises(OD.DefinitionError):
            OD.lakehouse_def(bad, "bad")
    assert OD.lakehouse_def(good, "good").exported_snapshots == {"e": "s3://b/_0.arrow"}
    assert (
        U64
        == OD.lakehouse_def(
            pb.LakehouseDef(oldest_retained_version=U64).SerializeToString(), "max"
        ).oldest_retained_version
    )


def _agree_table_def(data: bytes, where: str) -> OD.TableDef:
    """The tables' oracle's TableDef fields against the library's `definitions.loads` (which
    also upgrades the legacy enum encoding of fields 7 and 8)."""
    from trinitylake.format import definitions as D

    mine = OD.table_def(data, where)
    theirs = D.loads(pb.TableDef, data, where)
    assert (mine.id, mine.table_type, mine.table_format, mine.format_properties, mine.properties) == (
        theirs.id, theirs.table_type, theirs.table_format, dict(theirs.format_properties), dict(theirs.properties)
    ), where
    assert mine.format_name == D.table_format_name(theirs), where
    return mine


def test_every_table_definition_of_iceberg_tables_decodes_as_the_library_decodes_it(tmp_path):
    from tests.iceberg.conftest import SCHEMA, rows
    from tests.iceberg.tables_setup import open_catalog
    from tests.oracle.expect import merged_keys

    uri = str(tmp_path / "lh")
    Lakehouse.create(uri, audit=False)
    cat = open_catalog(uri)
    cat.create_namespace("s")
    cat.create_table("s.a", schema=SCHEMA).append(rows([1]))
    cat.create_table("s.b", schema=SCHEMA, properties={"k": "v"})
    lh = Lakehouse.open(uri, audit=False)
    o = Oracle(lh.uri)
    tables = {k: u for k, u in merged_keys(o, f"{o.root}/{root_name(lh.latest_version())}").items()
              if k.startswith("C===")}
    assert len(tables) == 2
    for key, u in tables.items():
        d = _agree_table_def(o.files.read(u), key)
        assert d.format_name == "ICEBERG" and d.format_properties["metadata_location"].endswith(".metadata.json")
    # What the tables' oracle reads is what the catalog loads.
    from tests.oracle.tables import table_pointers

    got = {n: _path(u) for n, u in table_pointers(o, f"{o.root}/{root_name(lh.latest_version())}").items()}
    assert got == {n: _path(cat.load_table(n).metadata_location) for n in ("s.a", "s.b")}


def _path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_table_definitions_with_every_field_at_its_edges_decode_alike(seed):
    rng = random.Random(seed)
    text = ["", "a", "é€😀", "x" * 300, "s3://b/t/metadata/v1.metadata.json", "\x00\x7f"]
    d = pb.TableDef(id=rng.choice(text), table_type=rng.choice(["", "MANAGED", "EXTERNAL", "FEDERATED"]),
                    table_format=rng.choice(["", "ICEBERG", "iceberg"]), distribution_keys=[1, 300],
                    primary_keys=[rng.randrange(1 << 32)], sort_keys=[], unique_columns=[0, 1])
    d.schema.columns.add()
    for i in range(rng.randint(0, 4)):
        d.format_properties[rng.choice(text) + str(i)] = rng.choice(text)
        d.properties[str(i) + rng.choice(text)] = rng.choice(text)
    d.format_properties["metadata_location"] = rng.choice(text)
    _agree_table_def(d.SerializeToString(), f"table def of seed {seed}")


def test_a_legacy_table_definition_with_enum_fields_decodes_as_the_library_decodes_it():
    """Fields 7 and 8 as varints (this project's encoding before they became strings)."""
    body = pb.TableDef(id="t", format_properties={"metadata_location": "/w/v1.metadata.json"}).SerializeToString()
    for table_type, table_format in ((0, 0), (1, 0), (2, 0)):
        data = body + bytes([7 << 3, table_type, 8 << 3, table_format])
        d = _agree_table_def(data, f"legacy {table_type}/{table_format}")
        assert d.table_format == "ICEBERG" and d.table_type == ("MANAGED", "EXTERNAL", "FEDERATED")[table_type]
    with pytest.raises(OD.DefinitionError):
        OD.table_def(body + bytes([8 << 3, 5]), "unknown legacy format")
