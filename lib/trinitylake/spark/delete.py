"""Deleting a plan's files in bulk batches with retries, on the driver or on the executors.

The keys (relative to the lakehouse root) come as an Arrow table held by the driver or as a
DataFrame. Where the delete runs is decided by its size (`trinitylake.spark.execution`):

* **driver**: batches of `batch_size` keys go to a thread pool (``threads`` requests at a
  time); a local filesystem deletes a batch with one ``unlink`` per file, S3 with one
  DeleteObjects request;
* **executors**: ``mapInArrow`` tasks of ``ceil(n / batch_size)`` (capped) batches each; every
  task deletes its batches through the pickled `Storage` and returns one summary row. The
  driver never sees the paths.

Failed keys are retried with jittered backoff (`maintenance.deletion.delete_with_retries`);
missing files count as deleted, so a re-run after a crash is harmless.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import pyarrow as pa

from trinitylake import progress
from trinitylake.spark.execution import DISTRIBUTED, LOCAL, Execution, as_execution, executor_failures
from trinitylake.storage import Storage, requests
from trinitylake.storage.delete_retries import delete_with_retries

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from trinitylake.util import Session

log = logging.getLogger(__name__)

_SAMPLE = 5
_OUTCOME_SCHEMA = pa.schema([("deleted", pa.int64()), ("failed", pa.int64()), ("batches", pa.int64()),
                             ("sample", pa.string()), ("requests", pa.string())])


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


def _delete_batch(storage: Storage, max_retries: int, keys: list[str]) -> DeleteOutcome:
    ok, failures = delete_with_retries(storage, keys, max_retries=max_retries)
    return DeleteOutcome(requested=len(keys), deleted=ok, failed=len(failures), batches=1,
                         failures=[tuple(f) for f in failures[:_SAMPLE]])  # type: ignore[misc]


def delete_task(storage: Storage, batch_size: int, max_retries: int, threads: int,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: delete the task's keys in bulk batches, one summary row out."""

    before = requests.snapshot()
    keys = [k for b in batches for k in b.column(b.schema.get_field_index("path")).to_pylist()]
    out = _delete_keys_here(storage, keys, batch_size, max_retries, threads)
    yield pa.RecordBatch.from_pylist([{"deleted": out.deleted, "failed": out.failed, "batches": out.batches,
                                       "sample": json.dumps(out.failures),
                                       "requests": json.dumps(requests.since(before))}], schema=_OUTCOME_SCHEMA)


def _delete_keys_here(storage: Storage, keys: list[str], batch_size: int, max_retries: int, threads: int
                      ) -> DeleteOutcome:
    chunks = [keys[i : i + batch_size] for i in range(0, len(keys), batch_size)]
    out = DeleteOutcome()
    fn = functools.partial(_delete_batch, storage, max_retries)
    if threads > 1 and len(chunks) > 1:
        with ThreadPoolExecutor(max_workers=min(threads, len(chunks))) as pool:
            for c, o in zip(chunks, pool.map(fn, chunks), strict=True):
                out.add(o)
                progress.advance(len(c))
    else:
        for c in chunks:
            out.add(fn(c))
            progress.advance(len(c))
    return out


def delete_keys(
    spark_or_ex: Execution | Session,
    storage: Storage,
    keys: pa.Table | DataFrame,
    n: int,
    *,
    batch_size: int,
    max_retries: int,
    what: str = "files",
    phase: str = "delete",
) -> DeleteOutcome:
    """Delete the files named by the ``path`` column of `keys` (an Arrow table, a list of keys
    or a DataFrame; `n` of them) where their number says (see the module doc).

    Raises:
        StorageError: the Spark job failed (e.g. an executor was lost); the files deleted so far
            stay deleted and a re-run finishes the work.
    """
    ex = as_execution(spark_or_ex)
    out = DeleteOutcome(requested=n)
    if n <= 0:
        return out
    # One request per batch of keys (S3 DeleteObjects takes 1,000): on an object store `auto`
    # compares estimated times; deletes rarely justify a Spark job there.
    local = isinstance(keys, pa.Table | list) and not ex.distributed(n, storage=storage,
                                                                   requests_per_item=1.0 / batch_size, phase=phase)
    if local:
        key_list = keys if isinstance(keys, list) else cast("pa.Table", keys).column("path").to_pylist()
        with ex.phase(phase, LOCAL, n, f"delete {n} {what}"):
            # `threads`, local files too: an unlink waits on the filesystem's journal, not on
            # Python (110k deletes on ext4: 5.7 s with 16 threads, 21 s with one).
            got = _delete_keys_here(storage, key_list, batch_size, max_retries, ex.limits.threads)
        out.deleted, out.failed, out.batches, out.failures = got.deleted, got.failed, got.batches, got.failures
        log.info("deleted %d of %d %s in %d batches on the driver, %d failed", out.deleted, n, what, out.batches,
                 out.failed)
        return out
    if isinstance(keys, list):
        keys = pa.table({"path": pa.array(keys, pa.string())})
    parts = ex.partitions(n, batch_size * 4)
    source = keys.select(["path"]) if isinstance(keys, pa.Table) else keys.select("path")
    rows = []
    with ex.phase(phase, DISTRIBUTED, n, f"delete {n} {what} ({parts} tasks)"):
        with executor_failures(f"the delete job for {n} {what}",
                               "files already deleted stay deleted, re-run the job to finish"):
            df = ex.map_arrow(source, functools.partial(delete_task, storage, batch_size, max_retries,
                                                        ex.limits.threads), _OUTCOME_SCHEMA, parts)
            rows = df.collect()

    for r in rows:
        out.deleted += int(r["deleted"])
        out.failed += int(r["failed"])
        out.batches += int(r["batches"])
        ex.add_executor_requests(r["requests"])
        out.failures.extend([tuple(x) for x in json.loads(r["sample"])][: max(0, _SAMPLE - len(out.failures))])
    log.info("deleted %d of %d %s in %d batches (%d tasks), %d failed", out.deleted, n, what, out.batches, parts,
             out.failed)
    return out


def delete_on_driver(storage: Storage, keys: list[str], *, batch_size: int, max_retries: int,
                     what: str = "files") -> DeleteOutcome:
    """Delete a small, bounded list (root files of expired versions) from the driver, in
    order (oldest first), one batch at a time."""
    out = DeleteOutcome(requested=len(keys))
    for i in range(0, len(keys), batch_size):
        out.add(_delete_batch(storage, max_retries, keys[i : i + batch_size]))
    out.requested = len(keys)
    return out
