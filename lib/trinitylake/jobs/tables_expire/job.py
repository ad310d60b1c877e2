"""``run_tables_expire``: the job runner's entry of `trinitylake.tables_maintenance.expire`
(its options from ``conf/tables_expire.yaml``, the environment and the flags). The engine `ex`
places the manifest reads and the deletes: the driver's threads for a few tables, the executors
for thousands (``execution: auto|local|distributed``); Spark starts only when a phase goes there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trinitylake.errors import UnsafeOperationError
from trinitylake.format.definitions import DEFAULT_TXN_TTL_MILLIS
from trinitylake.tables_maintenance.common import table_names
from trinitylake.tables_maintenance.expire import ExpireOptions, expire_snapshots
from trinitylake.values import format_duration

if TYPE_CHECKING:
    from trinitylake.config import TablesExpireConfig
    from trinitylake.lakehouse import Lakehouse
    from trinitylake.runs.results import JobResult
    from trinitylake.spark.execution import Execution


def check_floor(lakehouse: Lakehouse, cfg: TablesExpireConfig, result: JobResult) -> None:
    """The retention floor: ``older_than`` below the lakehouse's transaction TTL needs
    ``unsafe_min_age`` (as ``orphans``' age floor does; retained versions protect time travel,
    but a snapshot younger than the TTL may belong to a transaction still running).

    Raises:
        UnsafeOperationError: below the floor without ``unsafe_min_age``.
    """
    if cfg.older_than is None:
        return
    d = lakehouse.load_root(lakehouse.latest_version()).lakehouse_def
    ttl = int(d.txn_ttl_millis or DEFAULT_TXN_TTL_MILLIS)
    result.details["txn_ttl_ms"] = ttl
    if cfg.older_than < ttl and not cfg.unsafe_min_age:
        raise UnsafeOperationError(
            f"tables expire-snapshots --older-than {format_duration(cfg.older_than)} is below the lakehouse "
            f"transaction TTL {format_duration(ttl)}: raise it, or pass --unsafe-min-age if no transaction can be running"
        )


def run_tables_expire(ex: Execution, lakehouse: Lakehouse, cfg: TablesExpireConfig, result: JobResult) -> JobResult:
    check_floor(lakehouse, cfg, result)
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
