"""Rewrite the strings of an Avro object container file, everything else kept byte for byte.

Iceberg manifest lists and manifests are Avro files that carry absolute paths (manifest paths,
data and delete file paths). An export that moves a table rewrites them, as Iceberg's
``rewrite_table_path`` does: each record is decoded with the file's own writer schema (taken
verbatim from the header, with its field ids), its values passed through a function, and
encoded again with the same schema, the same header metadata, the same sync marker and the same
records per block. Nothing else changes, so the same input gives the same output bytes (an
interrupted export re-run finds the files it wrote identical).

Only the Avro binary encoding is implemented, with PyIceberg's decoder and encoder primitives;
fixed-width values (float, double, fixed) are copied as raw bytes.
"""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from pyiceberg.avro.codecs import KNOWN_CODECS, Codec
from pyiceberg.avro.decoder import BinaryDecoder, new_decoder
from pyiceberg.avro.encoder import BinaryEncoder

from trinitylake.json_data import JsonObject

MAGIC = b"Obj\x01"
SYNC_SIZE = 16

#: ``fn(record) -> record``: called on every top-level record of the file.
RecordFn = Callable[[dict[str, Any]], dict[str, Any]]


class AvroRewriteError(ValueError):
    """The file is not an Avro object container file this module can read."""


# ---- schema ------------------------------------------------------------------------------------
class _Names:
    def __init__(self) -> None:
        self.types: dict[str, Any] = {}

    def resolve(self, schema: Any, namespace: str) -> Any:
        """The schema with named references looked up (records, enums and fixed register)."""
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return schema
            full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            if full in self.types:
                return self.types[full]
            if schema in self.types:
                return self.types[schema]
            raise AvroRewriteError(f"unknown Avro type name {schema!r}")
        return schema

    def register(self, schema: JsonObject, namespace: str) -> str:
        name = schema.get("name", "")
        ns = schema.get("namespace", namespace)
        full = name if "." in name or not ns else f"{ns}.{name}"
        self.types[full] = schema
        self.types.setdefault(name.rsplit(".", 1)[-1], schema)
        return full.rsplit(".", 1)[0] if "." in full else ""


_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


# ---- datum decode / encode ---------------------------------------------------------------------
def _block_counts(d: BinaryDecoder) -> Iterator[int]:
    """Item counts of the blocks of an Avro array or map, up to its 0 terminator; a negative
    count is followed by the block's size in bytes (skipped: items are read one by one)."""
    while (n := d.read_int()) != 0:
        if n < 0:
            n = -n
            d.read_int()
        yield n


class _Codec:
    def __init__(self, schema: Any):
        self.names = _Names()
        self.schema = schema
        self._prepare(schema, "")

    def _prepare(self, schema: Any, ns: str) -> None:
        """Register every named type, depth first (a later reference may use the name)."""
        if isinstance(schema, list):
            for s in schema:
                self._prepare(s, ns)
        elif isinstance(schema, dict):
            t = schema.get("type")
            if t in ("record", "error"):
                inner = self.names.register(schema, ns)
                for f in schema.get("fields", []):
                    self._prepare(f["type"], inner)
            elif t in ("enum", "fixed"):
                self.names.register(schema, ns)
            elif t == "array":
                self._prepare(schema["items"], ns)
            elif t == "map":
                self._prepare(schema["values"], ns)
            elif isinstance(t, dict | list):
                self._prepare(t, ns)

    def read(self, schema: Any, d: BinaryDecoder, ns: str = "") -> Any:
        schema = self.names.resolve(schema, ns)
        if isinstance(schema, list):
            branch = d.read_int()
            return (branch, self.read(schema[branch], d, ns))
        t = schema if isinstance(schema, str) else schema["type"]
        if isinstance(t, dict | list):
            return self.read(t, d, ns)
        if t == "null":
            return None
        if t == "boolean":
            return d.read_boolean()
        if t in ("int", "long"):
            return d.read_int()
        if t == "float":
            return d.read(4)
        if t == "double":
            return d.read(8)
        if t == "bytes":
            return d.read_bytes()
        if t == "string":
            return d.read_utf8()
        if t == "fixed":
            return d.read(int(schema["size"]))
        if t == "enum":
            return d.read_int()
        if t == "array":
            out: list[Any] = []
            for n in _block_counts(d):
                out.extend(self.read(schema["items"], d, ns) for _ in range(n))
            return out
        if t == "map":
            m: dict[str, Any] = {}
            for n in _block_counts(d):
                for _ in range(n):
                    k = d.read_utf8()
                    m[k] = self.read(schema["values"], d, ns)
            return m
        if t in ("record", "error"):
            inner = schema.get("namespace", ns)
            return {f["name"]: self.read(f["type"], d, inner) for f in schema.get("fields", [])}
        raise AvroRewriteError(f"unsupported Avro type {t!r}")

    def write(self, schema: Any, value: Any, e: BinaryEncoder, ns: str = "") -> None:
        schema = self.names.resolve(schema, ns)
        if isinstance(schema, list):
            branch, inner = value
            e.write_int(branch)
            self.write(schema[branch], inner, e, ns)
            return
        t = schema if isinstance(schema, str) else schema["type"]
        if isinstance(t, dict | list):
            self.write(t, value, e, ns)
        elif t == "null":
            return
        elif t == "boolean":
            e.write_boolean(value)
        elif t in ("int", "long", "enum"):
            e.write_int(value)
        elif t in ("float", "double", "fixed"):
            e.write(value)
        elif t == "bytes":
            e.write_bytes(value)
        elif t == "string":
            e.write_utf8(value)
        elif t == "array":
            if value:
                e.write_int(len(value))
                for v in value:
                    self.write(schema["items"], v, e, ns)
            e.write_int(0)
        elif t == "map":
            if value:
                e.write_int(len(value))
                for k, v in value.items():
                    e.write_utf8(k)
                    self.write(schema["values"], v, e, ns)
            e.write_int(0)
        elif t in ("record", "error"):
            inner = schema.get("namespace", ns)
            for f in schema.get("fields", []):
                self.write(f["type"], value[f["name"]], e, inner)
        else:
            raise AvroRewriteError(f"unsupported Avro type {t!r}")


