"""The few fields the tables' maintenance reads from Iceberg's Avro files, decoded fast.

A manifest list is read for its manifests' paths, a manifest for each entry's status, file path
and content; the rest of every record (partition summaries, column statistics, ...) is skipped.
Each writer schema (the file header's, byte for byte) is compiled once into reader and skipper
functions, so a file costs its header, its blocks' decompression and one call per field:
`trinitylake.iceberg.avro_rewrite` interprets the schema for every value, which is what a
rewrite needs and costs about ten times more for these reads.

    >>> from trinitylake.tables_maintenance.avro_entries import LIST_FIELDS, read_projected
    >>> read_projected(b"not avro", LIST_FIELDS)
    Traceback (most recent call last):
    ...
    trinitylake.iceberg.avro_rewrite.AvroRewriteError: not an Avro object container file (bad magic)
"""

from __future__ import annotations

import json
import operator
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pyiceberg.avro.decoder import BinaryDecoder, new_decoder

from trinitylake.iceberg.avro_rewrite import MAGIC, SYNC_SIZE, AvroRewriteError, decompress_block

#: Which fields to decode: a record's field name -> None (its whole value) or the fields of its
#: own record (a union's record branch included) to decode.
Fields = Mapping[str, "Fields | None"]
#: A manifest list's records: each manifest's path, and what `TableFiles.uncovered` compares
#: with a snapshot's summary: its content (0 data, 1 deletes), the sequence number it was added
#: at, and its live entries (added and existing; format v1 names them ``*_data_files_count``).
LIST_FIELDS: Fields = {"manifest_path": None, "content": None, "sequence_number": None, "added_files_count": None,
                       "existing_files_count": None, "added_data_files_count": None,
                       "existing_data_files_count": None}
#: A manifest's entries: status (2: deleted), and the data or delete file's path and content.
MANIFEST_FIELDS: Fields = {"status": None, "data_file": {"file_path": None, "content": None}}

_Reader = Callable[[BinaryDecoder], Any]
_Skipper = Callable[[BinaryDecoder], None]
_MAX_COMPILED = 64
_compiled: dict[tuple[bytes, int], _Reader] = {}
_lock = threading.Lock()


def read_projected(data: bytes, fields: Fields) -> list[dict[str, Any]]:
    """The records of the Avro file `data`, each a dict of the `fields` asked (union values
    without their branch).

    Raises:
        AvroRewriteError: not an Avro object container file, or a schema or codec it cannot read.
        EOFError: the file is truncated.
    """
    if data[:4] != MAGIC:
        raise AvroRewriteError("not an Avro object container file (bad magic)")
    d = new_decoder(data)
    d.skip(4)
    meta: dict[str, bytes] = {}
    while (n := d.read_int()) != 0:
        if n < 0:
            n = -n
            d.read_int()
        for _ in range(n):
            k = d.read_utf8()
            meta[k] = d.read_bytes()
    sync = d.read(SYNC_SIZE)
    schema_text = meta.get("avro.schema")
    if schema_text is None:
        raise AvroRewriteError("Avro file without a schema")
    reader = _reader_for(schema_text, fields)
    codec = (meta.get("avro.codec") or b"null").decode() or "null"
    out: list[dict[str, Any]] = []
    size = len(data)
    while d.tell() < size:
        count = d.read_int()
        block = d.read_bytes()
        if d.read(SYNC_SIZE) != sync:
            raise AvroRewriteError("Avro block without the file's sync marker")
        bd = new_decoder(decompress_block(codec, block))
        out.extend(reader(bd) for _ in range(count))
    return out


def _reader_for(schema_text: bytes, fields: Fields) -> _Reader:
    key = (schema_text, id(fields))
    r = _compiled.get(key)
    if r is None:
        try:
            schema = json.loads(schema_text)
        except ValueError as e:
            raise AvroRewriteError(f"Avro file without a readable schema: {e}") from None
        r = _Compiler().reader(schema, "", fields)
        with _lock:
            if len(_compiled) >= _MAX_COMPILED:
                _compiled.clear()
            _compiled[key] = r
    return r


def _none(_d: BinaryDecoder) -> None:
    return None


def _blocks(d: BinaryDecoder) -> int:
    """The item count of the next block of an array or map (0: the end); a negative count is
    followed by the block's size in bytes, not needed to read the items one by one."""
    n: int = d.read_int()
    if n < 0:
        d.read_int()
        return -n
    return n


