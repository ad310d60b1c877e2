"""TableDef fields 7/8 are strings (spec, Java); enum-typed files written earlier still read.

The bytes are built by hand, field by field, so the test does not depend on the generated
code it checks.
"""

from __future__ import annotations

import pytest
from google.protobuf.internal import decoder, encoder

from trinitylake.errors import CorruptDefinitionError
from trinitylake.format import definitions as D


def _string(number: int, value: bytes) -> bytes:
    return encoder.TagBytes(number, 2) + encoder._VarintBytes(len(value)) + value


def _varint(number: int, value: int) -> bytes:
    return encoder.TagBytes(number, 0) + encoder._VarintBytes(value)


def _fields(data: bytes) -> dict[int, tuple[int, object]]:
    out, pos = {}, 0
    while pos < len(data):
        tag, pos = decoder._DecodeVarint(data, pos)
        number, wt = tag >> 3, tag & 7
        if wt == 0:
            v, pos = decoder._DecodeVarint(data, pos)
        elif wt == 2:
            n, pos = decoder._DecodeVarint(data, pos)
            v, pos = data[pos : pos + n], pos + n
        else:
            raise AssertionError(f"unexpected wire type {wt}")
        out[number] = (wt, v)
    return out


def test_written_as_spec_strings_on_the_wire():
    d = D.TableDef(id="t1", table_type="EXTERNAL", table_format="ICEBERG", format_properties={"metadata_location": "s3://b/m"})
    f = _fields(D.dumps(d))
    assert f[7] == (2, b"EXTERNAL") and f[8] == (2, b"ICEBERG")


def test_java_written_bytes_read_as_strings():
    # What the Java reference writes for an external Iceberg table.
    data = _string(1, b"id-1") + _string(7, b"EXTERNAL") + _string(8, b"ICEBERG")
    d = D.loads(D.TableDef, data, "java.binpb")
    assert (d.id, D.table_type_name(d), D.table_format_name(d)) == ("id-1", "EXTERNAL", "ICEBERG")


@pytest.mark.parametrize(("enum_value", "expected"), [(1, "EXTERNAL"), (2, "FEDERATED"), (0, "MANAGED")])
def test_legacy_enum_wire_type_still_reads(enum_value, expected):
    # Earlier versions of this project wrote field 7 as an enum (varint); field 8 ICEBERG = 0.
    data = _string(1, b"old") + _varint(7, enum_value) + _varint(8, 0) + _string(9, b"\n\x01k\x12\x01v")
    d = D.loads(D.TableDef, data, "old.binpb")
    assert D.table_type_name(d) == expected and D.table_format_name(d) == "ICEBERG"
    assert dict(d.format_properties) == {"k": "v"}
    # Rewritten (an alter), the definition carries only the strings: no varint copy survives.
    f = _fields(D.dumps(d))
    assert f[7] == (2, expected.encode()) and f[8] == (2, b"ICEBERG")


def test_legacy_managed_written_by_omission_reads_as_managed():
    # proto3 never wrote enum value 0, so an old MANAGED table has no field 7 at all.
    d = D.loads(D.TableDef, _string(1, b"m"), "m.binpb")
    assert D.table_type_name(d) == "MANAGED" and D.table_format_name(d) == "ICEBERG"


def test_unknown_legacy_enum_value_is_a_typed_error_naming_the_file():
    with pytest.raises(CorruptDefinitionError, match=r"bad\.binpb.*table_type enum value 9"):
        D.loads(D.TableDef, _string(1, b"x") + _varint(7, 9), "bad.binpb")


def test_lakehouse_writes_strings_and_describe_reads_old_files(tmp_path):
    from trinitylake.format.paths import table_def_path
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.lakehouse.view import LakehouseView

    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    lh.create_namespace("n")
    lh.create_table("n", "e", metadata_location="s3://w/e/v1.json")
    info = lh.view().describe_table("n", "e")
    f = _fields(lh.storage.read(info["definition"]))
    assert f[7] == (2, b"EXTERNAL") and f[8] == (2, b"ICEBERG")
    # A table definition file in the old enum layout, committed by pointer, still describes.
    old = table_def_path("n", "old")
    lh.storage.create_exclusive(old, _string(1, b"o") + _varint(7, 1) + _string(9, b"\n\x11metadata_location\x12\x03m.j"))
    txn = lh.begin()
    txn.writes[txn.codec.table_key("n", "old")] = old
    txn.commit()
    got = LakehouseView(lh, lh.load_root(lh.latest_version())).describe_table("n", "old")
    assert got["table_type"] == "external" and got["table_format"] == "iceberg" and got["metadata_location"] == "m.j"
