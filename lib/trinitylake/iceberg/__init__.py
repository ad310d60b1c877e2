"""Iceberg tables in the lakehouse: a PyIceberg catalog on TrinityLake, and the rewriting of a
table's own files (paths in metadata JSON, manifests and manifest lists) that exports with
tables use (`trinitylake.jobs.export.tables`, the export job's table phase).

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