class _Compiler:
    """Reader and skipper functions of one writer schema, named types registered as met."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {}

    def _resolve(self, schema: Any, ns: str) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVE_READ:
            full = schema if "." in schema or not ns else f"{ns}.{schema}"
            found = self.names.get(full) or self.names.get(schema)
            if found is None:
                raise AvroRewriteError(f"unknown Avro type name {schema!r}")
            return found
        if isinstance(schema, dict):
            t = schema.get("type")
            if isinstance(t, dict | list) or (isinstance(t, str) and t not in _COMPLEX):
                return self._resolve(t, ns)  # a primitive with a logical type, or a named type
        return schema

    def _register(self, schema: dict[str, Any], ns: str) -> str:
        name = str(schema.get("name", ""))
        inner_ns = str(schema.get("namespace", ns))
        full = name if "." in name or not inner_ns else f"{inner_ns}.{name}"
        self.names[full] = schema
        self.names.setdefault(name.rsplit(".", 1)[-1], schema)
        return full.rsplit(".", 1)[0] if "." in full else ""

    def reader(self, schema: Any, ns: str, fields: Fields | None = None) -> _Reader:
        """A function decoding one value of `schema` (of a record: the `fields` asked, all when None)."""
        s = self._resolve(schema, ns)
        if isinstance(s, str):
            return _PRIMITIVE_READ[s]
        if isinstance(s, list):
            branches = [self.reader(b, ns, fields) for b in s]

            def union(d: BinaryDecoder) -> Any:
                i = d.read_int()
                if not 0 <= i < len(branches):
                    raise AvroRewriteError(f"Avro union branch {i} out of range")
                return branches[i](d)

            return union
        t = s["type"]
        if t in ("record", "error"):
            inner = self._register(s, ns)
            steps: list[tuple[str | None, Callable[[BinaryDecoder], Any]]] = []
            for f in s.get("fields", []):
                name = f["name"]
                if fields is None or name in fields:
                    steps.append((name, self.reader(f["type"], inner, fields[name] if fields is not None else None)))
                else:
                    steps.append((None, self.skipper(f["type"], inner)))

            def record(d: BinaryDecoder) -> dict[str, Any]:
                out: dict[str, Any] = {}
                for name, fn in steps:
                    if name is None:
                        fn(d)
                    else:
                        out[name] = fn(d)
                return out

            return record
        if t in ("enum", "fixed"):
            self._register(s, ns)
            if t == "enum":
                return _PRIMITIVE_READ["int"]
            size = int(s["size"])
            return lambda d: d.read(size)
        if t == "array":
            item = self.reader(s["items"], ns)

            def array(d: BinaryDecoder) -> list[Any]:
                out: list[Any] = []
                while (n := _blocks(d)) != 0:
                    out.extend(item(d) for _ in range(n))
                return out

            return array
        if t == "map":
            value = self.reader(s["values"], ns)

            def map_(d: BinaryDecoder) -> dict[str, Any]:
                out: dict[str, Any] = {}
                while (n := _blocks(d)) != 0:
                    for _ in range(n):
                        k = d.read_utf8()
                        out[k] = value(d)
                return out

            return map_
        raise AvroRewriteError(f"unsupported Avro type {t!r}")

    def skipper(self, schema: Any, ns: str) -> _Skipper:
        """A function skipping one value of `schema`."""
        s = self._resolve(schema, ns)
        if isinstance(s, str):
            return _PRIMITIVE_SKIP[s]
        if isinstance(s, list):
            branches = [self.skipper(b, ns) for b in s]

            def union(d: BinaryDecoder) -> None:
                i = d.read_int()
                if not 0 <= i < len(branches):
                    raise AvroRewriteError(f"Avro union branch {i} out of range")
                branches[i](d)

            return union
        t = s["type"]
        if t in ("record", "error"):
            inner = self._register(s, ns)
            parts = [self.skipper(f["type"], inner) for f in s.get("fields", [])]

            def record(d: BinaryDecoder) -> None:
                for fn in parts:
                    fn(d)

            return record
        if t == "enum":
            self._register(s, ns)
            return _PRIMITIVE_SKIP["int"]
        if t == "fixed":
            self._register(s, ns)
            size = int(s["size"])
            return lambda d: d.skip(size)
        if t in ("array", "map"):
            item = self.skipper(s["items"] if t == "array" else s["values"], ns)
            is_map = t == "map"

            def blocks(d: BinaryDecoder) -> None:
                while (n := d.read_int()) != 0:
                    if n < 0:  # the block's size in bytes follows: skipped whole
                        d.skip(d.read_int())
                        continue
                    for _ in range(n):
                        if is_map:
                            d.skip_utf8()
                        item(d)

            return blocks
        raise AvroRewriteError(f"unsupported Avro type {t!r}")


_COMPLEX = frozenset({"record", "error", "enum", "fixed", "array", "map"})
_PRIMITIVE_READ: dict[str, _Reader] = {
    "null": _none,
    "boolean": operator.methodcaller("read_boolean"),
    "int": operator.methodcaller("read_int"),
    "long": operator.methodcaller("read_int"),
    "float": operator.methodcaller("read_float"),
    "double": operator.methodcaller("read_double"),
    "bytes": operator.methodcaller("read_bytes"),
    "string": operator.methodcaller("read_utf8"),
}
_PRIMITIVE_SKIP: dict[str, _Skipper] = {
    "null": _none,
    "boolean": operator.methodcaller("skip_boolean"),
    "int": operator.methodcaller("skip_int"),
    "long": operator.methodcaller("skip_int"),
    "float": operator.methodcaller("skip_float"),
    "double": operator.methodcaller("skip_double"),
    "bytes": operator.methodcaller("skip_bytes"),
    "string": operator.methodcaller("skip_utf8"),
}
