"""The audit context of a lakehouse handle: which command its audit rows name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AuditContext:
    """Who writes through a lakehouse handle: the command and its (redacted) arguments that
    its audit rows name when a commit does not name its own. Given when the handle is opened
    (``Lakehouse.open(..., context=...)``) and fixed for its life."""

    command: str = "api"
    arguments: Mapping[str, Any] = field(default_factory=dict)


#: A handle opened by library code: its commits name their operations.
API = AuditContext()
