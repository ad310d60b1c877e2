"""The PyIceberg catalog the table jobs commit through: `TrinityLakeCatalog` on the job's own
`Lakehouse` (so its commits carry the job's audit context and parent seq), with PyIceberg FileIO
properties derived from the lakehouse's storage options where none are given."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from trinitylake.iceberg.catalog import STORAGE_PREFIX, TrinityLakeCatalog

if TYPE_CHECKING:
    from trinitylake.lakehouse import Lakehouse

#: fsspec/s3fs option -> PyIceberg FileIO property.
_S3_PROPERTIES = {
    "endpoint_url": "s3.endpoint",
    "key": "s3.access-key-id",
    "secret": "s3.secret-access-key",
    "token": "s3.session-token",
    "region_name": "s3.region",
}


def fileio_properties(storage_options: dict[str, Any]) -> dict[str, str]:
    """PyIceberg's S3 FileIO properties for the same store as `storage_options` (s3fs's)."""
    out = {
        prop: str(storage_options[opt])
        for opt, prop in _S3_PROPERTIES.items()
        if isinstance(storage_options.get(opt), str) and storage_options[opt]
    }
    kwargs = storage_options.get("client_kwargs")
    if isinstance(kwargs, dict) and kwargs.get("region_name") and "s3.region" not in out:
        out["s3.region"] = str(kwargs["region_name"])
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region and "s3.region" not in out and out:
        out["s3.region"] = region
    return out


def job_catalog(lakehouse: Lakehouse, properties: dict[str, str] | None = None) -> TrinityLakeCatalog:
    """A writable catalog on `lakehouse` itself; `properties` (PyIceberg catalog and FileIO
    properties) win over the derived ones."""
    options = lakehouse.storage.options or {}
    props: dict[str, str] = {
        "lakehouse": lakehouse.uri,
        "audit": "false",
        **{f"{STORAGE_PREFIX}{k}": v for k, v in options.items() if isinstance(v, str)},
        **fileio_properties(options),  # S3 options only: nothing for local files
        **(properties or {}),
    }
    catalog = TrinityLakeCatalog("tables-maintenance", **props)
    catalog.lakehouse = lakehouse  # commits go through the job's lakehouse: its auditor, its context
    return catalog
