"""The tables' orphan removal as a maintenance job (`tlake tables remove-orphans`, ``jobs/tables_orphans.py``)."""
