"""The tables' snapshot expiry as a maintenance job (`tlake tables expire-snapshots`, ``jobs/tables_expire.py``)."""