# ---- block codecs ------------------------------------------------------------------------------
def _known_codec(codec: str) -> type[Codec]:
    c = {str(k): v for k, v in KNOWN_CODECS.items()}.get(codec)
    if c is None:
        raise AvroRewriteError(f"unsupported Avro codec {codec!r}")
    return c


def decompress_block(codec: str, data: bytes) -> bytes:
    """An Avro data block's bytes, decompressed by the file's codec (`avro.codec`)."""
    if codec == "null":
        return data
    if codec == "deflate":
        return zlib.decompress(data, -15)
    c = _known_codec(codec)
    return c.decompress(data)


def _compress(codec: str, data: bytes) -> bytes:
    if codec == "null":
        return data
    if codec == "deflate":
        z = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
        return z.compress(data) + z.flush()
    c = _known_codec(codec)
    return c.compress(data)[0]


# ---- files -----------------------------------------------------------------------------------------
def read_records(data: bytes) -> tuple[dict[str, bytes], list[JsonObject]]:
    """(header metadata, records) of an Avro file, records as plain dicts (unions as
    ``(branch, value)``), for callers that only look."""
    meta, _, blocks, _codec = _parse(data)
    return meta, [r for _, recs in blocks for r in recs]


def _parse(data: bytes) -> tuple[dict[str, bytes], bytes, list[tuple[int, list[Any]]], _Codec]:
    if data[:4] != MAGIC:
        raise AvroRewriteError("not an Avro object container file (bad magic)")
    d = new_decoder(data)
    d.read(4)
    meta: dict[str, bytes] = {}
    for n in _block_counts(d):
        for _ in range(n):
            k = d.read_utf8()
            meta[k] = d.read_bytes()
    sync = d.read(SYNC_SIZE)
    try:
        schema = json.loads(meta["avro.schema"])
    except (KeyError, ValueError) as e:
        raise AvroRewriteError(f"Avro file without a readable schema: {e}") from None
    codec_name = meta.get("avro.codec", b"null").decode() or "null"
    codec = _Codec(schema)
    blocks: list[tuple[int, list[Any]]] = []
    while d.tell() < len(data):
        count = d.read_int()
        block = decompress_block(codec_name, d.read_bytes())
        if d.read(SYNC_SIZE) != sync:
            raise AvroRewriteError("Avro block without the file's sync marker")
        bd = new_decoder(block)
        blocks.append((count, [codec.read(schema, bd) for _ in range(count)]))
    return meta, sync, blocks, codec


def rewrite_avro(data: bytes, fn: RecordFn, meta_fn: Callable[[str], str] | None = None) -> bytes:
    """The Avro file `data` with every record passed through `fn` (and every header metadata
    value that is UTF-8 text through `meta_fn`). The schema, codec, sync marker and block
    layout are kept."""
    meta, sync, blocks, codec = _parse(data)
    codec_name = meta.get("avro.codec", b"null").decode() or "null"
    if meta_fn is not None:
        for k, v in list(meta.items()):
            if k.startswith("avro."):
                continue
            try:
                text = v.decode("utf-8")
            except UnicodeDecodeError:
                continue
            new = meta_fn(text)
            if new != text:
                meta[k] = new.encode("utf-8")
    out = io.BytesIO()
    e = BinaryEncoder(out)
    e.write(MAGIC)
    e.write_int(len(meta))
    for k, v in meta.items():
        e.write_utf8(k)
        e.write_bytes(v)
    e.write_int(0)
    e.write(sync)
    for count, records in blocks:
        buf = io.BytesIO()
        be = BinaryEncoder(buf)
        for r in records:
            codec.write(codec.schema, fn(r), be)
        payload = _compress(codec_name, buf.getvalue())
        e.write_int(count)
        e.write_bytes(payload)
        e.write(sync)
    return out.getvalue()


def map_strings(value: object, fn: Callable[[str], str]) -> Any:
    """`value` with every string inside it (dict values, list items, union values) mapped by `fn`."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [map_strings(v, fn) for v in value]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int):
        return (value[0], map_strings(value[1], fn))
    return value
