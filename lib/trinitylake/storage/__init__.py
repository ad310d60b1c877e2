"""Storage: files with exclusive create, one backend per kind of store behind one interface
(local files: link / O_EXCL; S3: If-None-Match; fsspec's memory:// for tests)."""

from trinitylake.storage.storage import FileInfo, Storage, s3_options_from_env
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
