"""One result type for every job: the CLI, the logs, the control table and Airflow's XCom
all render the same object."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trinitylake.redact import redact_value

#: Counts of things other than files (versions, snapshots, tables, refs, re-planned commits):
#: their metric keeps the count's name; every other count counts files (``files_<name>``).
NOT_FILE_COUNTS = ("versions_", "snapshots_", "tables", "refs_", "conflicts_")


@dataclass
class JobResult:
    """Outcome of one job run.

    `counts` holds file counts (listed, reachable, candidates, deleted, failed, copied, ...),
    `bytes` byte totals under the same names, `seconds` the wall time of each phase,
    `requests` the object-store requests the run sent, by kind (get, put, list, head, delete,
    other), and the bytes they moved (driver and executors together; see
    `trinitylake.storage.requests`).
    """

    job: str
    run_id: str
    lakehouse: str
    status: str = "running"  # running | succeeded | dry_run | failed
    dry_run: bool = False
    txn_seq: int | None = None
    version_before: int | None = None
    version_after: int | None = None
    plan_location: str | None = None
    output_location: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with credentials redacted (it goes to logs, `--json`, XCom and
        ``result.json``)."""
        return redact_value(asdict(self))

    def metrics(self) -> dict[str, float]:
        """Flat numeric map for the control table's `metrics` column."""
        m: dict[str, float] = {}
        for k, v in self.counts.items():
            m[k if k.startswith(NOT_FILE_COUNTS) else f"files_{k}"] = float(v)
        for k, v in self.bytes.items():
            m[f"bytes_{k}"] = float(v)
        for k, s in self.seconds.items():
            m[f"seconds_{k}"] = float(s)
        if any(self.requests.values()):
            from trinitylake.storage import requests  # not at import: the CLI's start-up skips storage

            for k, n in self.requests.items():
                # bytes_read / bytes_written keep their names: formatted as bytes.
                m[k if k.startswith("bytes_") else f"requests_{k}"] = float(n)
            m["requests_total"] = float(requests.total_requests(self.requests))
        return m
