"""The PyIceberg catalog the table jobs commit through: `TrinityLakeCatalog` on the job's own
`Lakehouse` (so its commits carry the job's audit context and parent seq), with PyIceberg FileIO
properties derived from the lakehouse's storage options where none are given."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trinitylake.iceberg.catalog import STORAGE_PREFIX, TrinityLakeCatalog
from trinitylake.storage.options import fileio_properties  # the one mapper (storage/options.py)

if TYPE_CHECKING:
    from trinitylake.lakehouse import Lakehouse


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
