"""Distributed deletes: executors delete their share of a plan in bulk batches, with retries.

The driver never sees the paths: a DataFrame of keys (relative to the lakehouse root) is
repartitioned into ``ceil(n / batch_size)`` tasks (capped), each task deletes its keys in
bulk requests of `batch_size` (S3 DeleteObjects takes 1,000) through the pickled `Storage`,
retrying failed keys with jittered backoff (`maintenance.deletion.delete_with_retries`), and
returns one summary row (deleted, failed, first failures). Iceberg deletes on the driver to
keep parallelism under control; here the cap on partitions does that, and every task sends
one request at a time.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from trinitylake.errors import StorageError
from trinitylake.maintenance.deletion import delete_with_retries
from trinitylake.spark.common import DeleteBudget, InjectedFault, partitions_for
from trinitylake.storage import Storage

log = logging.getLogger(__name__)

_SAMPLE = 5


@dataclass
class DeleteOutcome:
    requested: int = 0
    deleted: int = 0
    failed: int = 0
    batches: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)

    def add(self, other: DeleteOutcome) -> None:
        self.requested += other.requested
        self.deleted += other.deleted
        self.failed += other.failed
        self.batches += other.batches
        self.failures.extend(other.failures[: max(0, _SAMPLE - len(self.failures))])


def _delete_partition(storage: Storage, batch_size: int, max_retries: int, allowed: int | None, index: int,
                      rows: Any) -> Any:
    if allowed is not None and index >= allowed:
        raise InjectedFault(f"TLAKE_TEST_FAIL_DELETE_AFTER: delete batch {index} killed")
    deleted = failed = batches = 0
    sample: list[tuple[str, str]] = []
    batch: list[str] = []

    def flush() -> None:
        nonlocal deleted, failed, batches
        ok, failures = delete_with_retries(storage, batch, max_retries=max_retries)
        deleted += ok
        failed += len(failures)
        batches += 1
        sample.extend(failures[: max(0, _SAMPLE - len(sample))])
        batch.clear()

    for r in rows:
        batch.append(r[0])
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    yield deleted, failed, batches, sample


def delete_keys(
    spark: Any,
    storage: Storage,
    keys_df: Any,
    n: int,
    *,
    batch_size: int,
    max_retries: int,
    budget: DeleteBudget | None = None,
    what: str = "files",
) -> DeleteOutcome:
    """Delete the files named by ``keys_df.path`` (`n` of them) on the executors.

    Raises:
        StorageError: the Spark job failed (e.g. an executor was lost); the files deleted so far
            stay deleted and a re-run finishes the work.
    """
    out = DeleteOutcome(requested=n)
    if n <= 0:
        return out
    parts = partitions_for(spark, n, batch_size)
    allowed = None
    if budget is not None:
        # Fault injection: one batch per task, so "N batches" is exact.
        parts = max(1, -(-n // batch_size))
        allowed = budget.take(parts)
    fn = functools.partial(_delete_partition, storage, batch_size, max_retries, allowed)
    try:
        rows = keys_df.select("path").repartition(parts).rdd.mapPartitionsWithIndex(fn).collect()
    except Exception as e:  # noqa: BLE001 - Py4J wraps executor errors; name the outcome plainly
        first = str(e).strip().splitlines()[0][:500] if str(e).strip() else type(e).__name__
        if "InjectedFault" in str(e):
            raise InjectedFault(f"delete of {what} killed by fault injection") from e
        raise StorageError(f"the delete job for {n} {what} failed ({first}); files already deleted stay deleted, "
                           "re-run the job to finish") from e
    for deleted, failed, batches, sample in rows:
        out.deleted += deleted
        out.failed += failed
        out.batches += batches
        out.failures.extend([tuple(x) for x in sample][: max(0, _SAMPLE - len(out.failures))])
    log.info("deleted %d of %d %s in %d batches (%d tasks), %d failed", out.deleted, n, what, out.batches, parts,
             out.failed)
    return out


def delete_on_driver(storage: Storage, keys: list[str], *, batch_size: int, max_retries: int,
                     budget: DeleteBudget | None = None, what: str = "files") -> DeleteOutcome:
    """Delete a small, bounded list (root files of expired versions) from the driver."""
    out = DeleteOutcome(requested=len(keys))
    for i in range(0, len(keys), batch_size):
        if budget is not None and budget.take(1) == 0:
            raise InjectedFault(f"TLAKE_TEST_FAIL_DELETE_AFTER: delete of {what} killed")
        chunk = keys[i : i + batch_size]
        ok, failures = delete_with_retries(storage, chunk, max_retries=max_retries)
        out.deleted += ok
        out.failed += len(failures)
        out.batches += 1
        out.failures.extend(failures[: max(0, _SAMPLE - len(out.failures))])
    return out
