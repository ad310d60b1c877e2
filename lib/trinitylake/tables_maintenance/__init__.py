"""Maintenance of the lakehouse's Iceberg tables, consistent with the lakehouse's time travel:
snapshot expiry (`trinitylake.tables_maintenance.expire`) and orphan removal
(`trinitylake.tables_maintenance.orphans`) over a live set at both levels
(`trinitylake.tables_maintenance.live`): what each table's own metadata keeps, and what every
retained lakehouse version and pinned export points at.

Layering: above `trinitylake.iceberg` (it commits through the catalog) and
`trinitylake.treewalk` (walk roots) and `trinitylake.runs` (plans, results); only the CLI (`trinitylake.cli.tables`)
and the jobs import it.
"""
