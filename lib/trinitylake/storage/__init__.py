"""Storage: fsspec-backed files with exclusive create (local O_EXCL/link, S3 If-None-Match)."""

from trinitylake.storage.storage import FileInfo, Storage, s3_options_from_env
from trinitylake.storage.uri import ParsedURI, is_absolute, join_uri, normalize_uri, parse_uri

__all__ = [
    "FileInfo",
    "ParsedURI",
    "Storage",
    "is_absolute",
    "join_uri",
    "normalize_uri",
    "parse_uri",
    "s3_options_from_env",
]
