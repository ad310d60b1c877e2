"""Iceberg tables in the lakehouse: a PyIceberg catalog on TrinityLake, and exports that carry
the tables' files.

Load the catalog with PyIceberg::

    from pyiceberg.catalog import load_catalog
    cat = load_catalog("tl", **{"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog",
                                "lakehouse": "s3://bucket/lh", "warehouse": "s3://bucket/lh/warehouse"})

This package sits above `trinitylake.lakehouse` (it commits through lakehouse transactions);
nothing below it imports it.
"""

from trinitylake.iceberg.catalog import ReadOnlyCatalogError, TrinityLakeCatalog
from trinitylake.iceberg.multi_table import MultiTableTransaction

__all__ = ["MultiTableTransaction", "ReadOnlyCatalogError", "TrinityLakeCatalog"]
