"""The REST protocol's view endpoints, over `trinitylake.iceberg.views`.

``GET/POST /v1/{prefix}/namespaces/{ns}/views`` (list, create), ``HEAD/GET/POST/DELETE
.../views/{view}`` (exists, load, replace, drop), ``POST .../namespaces/{ns}/register-view`` and
``POST /v1/{prefix}/views/rename``. A view reads as of the request's time travel like a table;
writes go to the latest version. The view builder's refusals answer 400 with Java's exception
type (``IllegalArgumentException``, ``ValidationException``), which Iceberg's client rethrows
as that type.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from pydantic import Field
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchViewError

from trinitylake.iceberg import view_metadata, views
from trinitylake.rest_catalog.call import Call, Result
from trinitylake.rest_catalog.errors import RestError, bad_request
from trinitylake.rest_catalog.models import Body, RenameTable, TableIdent

NAMESPACE_SEPARATOR = "\x1f"


class CreateView(Body):
    name: str
    location: str | None = None
    view_schema: dict[str, Any] = Field(alias="schema")
    view_version: dict[str, Any] = Field(alias="view-version")
    properties: dict[str, str] = Field(default_factory=dict)


class CommitView(Body):
    identifier: TableIdent | None = None
    requirements: list[dict[str, Any]] = Field(default_factory=list)
    updates: list[dict[str, Any]] = Field(default_factory=list)


class RegisterView(Body):
    name: str
    metadata_location: str = Field(alias="metadata-location")


RenameView = RenameTable

#: Java's exception type of each builder refusal (its client rethrows IllegalArgumentException as such).
_JAVA_TYPES: tuple[tuple[type[Exception], str], ...] = (
    (view_metadata.ViewArgumentError, "IllegalArgumentException"),
    (view_metadata.ViewStateError, "IllegalStateException"),
    (view_metadata.ViewValidationError, "ValidationException"),
)


def _java_errors(handler: Callable[[Call], Result]) -> Callable[[Call], Result]:
    @wraps(handler)
    def run(call: Call) -> Result:
        try:
            return handler(call)
        except ValueError as e:
            for kind, name in _JAVA_TYPES:
                if isinstance(e, kind):
                    raise RestError(400, name, str(e)) from e
            raise

    return run


def _namespace(text: str) -> str:
    parts = text.split(NAMESPACE_SEPARATOR)
    if len(parts) != 1 or not parts[0]:
        raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(parts)} (the lakehouse's namespaces are one level)")
    return parts[0]


def _view(call: Call) -> tuple[str, str]:
    parts = call.path["namespace"].split(NAMESPACE_SEPARATOR)
    if len(parts) != 1 or not parts[0]:
        raise NoSuchViewError(f"View does not exist: {'.'.join(parts)}.{call.path['view']}")
    return parts[0], call.path["view"]


def _ident(ident: TableIdent) -> tuple[str, str]:
    if len(ident.namespace) != 1 or not ident.namespace[0]:
        raise bad_request(f"namespace {ident.namespace!r}: the lakehouse's namespaces are one level (one non-empty name)")
    return ident.namespace[0], ident.name


@_java_errors
def list_views(call: Call) -> Result:
    ns = _namespace(call.path["namespace"])
    return {"identifiers": [{"namespace": [ns], "name": v} for v in views.list_views(call.catalog, ns)]}


@_java_errors
def create_view(call: Call) -> Result:
    body = call.body
    assert isinstance(body, CreateView)
    ns = _namespace(call.path["namespace"])
    loaded = views.create_view(call.catalog, ns, body.name, body.view_schema, body.view_version, body.location,
                               body.properties)
    return loaded.result()


@_java_errors
def register_view(call: Call) -> Result:
    body = call.body
    assert isinstance(body, RegisterView)
    ns = _namespace(call.path["namespace"])
    return views.register_view(call.catalog, ns, body.name, body.metadata_location).result()


@_java_errors
def load_view(call: Call) -> Result:
    return views.load_view(call.catalog, *_view(call)).result()


@_java_errors
def view_exists(call: Call) -> Result:
    ns, name = _view(call)
    if not views.view_exists(call.catalog, ns, name):
        raise NoSuchViewError(f"View does not exist: {ns}.{name}")
    return None


@_java_errors
def replace_view(call: Call) -> Result:
    body = call.body
    assert isinstance(body, CommitView)
    ns, name = _view(call)
    if body.identifier is not None and (body.identifier.namespace, body.identifier.name) != ([ns], name):
        raise bad_request(f"the body names view {'.'.join(body.identifier.namespace)}.{body.identifier.name}, "
                          f"the path {ns}.{name}")
    return views.replace_view(call.catalog, ns, name, body.requirements, body.updates).result()


@_java_errors
def drop_view(call: Call) -> Result:
    views.drop_view(call.catalog, *_view(call))
    return None


@_java_errors
def rename_view(call: Call) -> Result:
    body = call.body
    assert isinstance(body, RenameTable)
    views.rename_view(call.catalog, *_ident(body.source), *_ident(body.destination))
    return None


def endpoints() -> list[str]:
    """The view endpoints `/v1/config` advertises."""
    ns, vw = "/v1/{prefix}/namespaces/{namespace}", "/v1/{prefix}/namespaces/{namespace}/views/{view}"
    return [f"GET {ns}/views", f"POST {ns}/views", f"GET {vw}", f"HEAD {vw}", f"POST {vw}", f"DELETE {vw}",
            f"POST {ns}/register-view", "POST /v1/{prefix}/views/rename"]
