"""What a route handler is given and what it answers: one module below both the app and the
route modules (views), so that neither imports the other for these types."""

from __future__ import annotations

from dataclasses import dataclass

import pydantic
from starlette.responses import Response

from trinitylake.iceberg import TrinityLakeCatalog
from trinitylake.rest_catalog.auth import Principal

Json = dict[str, object]
Result = Json | str | Response | None  # a JSON object, JSON text, a whole response, or nothing (204)


@dataclass(frozen=True)
class Call:
    """One request as a handler sees it: path and query parameters, caller, parsed body."""

    path: dict[str, str]
    query: dict[str, str]
    principal: Principal
    body: pydantic.BaseModel | None
    catalog: TrinityLakeCatalog
    if_none_match: str | None = None  # the request's If-None-Match header (load-table's ETag)
    travel: tuple[str, str] | None = None  # the time travel asked (None: the latest version)
