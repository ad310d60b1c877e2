"""Where a maintenance run keeps its plan and results, and how they are written.

Every run of walk, expire and orphans writes under ``<lakehouse>/_maintenance/<job>/<run_id>/``
(a folder the format does not own, so orphan cleanup never touches it):

* ``plan.json``: what the run decided (versions, cutoffs, policy, counts), written before it
  acts, so a dry run and a real run leave the same plan;
* ``candidates/``: Parquet of the files it would delete (path, kind, size, ...);
* ``result.json``: the final :class:`~trinitylake.runs.results.JobResult`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from trinitylake.redact import redact_value
from trinitylake.storage import Storage

MAINTENANCE_DIR = "_maintenance"


def run_dir(job: str, run_id: str) -> str:
    """Folder of one run, relative to the lakehouse root."""
    return f"{MAINTENANCE_DIR}/{job}/{run_id}"


def write_json(storage: Storage, path: str, doc: Mapping[str, object]) -> str:
    """Write `doc` as indented JSON (replacing an earlier file of a re-run); returns its URI.

    Credentials in `doc` (options a plan or result quotes) are redacted first."""
    storage.write(path, (json.dumps(redact_value(doc), indent=2, sort_keys=True, default=str) + "\n").encode())
    return storage.uri(path)


def read_json(storage: Storage, path: str) -> dict[str, Any]:
    return json.loads(storage.read(path))


def now_ms() -> int:
    return int(time.time() * 1000)
