"""The protobuf wire format, as the oracle reads it (protobuf's encoding guide, nothing else).

A message is a sequence of fields, each a varint *tag* (``field_number << 3 | wire_type``)
followed by its payload: wire type 0 a varint, 1 eight little-endian bytes, 2 a varint length
and that many bytes (strings, bytes, sub-messages, map entries, packed repeated scalars), 5
four little-endian bytes. Wire types 3 and 4 (groups) are not used by proto3 schemas; they are
refused, as is anything truncated.
"""

from __future__ import annotations

from collections.abc import Iterator

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not a protobuf message."""


def varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at `data[i:]` and the offset after it (at most 10 bytes: 64 bits)."""
    n = shift = 0
    for j in range(i, min(i + 10, len(data))):
        b = data[j]
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, j + 1
        shift += 7
    raise WireError(f"truncated or overlong varint at byte {i}")


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of every field of one message, in file order: an int
    for a varint, bytes for the other wire types."""
    i = 0
    while i < len(data):
        tag, i = varint(data, i)
        number, wt = tag >> 3, tag & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {i}")
        value: int | bytes
        if wt == VARINT:
            value, i = varint(data, i)
        elif wt in (FIXED64, FIXED32):
            width = 8 if wt == FIXED64 else 4
            value, i = data[i : i + width], i + width
        elif wt == LEN:
            n, i = varint(data, i)
            value, i = data[i : i + n], i + n
        else:
            raise WireError(f"wire type {wt} of field {number} (groups are not proto3)")
        if i > len(data):
            raise WireError(f"field {number} runs past the end of the message ({len(data)} bytes)")
        yield number, wt, value


def as_int(value: int | bytes, number: int) -> int:
    """A varint field's value as an unsigned integer (uint32, uint64, enum)."""
    if not isinstance(value, int):
        raise WireError(f"field {number} is not a varint")
    return value


def as_str(value: int | bytes, number: int) -> str:
    if not isinstance(value, bytes):
        raise WireError(f"field {number} is not length-delimited")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WireError(f"field {number} is not UTF-8: {e}") from None


def map_entry(value: int | bytes, number: int) -> tuple[int | bytes | None, int | bytes | None]:
    """(key, value) of one map entry (a sub-message with key = 1, value = 2); a missing part
    is None (the caller's default)."""
    if not isinstance(value, bytes):
        raise WireError(f"map field {number} is not length-delimited")
    key = val = None
    for n, _, v in fields(value):
        if n == 1:
            key = v
        elif n == 2:
            val = v
    return key, val
