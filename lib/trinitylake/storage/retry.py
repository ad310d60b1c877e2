"""Which storage errors a retry may cure, the one retry helper, and the typed errors callers see.

Every storage call retries through `call`: transient failures (connection resets, timeouts,
EIO-like errnos, S3 5xx/SlowDown/throttling) are retried with jittered exponential backoff
(tenacity), and what finally fails is typed (`typed_error`): "no such file / already exists"
as they are, other I/O failures as `StorageError` naming the operation and URI.
"""

from __future__ import annotations

import errno
import random
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

import tenacity

from trinitylake.errors import (
    StorageError,
    StorageFullError,
    StorageNotADirectoryError,
    StoragePermissionError,
    StorageReadOnlyError,
)

T = TypeVar("T")


def client_error_codes(exc: BaseException, follow_context: bool = True) -> tuple[set[str], set[int]]:
    """Error codes and HTTP statuses of the botocore ClientErrors in `exc`'s cause chain
    (explicit causes only when not `follow_context`: an error raised while another one was
    being handled is not caused by it)."""
    codes: set[str] = set()
    statuses: set[int] = set()
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        resp = getattr(e, "response", None)
        if isinstance(resp, dict):
            err = resp.get("Error") or {}
            if err.get("Code"):
                codes.add(str(err["Code"]))
            status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if status:
                statuses.add(int(status))
        e = e.__cause__ or (e.__context__ if follow_context else None)
    return codes, statuses


def is_precondition_failed(exc: BaseException) -> bool:
    codes, statuses = client_error_codes(exc)
    if codes or statuses:
        return "PreconditionFailed" in codes or 412 in statuses
    return "PreconditionFailed" in str(exc)


def is_conditional_conflict(exc: BaseException) -> bool:
    codes, statuses = client_error_codes(exc)
    if codes or statuses:
        return "ConditionalRequestConflict" in codes or 409 in statuses
    return "ConditionalRequestConflict" in str(exc)


# ---- transient errors and retries -------------------------------------------------------------
#: Attempts of one storage operation, the first included, while it fails transiently.
RETRY_ATTEMPTS = 5
#: Backoff before retry n (1-based): uniform in [0.5, 1.5) x min(base x 2^(n-1), max).
RETRY_BASE_DELAY_S = 0.05
RETRY_MAX_DELAY_S = 2.0

_TRANSIENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("EIO", "EAGAIN", "EBUSY", "ETIMEDOUT", "ECONNRESET", "ECONNABORTED", "ECONNREFUSED", "EPIPE",
                 "ENETDOWN", "ENETUNREACH", "ENETRESET", "EHOSTUNREACH", "EREMOTEIO")
    if hasattr(errno, name)
)
# S3 error codes and HTTP statuses that mean "try again" (AWS: SlowDown is a 503).
_TRANSIENT_S3_CODES = frozenset({
    "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "ThrottlingException",
    "TooManyRequestsException", "RequestLimitExceeded", "BandwidthLimitExceeded", "EC2ThrottledException",
    "500", "502", "503", "504",
})
#: HTTP statuses that mean "try again", for every S3 client (botocore's errors here, obstore's in
#: `object_io.as_builtin`).
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Network errors of botocore/aiohttp/fsspec that are not OSErrors, by class name.
_TRANSIENT_CLASS_NAMES = frozenset({
    "EndpointConnectionError", "ConnectionClosedError", "ReadTimeoutError", "ConnectTimeoutError",
    "HTTPClientError", "ResponseStreamingError", "IncompleteReadError", "FSTimeoutError", "ServerDisconnectedError",
    "ClientOSError", "ClientPayloadError",
})
# Errors from these libraries are I/O failures even when they are not OSErrors.
_IO_ERROR_MODULES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "urllib3", "fsspec")


