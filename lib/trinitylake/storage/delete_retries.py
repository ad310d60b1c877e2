"""Deleting a batch of files with bounded retries. Pure Python over `Storage`; Spark
executors call it on their share of a delete plan, tests call it directly.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence

from trinitylake.storage import Storage

log = logging.getLogger(__name__)


def delete_with_retries(
    storage: Storage,
    paths: Sequence[str],
    *,
    max_retries: int = 5,
    base_delay_s: float = 0.2,
    max_delay_s: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, list[tuple[str, str]]]:
    """Delete `paths` (one bulk request per 1,000 keys on S3); retry the failed ones with
    jittered exponential backoff, at most `max_retries` times. Missing files count as deleted,
    so a re-run after a crash is harmless.

    Returns:
        ``(deleted, failures)``: the number of files now gone, and ``(path, error)`` for the
        ones that still failed after the last retry.
    """
    pending = list(dict.fromkeys(paths))
    if not pending:
        return 0, []
    total = len(pending)
    attempt = 0
    while True:
        try:
            failures = storage.delete(pending)
        except Exception as e:  # noqa: BLE001 - a whole request failed (network, throttling)
            failures = [(p, f"{type(e).__name__}: {e}") for p in pending]
        if not failures:
            return total, []
        if attempt >= max_retries:
            return total - len(failures), failures
        attempt += 1
        delay = min(max_delay_s, base_delay_s * 2 ** (attempt - 1)) * (0.5 + random.random())
        log.info("retrying %d failed deletes in %.2fs (attempt %d of %d): %s", len(failures), delay, attempt,
                 max_retries, failures[0][1])
        sleep(delay)
        pending = [p for p, _ in failures]
