"""The files of Iceberg view metadata: where a change writes its new file
(``<location>/metadata/NNNNN-<uuid>.metadata.json``, or under the view's
``write.metadata.path``), and reading and writing them through the FileIO that the catalog's
properties load (gzip too, as Java writes ``.gz.metadata.json``)."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import NoSuchViewError
from pyiceberg.io import load_file_io

from trinitylake.errors import TrinityLakeError
from trinitylake.iceberg.view_metadata import Json

if TYPE_CHECKING:
    from pyiceberg.typedef import Properties

WRITE_METADATA_LOCATION = "write.metadata.path"
METADATA_SUFFIX = ".metadata.json"


class CorruptViewMetadataError(TrinityLakeError):
    """A view's metadata file that does not read as Iceberg view metadata (named by its file name)."""


def _file_version(location: str | None) -> int:
    """Java's ``parseVersion``: the number a metadata file's name starts with (-1 if none)."""
    if not location:
        return -1
    name = location.rsplit("/", 1)[-1]
    head, sep, _ = name.partition("-")
    return int(head) if sep and head.isdigit() else -1


def new_metadata_location(metadata: Mapping[str, Any], previous: str | None) -> str:
    """``<location>/metadata/NNNNN-<uuid>.metadata.json`` (or under ``write.metadata.path``)."""
    name = f"{_file_version(previous) + 1:05d}-{uuid.uuid4()}{METADATA_SUFFIX}"
    custom = (metadata.get("properties") or {}).get(WRITE_METADATA_LOCATION)
    base = custom.rstrip("/") if custom else f"{str(metadata['location']).rstrip('/')}/metadata"
    return f"{base}/{name}"


def read_metadata(properties: Properties, location: str) -> Json:
    """The view metadata JSON at `location` (gzip too, as Java writes ``.gz.metadata.json``).

    Raises:
        NoSuchViewError: the file is missing (its path is not quoted: the client sees the message).
    """
    io = load_file_io(properties=properties, location=location)
    try:
        with io.new_input(location).open() as f:
            raw = f.read()
    except FileNotFoundError:
        raise NoSuchViewError(f"the view's metadata file {location.rsplit('/', 1)[-1]} is missing") from None
    try:
        obj = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, ValueError) as e:
        raise CorruptViewMetadataError(f"the view's metadata file {location.rsplit('/', 1)[-1]} is not JSON: {e}") from None
    if not isinstance(obj, dict) or "view-uuid" not in obj or "versions" not in obj:
        raise CorruptViewMetadataError(f"the view's metadata file {location.rsplit('/', 1)[-1]} is not Iceberg view metadata")
    return obj


def write_metadata(properties: Properties, metadata: Mapping[str, Any], location: str) -> None:
    io = load_file_io(properties=properties, location=location)
    with io.new_output(location).create(overwrite=False) as f:
        f.write(json.dumps(metadata, separators=(",", ":")).encode("utf-8"))
