"""The Iceberg REST catalog over a lakehouse: a Starlette application (`build_app`).

Stateless: every request reads or commits the lakehouse through a `TrinityLakeCatalog` (one
handle per worker thread, whose caches hold only immutable files; each request a shallow copy
naming its client in the audit rows), so any number of servers can serve one lakehouse. A commit is one lakehouse
transaction; ``POST /v1/transactions/commit`` commits all its tables in one version.

Time travel is read-only, chosen per request by a path prefix (``/v1/{prefix}/...``; a client
gets one by asking ``/v1/config?warehouse=<prefix>``) or a query parameter:

* ``version-N`` / ``?version=N``: lakehouse version N;
* ``as-of-T`` / ``?as-of=T``: the newest version created at or before T (ISO-8601 or epoch ms);
* ``export-NAME`` / ``?export=NAME``: the exported snapshot NAME;
* ``latest`` (or no prefix): the latest version, writable.

A write under time travel, or on a server started ``--read-only``, is refused with 403
(``ForbiddenException``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import functools
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

import pydantic
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from trinitylake.iceberg import TrinityLakeCatalog
from trinitylake.iceberg.table_updates import metadata_json
from trinitylake.rest_catalog import models
from trinitylake.rest_catalog import views as view_routes
from trinitylake.rest_catalog.auth import Authenticator, OAuthError, Principal
from trinitylake.rest_catalog.call import Call, Result
from trinitylake.rest_catalog.errors import RestError, bad_request, error_response, exception_response
from trinitylake.rest_catalog.group_commit import GroupCommitter
from trinitylake.rest_catalog.load_cache import LatestTables, LoadCache
from trinitylake.rest_catalog.served import served

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 8 << 20
AUDIT_COMMAND = "catalog serve"
NAMESPACE_SEPARATOR = "\x1f"
#: Threads for the handlers (every commit holds one while its group is written: more than the
#: most concurrent commits a group gathers in practice; anyio's pool, used before, had 40).
REQUEST_THREADS = 64
_PREFIX = re.compile(r"^(?:(latest)|version-(\d+)|as-of-(.+)|export-(.+))$")
_TRAVEL_PARAMS = ("version", "as-of", "export")



@dataclass(frozen=True)
class ServerSettings:
    """What a server serves, and how."""

    lakehouse: str
    storage_options: dict[str, str] = field(default_factory=dict)
    catalog_properties: dict[str, str] = field(default_factory=dict)
    control_uri: str | None = None
    audit: bool = True
    read_only: bool = False
    allow_purge: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


def _endpoints() -> list[str]:
    ns, tb = "/v1/{prefix}/namespaces/{namespace}", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"
    return ["GET /v1/{prefix}/namespaces", "POST /v1/{prefix}/namespaces", f"GET {ns}", f"HEAD {ns}",
            f"DELETE {ns}", f"POST {ns}/properties", f"GET {ns}/tables", f"POST {ns}/tables", f"GET {tb}",
            f"HEAD {tb}", f"POST {tb}", f"DELETE {tb}", f"POST {ns}/register", f"POST {tb}/metrics",
            "POST /v1/{prefix}/tables/rename", "POST /v1/{prefix}/transactions/commit", *view_routes.endpoints()]


def _namespace(text: str) -> str:
    parts = text.split(NAMESPACE_SEPARATOR)
    if len(parts) != 1 or not parts[0]:
        raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(parts)} (the lakehouse's namespaces are one level)")
    return parts[0]


def _table(call: Call) -> tuple[str, str]:
    """The table a path names. One under a nested namespace does not exist: NoSuchTable, which
    tells a Java client to try ``ns.table.snapshots`` as a metadata table of ``ns.table``."""
    parts = call.path["namespace"].split(NAMESPACE_SEPARATOR)
    if len(parts) != 1 or not parts[0]:
        raise NoSuchTableError(f"Table does not exist: {'.'.join(parts)}.{call.path['table']}")
    return parts[0], call.path["table"]


def _one_level(namespace: list[str]) -> str:
    if len(namespace) != 1 or not namespace[0]:
        raise bad_request(f"namespace {namespace!r}: the lakehouse's namespaces are one level (one non-empty name)")
    return namespace[0]


def _load_result(metadata: TableMetadata, location: str | None) -> str:
    """A LoadTableResult (``metadata-location``, ``metadata``, ``config``) as JSON text: the
    table as served, its GC disabled at the client (`trinitylake.rest_catalog.served`)."""
    head = f'"metadata-location": {json.dumps(location)}, ' if location else ""
    return f'{{{head}"metadata": {metadata_json(served(metadata))}, "config": {{}}}}'


def parse_travel(prefix: str | None, query: dict[str, str]) -> tuple[str, str] | None:
    """The time travel a request asks for: ("version" | "as-of" | "export", value), or None."""
    asked = [(k, query[k]) for k in _TRAVEL_PARAMS if query.get(k)]
    if prefix:
        m = _PREFIX.match(prefix)
        if m is None:
            raise bad_request(f"unknown catalog prefix {prefix!r}: use latest, version-N, as-of-TIME or export-NAME")
        if m.group(2) is not None:
            asked.append(("version", m.group(2)))
        elif m.group(3) is not None:
            asked.append(("as-of", m.group(3)))
        elif m.group(4) is not None:
            asked.append(("export", m.group(4)))
    if len(asked) > 1:
        raise bad_request(f"give one time travel, by prefix or query parameter, got {[k for k, _ in asked]}")
    if asked and asked[0][0] == "version" and not asked[0][1].isdigit():
        raise bad_request(f"version must be a non-negative integer, got {asked[0][1]!r}")
    return asked[0] if asked else None


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RestError(413, "RequestTooLargeException", f"request body of {declared} bytes exceeds the limit of {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RestError(413, "RequestTooLargeException", f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(model: type[pydantic.BaseModel], raw: bytes) -> pydantic.BaseModel:
    try:
        obj = json.loads(raw) if raw.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad_request(f"request body is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise bad_request("request body must be a JSON object")
    return model.model_validate(obj)


class CatalogService:
    """The handlers, over one `TrinityLakeCatalog` of the lakehouse."""

    def __init__(self, settings: ServerSettings, auth: Authenticator):
        self.settings = settings
        self.auth = auth
        props = {"lakehouse": settings.lakehouse, "audit": "true" if settings.audit else "false",
                 **{f"lakehouse.storage.{k}": v for k, v in settings.storage_options.items()},
                 **settings.catalog_properties}
        if settings.control_uri:
            props["control-uri"] = settings.control_uri
        self._props = props
        if settings.allow_purge:
            log.warning("allow_purge (--allow-purge) is ignored: a purge drops the table from the lakehouse and "
                        "keeps its files, which retained versions read (tlake tables remove-orphans collects them)")
        self._local = threading.local()
        # handlers run here through the event loop's own executor hand-over: anyio's (Starlette's
        # run_in_threadpool, with its capacity limiter and cancel scopes) was 10% of the server's
        # interpreter time with 8 writers committing
        self._threads = ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="catalog-request")
        self.loads = LoadCache(_load_result)  # load-table answers by metadata location, ETag (load_cache.py)
        # table commits: one lakehouse version per group (group_commit.py), written through a
        # catalog of the group commit's own (one lead at a time uses it: its caches stay warm)
        self.group = GroupCommitter(leader_catalog=lambda: TrinityLakeCatalog("rest", **self._props))
        self.base = self._thread_catalog()  # opened once here: a missing lakehouse fails the start
        # the loaded tables of the latest version, while it is the latest (load_cache.py); on
        # local disk its check (a stat or two) runs on the event loop, without a thread hand-over
        self.latest = LatestTables(self.base.lakehouse.storage)
        self._inline_loads = not self.base.lakehouse.storage.remote

    def _thread_catalog(self) -> TrinityLakeCatalog:
        """This worker thread's catalog: the lakehouse handle's node and root caches are not
        shared between threads."""
        cat = getattr(self._local, "catalog", None)
        if cat is None:
            cat = self._local.catalog = TrinityLakeCatalog("rest", **self._props)
        return cat

    # ---- plumbing ----------------------------------------------------------------------------
    def catalog_for(self, travel: tuple[str, str] | None, principal: Principal) -> TrinityLakeCatalog:
        """The catalog one request uses: a copy of this thread's, or a read-only one of a past version."""
        base = self._thread_catalog()
        if travel is None:
            cat = copy.copy(base)
        elif travel[0] == "version":
            cat = base.at_version(int(travel[1]))
        elif travel[0] == "as-of":
            cat = base.as_of(travel[1])
        else:
            cat = base.at_export(travel[1])
        cat.audit_command = AUDIT_COMMAND
        cat.audit_arguments = {"client": principal.name}
        return cat

    def route(self, path: str, methods: list[str], handler: Callable[[Call], Result], *, write: bool = False,
              body: type[pydantic.BaseModel] | None = None,
              inline: Callable[[Call], Result | None] | None = None) -> list[Route]:
        """`handler` at ``/v1/<path>`` and ``/v1/{prefix}/<path>``, behind authentication,
        the read-only rule, the body limit and the error model. `inline`: tried first on the
        event loop for the latest version (a few local stats at most), its None falling back
        to `handler` in a worker thread."""

        async def endpoint(request: Request) -> Response:
            try:
                principal = self.auth.authenticate(request.headers.get("authorization"))
                if principal is None:
                    raise RestError(401, "NotAuthorizedException", "missing or invalid bearer token")
                params = dict(request.path_params)
                prefix = params.pop("prefix", None)
                query = dict(request.query_params)
                travel = parse_travel(prefix, query)
                if write and self.settings.read_only:
                    raise RestError(403, "ForbiddenException", "this catalog server is read-only (started with --read-only)")
                if write and travel is not None:
                    raise RestError(403, "ForbiddenException",
                                    f"time travel ({travel[0]} {travel[1]}) is read-only: writes go to the latest version")
                parsed = _parse(body, await _read_body(request, self.settings.max_body_bytes)) if body else None
                result = None
                if inline is not None and travel is None and self._inline_loads:
                    result = inline(Call(params, query, principal, parsed, self.base,
                                         request.headers.get("if-none-match")))
                if result is None:
                    result = await asyncio.get_running_loop().run_in_executor(self._threads, functools.partial(
                        self._run, handler, params, query, principal, parsed, travel,
                        request.headers.get("if-none-match")))
            except Exception as e:  # noqa: BLE001 - every failure answers the error model
                return exception_response(e)
            if isinstance(result, Response):
                return result
            if result is None:
                return Response(status_code=204)
            if isinstance(result, str):
                return Response(result, media_type="application/json")
            return JSONResponse(result)

        return [Route(f"/v1/{path}", endpoint, methods=methods),
                Route(f"/v1/{{prefix}}/{path}", endpoint, methods=methods)]

    def _run(self, handler: Callable[[Call], Result], params: dict[str, str], query: dict[str, str],
             principal: Principal, body: pydantic.BaseModel | None, travel: tuple[str, str] | None,
             if_none_match: str | None = None) -> Result:
        return handler(Call(params, query, principal, body, self.catalog_for(travel, principal), if_none_match, travel))

    # ---- config ------------------------------------------------------------------------------
    def config(self, call: Call) -> Result:
        """The client's configuration. The server serves one lakehouse: a ``warehouse`` that is a
        time-travel prefix (``version-N``, ``as-of-TIME``, ``export-NAME``, ``latest``) becomes the
        client's prefix, and must exist now (a clear 400 here, not at first use); any other name
        (the catalog-style names Spark, Trino and Iceberg's kit configure, e.g. ``rck_warehouse``) or
        a path serves the latest version."""
        overrides: dict[str, str] = {}
        warehouse = call.query.get("warehouse", "").strip()
        if warehouse and _PREFIX.match(warehouse):
            travel = parse_travel(warehouse, {})
            if travel is not None:
                try:
                    self.catalog_for(travel, call.principal)
                except Exception as e:  # noqa: BLE001 - any failure to open it names the warehouse
                    raise bad_request(f"unknown warehouse {warehouse!r}: {e}") from None
            overrides["prefix"] = warehouse
        return {"defaults": {}, "overrides": overrides, "endpoints": _endpoints()}

    # ---- namespaces --------------------------------------------------------------------------
    def list_namespaces(self, call: Call) -> Result:
        parent = call.query.get("parent")
        names = call.catalog.list_namespaces(tuple(parent.split(NAMESPACE_SEPARATOR)) if parent else ())
        return {"namespaces": [list(n) for n in names]}

    def create_namespace(self, call: Call) -> Result:
        body = call.body
        assert isinstance(body, models.CreateNamespace)
        ns = _one_level(body.namespace)
        call.catalog.create_namespace(ns, body.properties)
        return {"namespace": [ns], "properties": body.properties}

    def load_namespace(self, call: Call) -> Result:
        ns = _namespace(call.path["namespace"])
        return {"namespace": [ns], "properties": call.catalog.load_namespace_properties(ns)}

    def namespace_exists(self, call: Call) -> Result:
        call.catalog.load_namespace_properties(_namespace(call.path["namespace"]))
        return None

    def drop_namespace(self, call: Call) -> Result:
        call.catalog.drop_namespace(_namespace(call.path["namespace"]))
        return None

    def update_namespace_properties(self, call: Call) -> Result:
        body = call.body
        assert isinstance(body, models.UpdateNamespaceProperties)
        summary = call.catalog.update_namespace_properties(_namespace(call.path["namespace"]), set(body.removals),
                                                           body.updates)
        return {"updated": summary.updated, "removed": summary.removed, "missing": summary.missing}

    # ---- tables ------------------------------------------------------------------------------
    def list_tables(self, call: Call) -> Result:
        ns = _namespace(call.path["namespace"])
        return {"identifiers": [{"namespace": [ns], "name": t} for _, t in call.catalog.list_tables(ns)]}

    def create_table(self, call: Call) -> Result:
        body = call.body
        assert isinstance(body, models.CreateTable)
        ident = (_namespace(call.path["namespace"]), body.name)
        spec = body.partition_spec or UNPARTITIONED_PARTITION_SPEC
        order = body.write_order or UNSORTED_SORT_ORDER
        if body.stage_create:
            staged = call.catalog.stage_create_table(ident, body.table_schema, body.location, spec, order, body.properties)
            return _load_result(staged.metadata, None)
        t = call.catalog.create_table(ident, body.table_schema, body.location, spec, order, body.properties)
        return _load_result(t.metadata, t.metadata_location)

    def register_table(self, call: Call) -> Result:
        body = call.body
        assert isinstance(body, models.RegisterTable)
        ident = (_namespace(call.path["namespace"]), body.name)
        t = call.catalog.register_table(ident, body.metadata_location, overwrite=body.overwrite)
        return _load_result(t.metadata, t.metadata_location)

    def load_table(self, call: Call) -> Result:
        if call.travel is not None:
            past = call.catalog.load_table(_table(call))
            return self.loads.answer(past.metadata, past.metadata_location, call.if_none_match)
        key = _table(call)
        kept = self.load_kept_table(call)
        if kept is not None:
            return kept
        view = call.catalog.lakehouse.view()
        t = call.catalog.table_in(view, *key)
        if t is None:
            raise NoSuchTableError(f"Table does not exist: {key[0]}.{key[1]} (lakehouse version {view.version})")
        self.latest.put(view.version, key, t.metadata, t.metadata_location)
        return self.loads.answer(t.metadata, t.metadata_location, call.if_none_match)

    def load_kept_table(self, call: Call) -> Result | None:
        """The latest version's table as kept (`LatestTables`), while that version is the latest
        and its metadata file exists; None: read the tree."""
        io = call.catalog.io
        if self._inline_loads:  # two stats, on the event loop
            kept = self.latest.get(_table(call))
            if kept is None or not io.new_input(kept[1]).exists():
                return None
        else:  # two requests to the store, in flight together
            kept = self.latest.get(_table(call), beside=lambda location: io.new_input(location).exists())
            if kept is None:
                return None
        return self.loads.answer(kept[0], kept[1], call.if_none_match)

    def table_exists_kept(self, call: Call) -> Result | None:
        return Response(status_code=204) if self.load_kept_table(call) is not None else None

    def table_exists(self, call: Call) -> Result:
        self.load_table(call)
        return None

    def commit_table(self, call: Call) -> Result:
        body = call.body
        assert isinstance(body, models.CommitTable)
        ident = _table(call)
        if body.identifier is not None and (body.identifier.namespace, body.identifier.name) != ([ident[0]], ident[1]):
            raise bad_request(f"the body names table {'.'.join(body.identifier.namespace)}.{body.identifier.name}, "
                              f"the path {ident[0]}.{ident[1]}")
        resp = self.group.commit(call.catalog, ident, tuple(body.requirements), tuple(body.updates))
        return self.loads.answer(resp.metadata, resp.metadata_location)  # kept for the next load, with its ETag

    def drop_table(self, call: Call) -> Result:
        ident = _table(call)
        purge = call.query.get("purgeRequested", "false").lower() == "true"
        if purge:
            # Earlier lakehouse versions still read the table's files (time travel, exports): a
            # purge drops the table from the lakehouse only; `tlake tables remove-orphans` and
            # `tlake orphans` collect the files once no retained version reaches them.
            log.info("drop of %s.%s asked to purge; its files are kept for the retained lakehouse versions "
                     "(tlake tables remove-orphans / tlake orphans collect them)", *ident)
            call.catalog.audit_arguments = {**call.catalog.audit_arguments, "purge": "files kept"}
        call.catalog.drop_table(ident)
        return None

    def rename_table(self, call: Call) -> Result:
        body = call.body
        assert isinstance(body, models.RenameTable)
        src = (_one_level(body.source.namespace), body.source.name)
        dst = (_one_level(body.destination.namespace), body.destination.name)
        call.catalog.rename_table(src, dst)
        return None

    def report_metrics(self, call: Call) -> Result:
        return None  # accepted and not kept: the control table records commits, not scans

    def commit_transaction(self, call: Call) -> Result:
        body = call.body
        assert isinstance(body, models.CommitTransaction)
        changes = []
        for change in body.table_changes:
            if change.identifier is None:
                raise bad_request("every table change of a transaction names its table (identifier)")
            changes.append(((_one_level(change.identifier.namespace), change.identifier.name), change))
        with call.catalog.multi_table_transaction() as mtx:
            for ident, change in changes:
                mtx.stage_changes(ident, change.requirements, change.updates)
        return None

    # ---- OAuth2 ------------------------------------------------------------------------------
    async def oauth_tokens(self, request: Request) -> Response:
        try:
            raw = await _read_body(request, min(self.settings.max_body_bytes, 64 << 10))
        except RestError as e:
            return error_response(e.status, e.kind, e.message)
        form = dict(parse_qsl(raw.decode("utf-8", "replace")))
        basic = None
        authz = request.headers.get("authorization", "")
        if authz.lower().startswith("basic "):
            try:
                cid, _, secret = base64.b64decode(authz[6:].strip()).decode().partition(":")
                basic = (cid, secret)
            except (ValueError, binascii.Error):
                return JSONResponse({"error": "invalid_client", "error_description": "malformed Basic credentials"}, 401)
        try:
            answer = self.auth.token_response(form, basic)
        except OAuthError as e:
            return JSONResponse({"error": e.error, "error_description": e.description}, e.status)
        return JSONResponse(answer, headers={"Cache-Control": "no-store"})


