"""Storage: files with exclusive create, one backend per kind of store behind one interface
(local files: link / O_EXCL; S3: If-None-Match; fsspec's memory:// for tests)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trinitylake.storage.uri import (
    ParsedURI,
    hadoop_location,
    is_absolute,
    join_uri,
    local_path_of_url,
    normalize_uri,
    parse_uri,
    same_scheme,
    spark_location,
)

if TYPE_CHECKING:
    from trinitylake.storage.storage import FileInfo, Storage, s3_options_from_env

#: Loaded when first read (PEP 562): `trinitylake.storage.storage` imports every backend
#: (asyncio and the object-store engine among them), which `tlake --help` or a module that only
#: needs `storage.options` or `storage.uri` should not pay for.
_LAZY = {"FileInfo": "storage", "Storage": "storage", "s3_options_from_env": "storage"}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


__all__ = [
    "FileInfo",
    "ParsedURI",
    "Storage",
    "hadoop_location",
    "is_absolute",
    "join_uri",
    "local_path_of_url",
    "normalize_uri",
    "parse_uri",
    "s3_options_from_env",
    "same_scheme",
    "spark_location",
]
