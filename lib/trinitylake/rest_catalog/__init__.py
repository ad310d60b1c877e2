"""An Iceberg REST catalog server over the lakehouse (`tlake catalog serve`).

Spark (``spark.sql.catalog.X.type=rest``), PyIceberg's ``RestCatalog``, Trino, DuckDB and other
clients of the Iceberg REST protocol read and write the lakehouse's Iceberg tables through it;
every request reads or commits the lakehouse through `trinitylake.iceberg.TrinityLakeCatalog`
(`app`), callers authenticate with a bearer token (`auth`), failures answer the protocol's
error model (`errors`), and `server` runs it under uvicorn.

This package sits above `trinitylake.iceberg`; nothing below it imports it.
"""

from trinitylake.rest_catalog.app import ServerSettings, build_app
from trinitylake.rest_catalog.auth import Authenticator, Principal

__all__ = ["Authenticator", "Principal", "ServerSettings", "build_app"]
