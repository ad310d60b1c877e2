"""Object definition files: one protobuf message, raw binary, in a ``.binpb`` file."""

from __future__ import annotations

import uuid
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from trinitylake.errors import CorruptDefinitionError
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
        from trinitylake.errors import ValidationError

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
    return msg
