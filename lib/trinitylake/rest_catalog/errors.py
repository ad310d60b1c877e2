"""The REST protocol's error model: every failure is ``{"error": {"message", "type", "code"}}``
with the spec's HTTP status, never a traceback. Messages pass through the process's redaction
(`trinitylake.redact`), so a credential a storage library quotes never leaves the server."""

from __future__ import annotations

import json
import logging

import pydantic
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    ForbiddenError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    TableAlreadyExistsError,
)
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from starlette.responses import Response

from trinitylake.errors import (
    AlreadyExistsError,
    NotFoundError,
    TrinityLakeError,
    ValidationError,
)
from trinitylake.iceberg import ReadOnlyCatalogError
from trinitylake.iceberg.catalog import MetadataFileNotFoundError
from trinitylake.redact import redact_text

log = logging.getLogger(__name__)

MAX_MESSAGE = 2000


class RestError(Exception):
    """An answer of the error model: HTTP `status`, the spec's exception `kind` and a message."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def bad_request(message: str) -> RestError:
    return RestError(400, "BadRequestException", message)


def error_response(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"message": redact_text(message)[:MAX_MESSAGE], "type": kind, "code": status}}
    return Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)


def _validation_message(e: pydantic.ValidationError) -> str:
    """What was wrong with a request body, by field (the values themselves are not quoted)."""
    parts = []
    for err in e.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = f" (and {e.error_count() - 5} more)" if e.error_count() > 5 else ""
    return "invalid request: " + "; ".join(parts) + more


#: The spec's HTTP status and exception type of each error a handler may raise, first match wins
#: (pydantic's ValidationError is a ValueError: it comes before the plain bad requests).
_BY_TYPE: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], int, str], ...] = (
    (MetadataFileNotFoundError, 404, "NotFoundException"),  # as Iceberg's reference catalog answers it
    (NoSuchTableError, 404, "NoSuchTableException"),
    (NoSuchNamespaceError, 404, "NoSuchNamespaceException"),
    (NoSuchViewError, 404, "NoSuchViewException"),
    ((TableAlreadyExistsError, NamespaceAlreadyExistsError, AlreadyExistsError), 409, "AlreadyExistsException"),
    (NamespaceNotEmptyError, 409, "NamespaceNotEmptyException"),
    (CommitFailedException, 409, "CommitFailedException"),
    (CommitStateUnknownException, 500, "CommitStateUnknownException"),
    ((ReadOnlyCatalogError, ForbiddenError), 403, "ForbiddenException"),
    (NotFoundError, 404, "NotFoundException"),
)


def classify(e: BaseException) -> tuple[int, str, str]:
    """(HTTP status, the spec's exception type, message) of an exception a handler raised."""
    if isinstance(e, RestError):
        return e.status, e.kind, e.message
    for types, status, kind in _BY_TYPE:
        if isinstance(e, types):
            return status, kind, str(e)
    if isinstance(e, pydantic.ValidationError):
        return 400, "BadRequestException", _validation_message(e)
    if isinstance(e, ValidationError | IcebergValidationError | ValueError):
        return 400, "BadRequestException", str(e)
    if isinstance(e, NotImplementedError):
        return 406, "UnsupportedOperationException", str(e) or "not supported by this catalog"
    if isinstance(e, TrinityLakeError):
        return 500, type(e).__name__, str(e)
    if isinstance(e, OSError):  # its text names the server's files: the log has it, the client does not
        return 500, "InternalServerError", f"{type(e).__name__}: a storage operation failed (see the server's log)"
    return 500, "InternalServerError", f"{type(e).__name__}: {e}"


def exception_response(e: BaseException) -> Response:
    status, kind, message = classify(e)
    if status >= 500:
        log.error("request failed: %s: %s", kind, message, exc_info=e)
    headers = {"WWW-Authenticate": 'Bearer realm="trinitylake"'} if status == 401 else None
    return error_response(status, kind, message, headers)
