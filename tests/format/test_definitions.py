"""Object definition files: protobuf round trips, spec field numbers, the >= 100 extension."""

from __future__ import annotations

import pytest
from google.protobuf.internal import encoder

from trinitylake.errors import CorruptDefinitionError, ValidationError
from trinitylake.format import definitions as D


def test_lakehouse_def_defaults_and_round_trip():
    d = D.new_lakehouse_def(order=4, node_max_bytes=4096, namespace_max=10, table_max=20, view_max=30,
                            txn_ttl_millis=5000, isolation="serializable")
    d.properties["owner"] = "data-eng"
    d.maximum_version_age_millis = 123
    d.minimum_versions_to_keep = 5
    d.maximum_version_age_millis_overrides[7] = 99
    d.exported_snapshots["q1"] = "s3://bucket/exports/q1/_" + "0" * 64 + ".arrow"
    d.oldest_retained_version = 3
    d.exported_snapshot_pins["q1"] = 7
    data = D.dumps(d)
    back = D.loads(D.LakehouseDef, data, "mem")
    assert back == d
    assert back.major_version == 0 and back.order == 4 and back.node_file_max_size_bytes == 4096
    assert back.txn_isolation_level == D.IsolationLevel.Value("SERIALIZABLE")
    assert D.dumps(back) == data  # deterministic serialization


def test_new_lakehouse_def_spec_defaults():
    d = D.new_lakehouse_def()
    assert (d.order, d.namespace_name_max_size_bytes, d.table_name_max_size_bytes, d.view_name_max_size_bytes) == (128, 100, 100, 100)
    assert d.node_file_max_size_bytes == 1 << 20
    assert d.txn_ttl_millis == 3 * 24 * 3600 * 1000  # written explicitly (doc 7 d vs Java 3 d)
    assert d.id and d.major_version == 0


def test_spec_field_numbers():
    f = {x.name: x.number for x in D.LakehouseDef.DESCRIPTOR.fields}
    assert f["id"] == 1 and f["major_version"] == 2 and f["order"] == 3
    assert f["namespace_name_max_size_bytes"] == 4 and f["table_name_max_size_bytes"] == 5
    assert f["view_name_max_size_bytes"] == 6 and f["node_file_max_size_bytes"] == 7
    assert f["properties"] == 8 and f["txn_ttl_millis"] == 9 and f["txn_isolation_level"] == 10
    # The removed retention/export fields come back only under new numbers (9 and 10 were reused).
    for name in ("maximum_version_age_millis", "minimum_versions_to_keep", "maximum_version_age_millis_overrides",
                 "exported_snapshots", "oldest_retained_version", "exported_snapshot_pins"):
        assert f[name] >= 100, name
    t = {x.name: x.number for x in D.TableDef.DESCRIPTOR.fields}
    assert t == {"id": 1, "schema": 2, "distribution_keys": 3, "primary_keys": 4, "sort_keys": 5, "unique_columns": 6,
                 "table_type": 7, "table_format": 8, "format_properties": 9, "properties": 10}
    assert {x.name: x.number for x in D.NamespaceDef.DESCRIPTOR.fields} == {"id": 1, "properties": 2}
    tx = {x.name: x.number for x in D.TransactionDef.DESCRIPTOR.fields}
    assert tx["began_at_millis"] == 5 and tx["expire_at_millis"] == 6


def test_wire_bytes_of_order_field():
    d = D.LakehouseDef(order=4)
    assert D.dumps(d) == b"\x18\x04"  # field 3, varint, value 4


def test_extension_fields_are_unknown_fields_to_a_spec_reader():
    # A spec-only reader parsing bytes with field 103 must keep the core fields intact.
    d = D.new_lakehouse_def(order=7)
    d.exported_snapshots["x"] = "file:///tmp/x"
    data = D.dumps(d)
    core = D.LakehouseDef()
    core.CopyFrom(d)
    core.ClearField("exported_snapshots")
    # Deterministic output orders fields by number: the spec fields come first, unchanged.
    assert data.startswith(D.dumps(core)) and len(data) > len(D.dumps(core))


def test_unknown_fields_survive_round_trip():
    # A newer writer's field 200 (string) must not break this reader, and is kept on rewrite.
    extra = encoder.TagBytes(200, 2) + bytes([3]) + b"new"
    data = D.dumps(D.NamespaceDef(id="n1", properties={"a": "b"})) + extra
    ns = D.loads(D.NamespaceDef, data, "m")
    assert ns.id == "n1" and dict(ns.properties) == {"a": "b"}
    assert D.dumps(ns).endswith(extra)


def test_table_and_view_defs_round_trip():
    col = D.pb.Column(id=1, name="id", type=D.pb.INT8, nullable=False, properties={"c": "d"})
    nested = D.pb.Column(id=2, name="s", type=D.pb.STRUCT, struct_fields=[D.pb.Column(id=3, name="x", type=D.pb.VARCHAR)])
    t = D.TableDef(id="t", schema=D.pb.Schema(columns=[col, nested]), primary_keys=[1], table_type="EXTERNAL",
                   table_format="ICEBERG", format_properties={"metadata_location": "s3://b/m.json"}, properties={"k": "v"})
    assert D.loads(D.TableDef, D.dumps(t), "m") == t
    v = D.ViewDef(id="v", schema_binding=True, substrait_read_rel=b"\x00\x01",
                  referenced_object_full_names=[D.pb.FullName(namespace_name="ns", name="t")])
    assert D.loads(D.ViewDef, D.dumps(v), "m") == v
    tx = D.TransactionDef(id="x", isolation_level=D.IsolationLevel.Value("SERIALIZABLE"), began_at_millis=1, expire_at_millis=2)
    assert D.loads(D.TransactionDef, D.dumps(tx), "m") == tx


@pytest.mark.parametrize(
    "garbage",
    [b"\xff\xff\xff\xff\xff", b"\x0a\x10abc", b"\x1a", b"\x0f", b"\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"],
)
@pytest.mark.parametrize("cls", [D.LakehouseDef, D.NamespaceDef, D.TableDef])
def test_garbage_raises_corrupt_definition_naming_the_file(cls, garbage):
    with pytest.raises(CorruptDefinitionError, match="some/where.binpb"):
        D.loads(cls, garbage, "some/where.binpb")


def test_isolation_level_names():
    assert D.isolation_level("snapshot") == 0
    assert D.isolation_level(" Serializable ") == 1
    assert D.isolation_level(1) == 1
    assert D.isolation_name(1) == "serializable"
    with pytest.raises(ValidationError):
        D.isolation_level("read committed")
