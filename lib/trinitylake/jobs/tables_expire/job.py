"""``run_tables_expire``: the job runner's entry of `trinitylake.tables_maintenance.expire`
(its options from ``conf/tables_expire.yaml``, the environment and the flags). The engine `ex`
places the manifest reads and the deletes: the driver's threads for a few tables, the executors
for thousands (``execution: auto|local|distributed``); Spark starts only when a phase goes there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trinitylake.tables_maintenance.expire import ExpireOptions, expire_snapshots

if TYPE_CHECKING:
    from trinitylake.config import TablesExpireConfig
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution


def table_names(value: str | None) -> list[str]:
    """The ``tables`` option: comma-separated names, none for every table."""
    return [n.strip() for n in (value or "").split(",") if n.strip()]


def run_tables_expire(ex: Execution, lakehouse: Lakehouse, cfg: TablesExpireConfig, result: JobResult) -> JobResult:
    opts = ExpireOptions(
        older_than_ms=cfg.older_than,
        retain_last=cfg.retain_last,
        tables=table_names(cfg.tables),
        dry_run=cfg.dry_run,
        batch_size=cfg.batch_size,
        reference_ms=cfg.reference_time,
        delete_batch=cfg.delete_batch_size,
    )
    return expire_snapshots(lakehouse, opts, result, ex)
