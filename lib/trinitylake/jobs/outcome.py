"""The job's outcome as a file, for the orchestrator that ran it (Airflow).

``spark-submit`` hands its caller one thing: an exit code. Where ``TLAKE_RESULT_FILE`` names a
path (the Airflow operator sets it when the driver runs on the worker: ``local[...]`` masters
and client mode), :func:`main` runs the job as `trinitylake.jobs.runner.main` does and then
writes one JSON object there::

    {"job": "export", "exit_code": 1, "status": "failed",
     "error_type": "AlreadyExistsError", "error": "an export named ...",
     "permanent": true, "result": {...the JobResult, as printed on stdout...}}

``permanent`` says whether running the job again could change anything: a typed error about
the input or the lakehouse (a missing lakehouse, an export name that exists, a refused unsafe
operation, a corrupt node, a bad option, storage that refuses or is full) is permanent; a
storage failure that outlived its retries, a commit conflict, and anything untyped (Spark, the
JVM, memory) are transient. The operator fails permanent errors without retries and lets
transient ones retry, and pushes ``result`` to XCom.

The entry files ``jobs/<job>.py`` reach this through `trinitylake.jobs.entry`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from trinitylake import errors
from trinitylake.redact import redact_text

_P = ParamSpec("_P")
_R = TypeVar("_R")

RESULT_FILE_ENV = "TLAKE_RESULT_FILE"

#: Errors a re-run may get past: another writer's commit won, a transaction was rebased away.
_TRANSIENT: tuple[type[BaseException], ...] = (errors.CommitConflictError, errors.TransactionConflictError)
#: Storage errors an operator fixes (a permission, a file on the path, read-only, full): a
#: re-run meets them again.
_FIXED_BY_OPERATOR: tuple[type[BaseException], ...] = (
    errors.StoragePermissionError,
    errors.StorageNotADirectoryError,
    errors.StorageReadOnlyError,
    errors.StorageFullError,
)


def is_permanent(exc: BaseException | None, exit_code: int) -> bool:
    """True when a re-run of the same job cannot succeed without someone changing something."""
    if exc is None:
        # A configuration error before the job started; or a partial run (exit 3): a damaged
        # table is met again by a re-run until someone repairs it.
        return exit_code in (2, 3)
    if isinstance(exc, _FIXED_BY_OPERATOR):
        return True
    if isinstance(exc, (errors.StorageError, *_TRANSIENT)):
        return False
    return isinstance(exc, errors.TrinityLakeError)


def _cause(exc: BaseException | None) -> BaseException | None:
    """The error a job failed with (`JobFailedError` wraps it as its cause). By name: the
    runner imports the Spark engine, which this module leaves to :func:`main`."""
    if exc is not None and type(exc).__name__ == "JobFailedError" and exc.__cause__ is not None:
        return exc.__cause__
    return exc


#: The error type an outcome names without an exception: a configuration error (exit 2), a
#: partial run (exit 3: the job finished, skipping what ``result.details["partial"]`` says).
_NO_CAUSE = {2: "ConfigError", 3: "PartialRun"}


def _partial_text(result: object, exit_code: int) -> str | None:
    notes = (getattr(result, "details", None) or {}).get("partial") or []
    if exit_code != 3 or not notes:
        return None
    more = f" (+{len(notes) - 1} more)" if len(notes) > 1 else ""
    return redact_text(f"partial: {notes[0]}{more}")


def write_outcome(path: str, job: str, exit_code: int, result: object, exc: BaseException | None) -> None:
    """Write the outcome object to `path` (atomically: a reader never sees half of it)."""
    cause = _cause(exc)
    if result is None and exc is not None:
        result = getattr(exc, "result", None)
    outcome = {
        "job": job,
        "exit_code": exit_code,
        "status": getattr(result, "status", None) or ("failed" if exit_code else "succeeded"),
        "error_type": type(cause).__name__ if cause is not None else _NO_CAUSE.get(exit_code),
        "error": redact_text(str(cause)) if cause is not None else _partial_text(result, exit_code),
        "permanent": bool(exit_code) and is_permanent(cause, exit_code),
        "result": result.to_dict() if hasattr(result, "to_dict") else None,
    }
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(outcome, f, default=str)
    os.replace(tmp, path)


def main(job: str, argv: Sequence[str]) -> int:
    """`trinitylake.jobs.runner.main`, plus the outcome file when ``TLAKE_RESULT_FILE`` is set."""
    # Imported when a job runs: the runner imports the Spark engine, which importing this module
    # (`jobs.entry`'s start-up) does not pay for.
    from trinitylake import job_flags
    from trinitylake.jobs import runner

    path = os.environ.get(RESULT_FILE_ENV, "").strip()
    if not path:
        return runner.main(job, argv)
    seen = _Seen()
    run_job, parse_job_args = runner.run_job, job_flags.parse_job_args
    # The runner's main looks both up on their modules at call time: these wrappers see the
    # config error (the runner prints it and exits 2) or the result without a second copy of
    # its error handling.
    runner.run_job = seen.watch(run_job, record=True)
    job_flags.parse_job_args = seen.watch(parse_job_args)
    try:
        code = runner.main(job, argv)
    except SystemExit as e:  # --help
        code = e.code if isinstance(e.code, int) else 1
        if code:
            write_outcome(path, job, code, None, seen.error)
        raise
    except BaseException as e:  # untyped: the runner lets it through (a traceback follows)
        write_outcome(path, job, 1, None, seen.error if seen.error is not None else e)
        raise
    finally:
        runner.run_job, job_flags.parse_job_args = run_job, parse_job_args
    write_outcome(path, job, code, seen.result, seen.error)
    return code


@dataclass
class _Seen:
    """What the runner's wrapped calls saw in `main`: the job's result, or the error one raised."""

    result: object = None
    error: BaseException | None = None

    def watch(self, fn: Callable[_P, _R], *, record: bool = False) -> Callable[_P, _R]:
        """`fn`, noting the error it raises (and with `record`, the value it returns)."""

        def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                out = fn(*args, **kwargs)
            except BaseException as e:
                self.error = e
                raise
            if record:
                self.result = out
            return out

        return call
