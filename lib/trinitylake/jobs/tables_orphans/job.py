"""``run_tables_orphans``: the job runner's entry of `trinitylake.tables_maintenance.orphans`
(its options from ``conf/tables_orphans.yaml``, the environment and the flags). The engine `ex`
places the manifest reads and the deletes (driver threads or executors, by size); the listings
of the tables' locations run on the driver."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trinitylake.errors import ConfigError
from trinitylake.tables_maintenance.common import table_names
from trinitylake.tables_maintenance.orphans import OrphanOptions, remove_orphans

if TYPE_CHECKING:
    from trinitylake.config import TablesOrphansConfig
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution


def pairs(value: str | None, key: str) -> dict[str, str]:
    """``from=to,from=to`` -> a dict (the equivalence options)."""
    out: dict[str, str] = {}
    for item in (value or "").split(","):
        if not item.strip():
            continue
        a, sep, b = item.partition("=")
        if not sep or not a.strip() or not b.strip():
            raise ConfigError(f"{key}: expected from=to pairs separated by commas, got {item!r}")
        out[a.strip()] = b.strip()
    return out


def run_tables_orphans(ex: Execution, lakehouse: Lakehouse, cfg: TablesOrphansConfig, result: JobResult) -> JobResult:
    opts = OrphanOptions(
        older_than_ms=cfg.older_than,
        unsafe_min_age=cfg.unsafe_min_age,
        tables=table_names(cfg.tables),
        dry_run=cfg.dry_run,
        prefix_mismatch_mode=cfg.prefix_mismatch,
        equal_schemes=pairs(cfg.equal_schemes, "equal_schemes"),
        equal_authorities=pairs(cfg.equal_authorities, "equal_authorities"),
        reference_ms=cfg.reference_time,
        delete_batch=cfg.delete_batch_size,
    )
    return remove_orphans(lakehouse, opts, result, ex)
