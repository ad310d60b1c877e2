"""The storage options PyIceberg-style catalog properties give for one kind of store: the
lakehouse's own ``lakehouse.storage.<key>`` options for the stores of its scheme, and
PyIceberg's S3 properties (``s3.*`` and their ``client.*`` forms) for ``s3://`` stores. Which
property means what on which store is the storage's knowledge, so it lives here; the tables'
FileIO (`trinitylake.iceberg.fileio`) only asks for a scheme's options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trinitylake.errors import ConfigError
from trinitylake.storage.options import StorageOptions, check_storage_options
from trinitylake.storage.uri import parse_uri

#: The catalog properties that are the lakehouse's storage options (`lakehouse.storage.<key>`).
STORAGE_PREFIX = "lakehouse.storage."
_FILE_IO = "trinitylake.iceberg.fileio.TrinityLakeFileIO"
#: PyIceberg's S3 FileIO properties -> our storage option.
_S3_PROPERTIES: Mapping[str, str] = {
    "s3.endpoint": "endpoint_url",
    "s3.access-key-id": "key",
    "client.access-key-id": "key",
    "s3.secret-access-key": "secret",
    "client.secret-access-key": "secret",
    "s3.session-token": "token",
    "client.session-token": "token",
    "s3.region": "region",
    "client.region": "region",
    "s3.profile-name": "profile",
    "s3.anonymous": "anon",
}
#: S3 properties the engine decides itself (timeouts, retries, region resolution): accepted.
_S3_IGNORED = frozenset({"s3.connect-timeout", "s3.request-timeout", "s3.resolve-region", "s3.retry-strategy-impl"})


def storage_options_of(properties: Mapping[str, str], scheme: str) -> StorageOptions:
    """The storage options of the stores of `scheme` that the catalog's `properties` give (see
    the module doc).

    Raises:
        ConfigError: a storage option or an S3 property is unknown or cannot be honoured (named,
            its value never shown).
    """
    lakehouse = properties.get("lakehouse")
    own_scheme = parse_uri(str(lakehouse)).scheme if lakehouse else "s3"
    out: dict[str, Any] = {}
    if scheme == own_scheme:
        out.update((k[len(STORAGE_PREFIX):], v) for k, v in properties.items() if k.startswith(STORAGE_PREFIX))
    if scheme != "s3":
        return out
    for key, value in properties.items():
        if not key.startswith(("s3.", "client.")) or key in _S3_IGNORED:
            continue
        opt = _S3_PROPERTIES.get(key)
        if opt is not None:
            out[opt] = value
        elif key.startswith("s3."):
            raise ConfigError(f"catalog property {key!r}: the tables' FileIO ({_FILE_IO}) does not support it; "
                              f"supported: {', '.join(sorted(_S3_PROPERTIES))} (or set py-io-impl to PyIceberg's "
                              "pyiceberg.io.pyarrow.PyArrowFileIO)")
    if "region" in out and "client_kwargs" in out:
        out["client_kwargs"] = {**out["client_kwargs"], "region_name": out.pop("region")}
    return check_storage_options(out, "catalog property")