def is_transient(exc: BaseException) -> bool:
    """True for errors that a retry may cure: connection resets and timeouts, EIO/EBUSY-like
    errnos, S3 5xx, SlowDown and throttling. Missing or existing files, permission errors and
    S3 412/409 (lost or contended conditional writes, handled by `create_exclusive`) are not."""
    if isinstance(exc, FileNotFoundError | FileExistsError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    codes, statuses = client_error_codes(exc, follow_context=False)
    if codes or statuses:
        return bool(codes & _TRANSIENT_S3_CODES or statuses & TRANSIENT_STATUSES)
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if any(c.__name__ in _TRANSIENT_CLASS_NAMES for c in type(exc).__mro__):
        return True
    return isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS


# Errors that answer the question asked (no such file, already exists, not a file): callers
# handle them, they are never retried nor wrapped.
_NOT_TYPED = (FileNotFoundError, FileExistsError, IsADirectoryError, StorageError)

# OS errors an operator fixes outside our code: each gets its own type and a plain reason, so
# the one line a command prints says what is wrong with which path (not errno prose and a
# repeated path). ENOTDIR stays a NotADirectoryError (its type subclasses it) for the callers
# that treat "a file where a folder should be" as "nothing there".
# Storage operations as an operator reads them in an error line.
_OP_WORDS = {"create_exclusive": "create", "exists": "check", "info": "stat", "list_dirs": "list",
             "delete_many": "delete"}
_OS_ERRORS: dict[int, tuple[type[StorageError], str]] = {
    errno.ENOTDIR: (StorageNotADirectoryError, "a folder on its path is a file, not a directory"),
    errno.EROFS: (StorageReadOnlyError, "the file system is read-only"),
    errno.ENOSPC: (StorageFullError, "no space left on the device"),
    errno.EDQUOT: (StorageFullError, "the disk quota is exceeded"),
    errno.EACCES: (StoragePermissionError, "permission denied"),
    errno.EPERM: (StoragePermissionError, "operation not permitted"),
}


def _is_io_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) or type(exc).__module__.startswith(_IO_ERROR_MODULES)


def typed_error(op: str, uri: str, exc: BaseException, attempts: int) -> BaseException:
    """The error a caller sees for a failed operation: the "no such file / already exists /
    not a file" errors and StorageError as they are, other I/O errors as StorageError
    (StoragePermissionError for 403/EACCES) naming the operation and URI, with the original
    errno and as the cause; anything else (programming errors) unchanged."""
    if isinstance(exc, _NOT_TYPED) or not _is_io_error(exc):
        return exc
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    code = exc.errno if isinstance(exc, OSError) else None
    known = _OS_ERRORS.get(code) if code is not None else None
    if known is not None:
        cls, reason = known
        typed = cls(f"cannot {_OP_WORDS.get(op, op)} {uri}{tries}: {reason}")
        typed.errno = code
        return typed
    codes, statuses = client_error_codes(exc, follow_context=False)
    denied = isinstance(exc, PermissionError) or "AccessDenied" in codes or 403 in statuses
    err = (StoragePermissionError if denied else StorageError)(
        f"storage {op} of {uri} failed{tries}: {type(exc).__name__}: {exc}")
    err.errno = getattr(exc, "errno", None)
    return err


def backoff_seconds(attempt: int) -> float:
    """Pause after failed attempt `attempt` (1-based), jittered so that retrying clients spread."""
    return min(RETRY_BASE_DELAY_S * 2 ** (attempt - 1), RETRY_MAX_DELAY_S) * (0.5 + random.random())


def _reraise(err: BaseException, cause: BaseException) -> NoReturn:
    if err is cause:
        raise err
    raise err from cause


def call(attempt: Callable[[int], T], *, fail: Callable[[BaseException, int], BaseException] | None = None,
         retry_on: Callable[[BaseException], bool] = is_transient, attempts: int | None = None) -> T:
    """``attempt(n)`` for n = 1, 2, ... until it returns or raises an error `retry_on` does not
    accept, at most `attempts` (default `RETRY_ATTEMPTS`) times, pausing `backoff_seconds`
    between attempts. The final error goes through ``fail(error, attempts_made)`` (e.g. to type
    it); `attempt` gets its number so that a retry can tell that an earlier attempt may have
    taken effect. The first attempt is a plain call: the policy (tenacity) only comes in once
    something failed, so the common case costs nothing (storage calls are per file)."""
    limit = RETRY_ATTEMPTS if attempts is None else attempts
    try:
        return attempt(1)
    except Exception as e:
        if limit <= 1 or not retry_on(e):
            _reraise(fail(e, 1) if fail else e, e)
    made = [1]

    def again() -> T:
        made[0] += 1
        return attempt(made[0])

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(limit - 1),
        wait=lambda state: backoff_seconds(state.attempt_number + 1),
        retry=tenacity.retry_if_exception(retry_on),
        reraise=True,
    )
    time.sleep(backoff_seconds(1))
    try:
        return retrying(again)
    except Exception as e:
        _reraise(fail(e, made[0]) if fail else e, e)