def build_app(settings: ServerSettings, auth: Authenticator) -> Starlette:
    """The catalog server's ASGI application."""
    svc = CatalogService(settings, auth)
    ns, tb = "namespaces/{namespace}", "namespaces/{namespace}/tables/{table}"
    routes: list[Route] = [Route("/v1/oauth/tokens", svc.oauth_tokens, methods=["POST"])]
    # Starlette tries the routes in order, a regular expression each: the table's own (load,
    # commit, exists: nearly every request of a running engine) come first, not after 24 others.
    table: list[tuple[str, list[str], Callable[[Call], Result], bool, type[pydantic.BaseModel] | None]] = [
        (tb, ["HEAD"], svc.table_exists, False, None),  # before GET, which answers HEAD too
        (tb, ["GET"], svc.load_table, False, None),
        (tb, ["POST"], svc.commit_table, True, models.CommitTable),
        (tb, ["DELETE"], svc.drop_table, True, None),
        ("config", ["GET"], svc.config, False, None),
        ("namespaces", ["GET"], svc.list_namespaces, False, None),
        ("namespaces", ["POST"], svc.create_namespace, True, models.CreateNamespace),
        (ns, ["HEAD"], svc.namespace_exists, False, None),  # before GET, which answers HEAD too
        (ns, ["GET"], svc.load_namespace, False, None),
        (ns, ["DELETE"], svc.drop_namespace, True, None),
        (f"{ns}/properties", ["POST"], svc.update_namespace_properties, True, models.UpdateNamespaceProperties),
        (f"{ns}/tables", ["GET"], svc.list_tables, False, None),
        (f"{ns}/tables", ["POST"], svc.create_table, True, models.CreateTable),
        (f"{ns}/register", ["POST"], svc.register_table, True, models.RegisterTable),
        (f"{tb}/metrics", ["POST"], svc.report_metrics, False, None),
        ("tables/rename", ["POST"], svc.rename_table, True, models.RenameTable),
        ("transactions/commit", ["POST"], svc.commit_transaction, True, models.CommitTransaction),
        # views: lib/trinitylake/rest_catalog/views.py
        (f"{ns}/views", ["GET"], view_routes.list_views, False, None),
        (f"{ns}/views", ["POST"], view_routes.create_view, True, view_routes.CreateView),
        (f"{ns}/register-view", ["POST"], view_routes.register_view, True, view_routes.RegisterView),
        (f"{ns}/views/{{view}}", ["HEAD"], view_routes.view_exists, False, None),  # before GET
        (f"{ns}/views/{{view}}", ["GET"], view_routes.load_view, False, None),
        (f"{ns}/views/{{view}}", ["POST"], view_routes.replace_view, True, view_routes.CommitView),
        (f"{ns}/views/{{view}}", ["DELETE"], view_routes.drop_view, True, None),
        ("views/rename", ["POST"], view_routes.rename_view, True, view_routes.RenameView),
    ]
    inline: dict[Callable[[Call], Result], Callable[[Call], Result | None]] = {
        svc.load_table: svc.load_kept_table, svc.table_exists: svc.table_exists_kept}
    for path, methods, handler, write, model in table:
        routes += svc.route(path, methods, handler, write=write, body=model, inline=inline.get(handler))

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        kind = {404: "NotFoundException", 405: "MethodNotAllowedException"}.get(status, "BadRequestException")
        return error_response(status, kind, f"{request.method} {request.url.path}: "
                                            f"{exc.detail if isinstance(exc, HTTPException) else 'failed'}")

    handlers: dict[int | type[Exception], Callable[[Request, Exception], Awaitable[Response]]] = {
        HTTPException: http_error}
    return Starlette(routes=routes, exception_handlers=handlers)
