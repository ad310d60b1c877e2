"""Object definition files: one protobuf message, raw binary, in a ``.binpb`` file."""

from __future__ import annotations

import uuid
from typing import TypeVar

from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from trinitylake.errors import CorruptDefinitionError, ValidationError
from trinitylake.format import definitions_pb2 as pb

SUPPORTED_MAJOR_VERSIONS = (0,)
DEFAULT_ORDER = 128
DEFAULT_NAME_MAX = 100
DEFAULT_NODE_MAX_BYTES = 1 << 20
# The spec doc says 7 days and the Java reference 3 days; we always write the value.
DEFAULT_TXN_TTL_MILLIS = 3 * 24 * 3600 * 1000

LakehouseDef = pb.LakehouseDef
NamespaceDef = pb.NamespaceDef
TableDef = pb.TableDef
ViewDef = pb.ViewDef
TransactionDef = pb.TransactionDef
IsolationLevel = pb.IsolationLevel

M = TypeVar("M", bound=Message)

# TableDef.table_type / table_format are strings in the spec and in Java. This project wrote
# them as enums (wire type 0) before; these were the enum numbers.
TABLE_TYPES = ("MANAGED", "EXTERNAL", "FEDERATED")
TABLE_FORMATS = ("ICEBERG",)
_LEGACY_ENUMS = {7: ("table_type", TABLE_TYPES), 8: ("table_format", TABLE_FORMATS)}


def new_lakehouse_def(
    order: int = DEFAULT_ORDER,
    node_max_bytes: int = DEFAULT_NODE_MAX_BYTES,
    namespace_max: int = DEFAULT_NAME_MAX,
    table_max: int = DEFAULT_NAME_MAX,
    view_max: int = DEFAULT_NAME_MAX,
    txn_ttl_millis: int = DEFAULT_TXN_TTL_MILLIS,
    isolation: str = "snapshot",
) -> pb.LakehouseDef:
    d = pb.LakehouseDef()
    d.id = str(uuid.uuid4())
    d.major_version = 0
    d.order = order
    d.namespace_name_max_size_bytes = namespace_max
    d.table_name_max_size_bytes = table_max
    d.view_name_max_size_bytes = view_max
    d.node_file_max_size_bytes = node_max_bytes
    d.txn_ttl_millis = txn_ttl_millis
    d.txn_isolation_level = isolation_level(isolation)
    return d


def isolation_level(name: str | int) -> int:
    if isinstance(name, int):
        return name
    n = name.strip().upper()
    if n not in ("SNAPSHOT", "SERIALIZABLE"):
        raise ValidationError(f"isolation level must be snapshot or serializable, got {name!r}")
    return pb.IsolationLevel.Value(n)


def isolation_name(level: int) -> str:
    return pb.IsolationLevel.Name(level).lower()


def dumps(msg: Message) -> bytes:
    data = msg.SerializeToString(deterministic=True)
    # An all-default message serializes to zero bytes; exclusive create refuses empty files
    # (the s3fs trap), and an id is always set for our objects, so this never triggers.
    return data


def loads(cls: type[M], data: bytes, where: str) -> M:
    msg = cls()
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise CorruptDefinitionError(f"definition file {where} is not a valid {cls.__name__}: {e}") from None
    if cls is pb.TableDef:
        _upgrade_legacy_table_def(msg, where)
    return msg


def _upgrade_legacy_table_def(msg: pb.TableDef, where: str) -> None:
    """Fill the string fields 7/8 from an enum-typed (varint) value written by an earlier
    version of this project; protobuf keeps a field with an unexpected wire type as unknown.

    The varint copies are then dropped, so an altered definition is written with the strings
    only (a reader must never see field 7 or 8 twice with two wire types)."""
    # UnknownFieldSet iterates through __getitem__/__len__; its stub declares no __iter__.
    fields = UnknownFieldSet(msg)
    legacy = [(f.field_number, f.data) for f in fields if f.field_number in _LEGACY_ENUMS and f.wire_type == 0]  # type: ignore[attr-defined]
    for number, value in legacy:
        name, values = _LEGACY_ENUMS[number]
        if not 0 <= value < len(values):
            raise CorruptDefinitionError(f"definition file {where}: legacy {name} enum value {value} is unknown "
                                         f"(known: {', '.join(f'{i}={v}' for i, v in enumerate(values))})")
        setattr(msg, name, values[value])
    if legacy:
        msg.DiscardUnknownFields()


def table_type_name(d: pb.TableDef) -> str:
    """The table type, upper case; an empty field is the spec's default MANAGED."""
    return (d.table_type or "MANAGED").upper()


def table_format_name(d: pb.TableDef) -> str:
    """The table format, upper case; an empty field means ICEBERG, the only format."""
    return (d.table_format or "ICEBERG").upper()
