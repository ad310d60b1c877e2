"""Typed errors of the whole product.

Every error names the file, version, key or option it is about, so that a person reading a
failed Airflow task log knows what to look at without a stack trace.
"""

from __future__ import annotations


class TrinityLakeError(Exception):
    """Root of every error this library raises on purpose."""


# ---- input validation -------------------------------------------------------------------
class ValidationError(TrinityLakeError, ValueError):
    """An argument or input is invalid."""


class InvalidNameError(ValidationError):
    """A namespace, table or view name breaks the naming rules."""


class InvalidURIError(ValidationError):
    """A storage URI cannot be normalized (e.g. it contains `..`)."""


class ConfigError(ValidationError):
    """A job configuration key is unknown or has a bad value."""


# ---- lookups ---------------------------------------------------------------------------
class NotFoundError(TrinityLakeError):
    """Something that was asked for does not exist."""


class LakehouseNotFoundError(NotFoundError):
    """No root node file exists under the lakehouse URI."""


class ObjectNotFoundError(NotFoundError):
    """A namespace, table or view does not exist."""


class VersionNotFoundError(NotFoundError):
    """A version is expired, in the future, or otherwise not available."""


class VersionExpiredError(VersionNotFoundError):
    """A version is below the lakehouse's ``oldest_retained_version``: an expiration committed
    it as expired (its files may be deleted at any moment), so nothing may reference it again."""


class SnapshotNotFoundError(NotFoundError):
    """An exported snapshot name is unknown."""


class AlreadyExistsError(TrinityLakeError):
    """An object that is created already exists."""


# ---- format ----------------------------------------------------------------------------
class CorruptNodeError(TrinityLakeError):
    """A node file cannot be read as a TrinityLake node (truncated, wrong schema, ...)."""


class CorruptDefinitionError(TrinityLakeError):
    """An object definition (.binpb) file cannot be parsed."""


class NodeLayoutError(TrinityLakeError, ValueError):
    """A node cannot be written in the spec layout (more keys than the tree order allows, or
    child pointers that do not match its keys): a bug in the writer, never in the input."""


class UndecodableKeyError(CorruptNodeError):
    """A key in the tree is neither in our encoding nor in the Java reference's.

    `keys` names them; `listed` holds what the listing found besides them, so a caller can
    still show the rest of the lakehouse."""

    def __init__(self, message: str, keys: list[str] | None = None, listed: list | None = None):
        super().__init__(message)
        self.keys = list(keys or [])
        self.listed = list(listed or [])


class UnsupportedVersionError(TrinityLakeError):
    """The lakehouse uses a format major version this library does not support."""


# ---- transactions ----------------------------------------------------------------------
class CommitConflictError(TrinityLakeError):
    """The root file of the next version already exists: another writer won the race."""


class TransactionConflictError(TrinityLakeError):
    """A transaction cannot be rebased over concurrent commits under its isolation level."""


class TransactionExpiredError(TrinityLakeError):
    """A transaction is past its expire_at and may no longer commit."""


class TransactionClosedError(TrinityLakeError):
    """A transaction was already committed or rolled back."""


# ---- maintenance -----------------------------------------------------------------------
class UnsafeOperationError(TrinityLakeError):
    """A destructive job refused to run because a safety guard would be violated."""


class ControlTableError(TrinityLakeError):
    """The control (audit) table is missing, not a Delta table, or has an incompatible schema."""


# ---- the catalog server ------------------------------------------------------------------
class AddressUnavailableError(TrinityLakeError, OSError):
    """The catalog server cannot listen on its address (taken, not this machine's, not
    permitted): the machine's state, not a bad setting, so the CLI exits 1, not 2."""


class StorageError(TrinityLakeError, OSError):
    """A storage operation failed permanently (or transiently more often than its retries allow).

    Also an OSError, with the ``errno`` of the underlying error where it had one, so callers
    that handled the raw I/O error before keep working.
    """


class UnknownOutcomeError(StorageError):
    """An exclusive create was retried, the file now exists, and its bytes cannot be read back:
    an earlier attempt of ours may have created it, or another writer did. Callers must treat
    the write as possibly done (a commit keeps every file its root could reference)."""


class StoragePermissionError(StorageError, PermissionError):
    """Storage refused the operation (EACCES, S3 403 AccessDenied): never retried."""


class StorageNotADirectoryError(StorageError, NotADirectoryError):
    """A folder on the path is a file (ENOTDIR), e.g. a lakehouse URI naming a file."""


class StorageReadOnlyError(StorageError):
    """The file system is mounted read-only (EROFS): nothing can be written there."""


class StorageFullError(StorageError):
    """No space left on the device, or the disk quota is spent (ENOSPC, EDQUOT)."""
