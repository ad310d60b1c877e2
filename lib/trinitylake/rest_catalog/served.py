"""The tables as the catalog server serves them: Iceberg's garbage collection disabled at the client.

Earlier lakehouse versions (time travel, exports) still read the files a table's current metadata no
longer lists. An Iceberg client that deletes them (Spark's ``CALL system.expire_snapshots`` and
``remove_orphan_files``, ``DROP TABLE ... PURGE``, deleting old metadata files after a commit) breaks
those versions. So every table the server answers with (load-table and commit responses, staged
creates) carries, as Nessie's catalog does:

* ``gc.enabled=false``: Iceberg's ``RemoveSnapshots``, Spark's ``remove_orphan_files`` and
  ``SparkCatalog.purgeTable`` refuse ("GC is disabled");
* ``write.metadata.delete-after-commit.enabled=false``: no client deletes a replaced metadata file;
* ``trinitylake.gc``: what to run instead (Iceberg's own refusal text is fixed).

Only the answer carries them; the stored metadata is unchanged, so the lakehouse's own table
maintenance (``tlake tables expire-snapshots`` / ``remove-orphans``, which keep every file a retained
version reads) maintains the table as before.

A user's own setting, stored by a commit, stays what the user set: ``gc.enabled=false`` keeps the
lakehouse's maintenance off that table too (a user's opt-out), and an explicit ``gc.enabled=true`` is
served as ``true``: its owner has chosen client-side GC for that table, whose earlier lakehouse versions
may then lose files (Iceberg's REST Compatibility Kit expires snapshots on tables it creates so). A
commit that echoes the served values back (it carries ``trinitylake.gc``) stores neither.
"""

from __future__ import annotations

from pyiceberg.table.metadata import TableMetadata

from trinitylake.iceberg.table_updates import DELETE_AFTER_COMMIT, GC_ENABLED, GC_NOTE

GC_NOTE_TEXT = ("disabled through this catalog: earlier lakehouse versions read these files; run "
                "'tlake tables expire-snapshots' and 'tlake tables remove-orphans' (they keep what a retained "
                "version reads); DROP TABLE ... PURGE drops the table and keeps its files for those versions")


def served_properties(stored: dict[str, str]) -> dict[str, str]:
    """The properties a table is served with, given the stored ones (see the module doc)."""
    out = dict(stored)
    out[DELETE_AFTER_COMMIT] = "false"
    if stored.get(GC_ENABLED, "").strip().lower() != "true":
        out[GC_ENABLED] = "false"
        out[GC_NOTE] = GC_NOTE_TEXT
    return out


def served(metadata: TableMetadata) -> TableMetadata:
    """`metadata` as the server answers with it: `served_properties` over the stored ones."""
    return metadata.model_copy(update={"properties": served_properties(dict(metadata.properties))})
