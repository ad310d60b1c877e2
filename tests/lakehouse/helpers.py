"""Small helpers shared by the lakehouse tests."""

from __future__ import annotations

import os
import re

ROOT_RE = re.compile(r"^_[01]{64}\.arrow$")


def root_name(version: int) -> str:
    return "_" + format(version, "064b")[::-1] + ".arrow"


def local_versions(uri: str) -> list[int]:
    """Versions whose root files exist in a local lakehouse directory (independent of the library)."""
    return sorted(int(f[1:65][::-1], 2) for f in os.listdir(uri) if ROOT_RE.match(f))


def storage_versions(storage) -> list[int]:
    _, files = storage.list_dirs("")
    return sorted(int(f.path[1:65][::-1], 2) for f in files if ROOT_RE.match(f.path))


def local_dir(lh_or_uri) -> str:
    """Local directory of a lakehouse (its URI is ``file:///...``)."""
    uri = lh_or_uri if isinstance(lh_or_uri, str) else lh_or_uri.uri
    return uri[len("file://") :] if uri.startswith("file://") else uri
