"""Why a location cannot be reached, said plainly: what an error at a storage location means
on its kind of store (a file where a local folder should be; S3 without credentials, or a
bucket that does not exist). Light to import: the CLI asks it only when a command failed."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from trinitylake.errors import NotFoundError, StoragePermissionError, ValidationError
from trinitylake.storage.uri import parse_uri


def cause_at(what: str, uri: str, options: Mapping[str, Any], error: BaseException) -> BaseException | None:
    """What `error` means at the location `uri` (the `what` a command names, with its storage
    `options`), as a typed error the user can act on, or None: a local folder that is a file;
    on S3 no credentials anywhere, or a bucket that does not exist."""
    parsed = parse_uri(uri)
    if parsed.scheme == "file":
        path = parsed.path if parsed.path.startswith("/") else "/" + parsed.path
        while path and not os.path.exists(path):
            path = os.path.dirname(path)
        if path and os.path.isfile(path):
            return ValidationError(f"the {what} {uri} cannot be created or read: {path} is a file, not a folder")
        return None
    if parsed.scheme != "s3":
        return None
    chain = " ".join(str(e) for e in _chain(error))
    # No credentials anywhere: obstore then asks the instance metadata service (and is refused),
    # botocore says "Unable to locate credentials"; both reach the user as "permission denied".
    if "169.254.169.254" in chain or "unable to locate credentials" in chain.lower() or (
            "credential" in chain.lower() and isinstance(error, PermissionError)):
        return StoragePermissionError(
            f"cannot reach the {what} {uri}: no S3 credentials are configured (none in the storage options, no "
            f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE, and no instance role answered)"
            + ("" if _endpoint(options) else "; nor an endpoint: TLAKE_S3_ENDPOINT_URL or --storage-option "
               "endpoint_url=... (AWS S3 itself otherwise)"))
    if _bucket_missing(uri, options):
        where = _endpoint(options) or "AWS S3"
        return NotFoundError(f"the {what} {uri} cannot exist: bucket {parsed.authority!r} does not exist at {where}")
    return None


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = error
    while e is not None and e not in seen and len(seen) < 8:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _endpoint(options: Mapping[str, Any]) -> str | None:
    ck = options.get("client_kwargs")
    return (options.get("endpoint_url") or (ck.get("endpoint_url") if isinstance(ck, dict) else None)
            or os.environ.get("TLAKE_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL") or None)


def _bucket_missing(uri: str, options: Mapping[str, Any]) -> bool:
    """True when S3 answers that the bucket of `uri` does not exist (HEAD bucket: 404)."""
    # Imported here, on this failure path only: storage.storage loads every backend's engine.
    from trinitylake.storage.storage import Storage

    bucket = parse_uri(uri).authority
    fs = Storage(f"s3://{bucket}", dict(options)).fs
    try:
        fs.call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError:
        return True
    except Exception:  # noqa: BLE001 - any other answer: not a missing bucket
        return False
    return False
