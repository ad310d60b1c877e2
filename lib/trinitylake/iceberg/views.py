"""Iceberg views stored as the lakehouse's view objects.

A view is a ``ViewDef`` (schema 3) in the tree whose ``properties["metadata_location"]`` names
the Iceberg view metadata JSON, as a table's ``TableDef`` names the table's metadata file. Every
change writes a new metadata file (``<location>/metadata/NNNNN-<uuid>.metadata.json``, or under
the view's ``write.metadata.path``) and repoints the ViewDef in one lakehouse transaction, so a
view reads as of any retained version, export or time-travel prefix like a table.

The metadata is built and checked by `trinitylake.iceberg.view_metadata` (Iceberg's Java
``ViewMetadata.Builder``) and its files read and written by `trinitylake.iceberg.view_files`.
The catalog operations here (`create_view`, `load_view`, `replace_view`, `drop_view`,
`rename_view`, `register_view`) take a `TrinityLakeCatalog` (what they use of it:
`ViewCatalog`) and answer Iceberg's messages (``View already exists: ns.view``, ``Table with
same name already exists: ns.view``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchNamespaceError,
    NoSuchViewError,
)

from trinitylake.errors import AlreadyExistsError, ObjectNotFoundError
from trinitylake.iceberg.view_files import new_metadata_location, read_metadata, write_metadata
from trinitylake.iceberg.view_metadata import (
    Json,
    ViewArgumentError,
    ViewMetadataBuilder,
    ViewStateError,
    check_requirements,
    now_ms,
    require,
)
from trinitylake.lakehouse.view import VIEW_METADATA_LOCATION

if TYPE_CHECKING:
    from pyiceberg.typedef import Properties

    from trinitylake.lakehouse import LakehouseView, Transaction

#: Attempts of a view commit that loses to concurrent commits on the same view.
COMMIT_ATTEMPTS = 4


class ViewAlreadyExistsError(AlreadyExistsError):
    """A view (or a table) of the name exists: Iceberg's AlreadyExistsException, with its text."""


class ViewCatalog(Protocol):
    """What the view operations use of their catalog (`trinitylake.iceberg.TrinityLakeCatalog`):
    its properties (the FileIO, defaults and overrides), its lakehouse and its commits."""

    @property
    def properties(self) -> Properties: ...

    def lakehouse_view(self) -> LakehouseView: ...

    def begin_write(self, what: str) -> Transaction: ...

    def commit_transaction(self, txn: Transaction, what: str, written: list[str]) -> int | None: ...

    def delete_unreferenced(self, locations: list[str]) -> None: ...


# ---- the catalog's views ----------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadedView:
    """A view as the REST protocol's LoadViewResult carries it."""

    metadata: Json
    metadata_location: str

    def result(self) -> Json:
        return {"metadata-location": self.metadata_location, "metadata": self.metadata, "config": {}}


def _name(ns: str, view: str) -> str:
    return f"{ns}.{view}"


def _pointer(view: LakehouseView, ns: str, name: str) -> str | None:
    try:
        d = view.load_view(ns, name)
    except ObjectNotFoundError:
        return None
    return d.properties.get(VIEW_METADATA_LOCATION)


def view_in(catalog: ViewCatalog, view: LakehouseView, ns: str, name: str) -> LoadedView | None:
    """The view as `view` (a version, or a transaction) sees it; None when it does not exist."""
    location = _pointer(view, ns, name)
    if location is None:
        return None
    return LoadedView(read_metadata(catalog.properties, location), location)


def list_views(catalog: ViewCatalog, ns: str) -> list[str]:
    try:
        return catalog.lakehouse_view().list_views(ns)
    except ObjectNotFoundError as e:
        raise NoSuchNamespaceError(f"Namespace does not exist: {ns}") from e


def view_exists(catalog: ViewCatalog, ns: str, name: str) -> bool:
    return catalog.lakehouse_view().view_exists(ns, name)


def load_view(catalog: ViewCatalog, ns: str, name: str) -> LoadedView:
    loaded = view_in(catalog, catalog.lakehouse_view(), ns, name)
    if loaded is None:
        raise NoSuchViewError(f"View does not exist: {_name(ns, name)}")
    return loaded


def _check_name_free(view: LakehouseView, ns: str, name: str) -> None:
    if not view.namespace_exists(ns):
        raise NoSuchNamespaceError(f"Namespace does not exist: {ns}")
    if view.view_exists(ns, name):
        raise ViewAlreadyExistsError(f"View already exists: {_name(ns, name)}")
    if view.table_exists(ns, name):
        raise ViewAlreadyExistsError(f"Table with same name already exists: {_name(ns, name)}")


def new_view_metadata(catalog: ViewCatalog, ns: str, name: str, schema: Mapping[str, Any],
                      version: Mapping[str, Any], location: str | None, properties: Mapping[str, str]) -> Json:
    """A new view's metadata, as ``BaseMetastoreViewCatalog``'s builder creates it."""
    reps = version.get("representations") or []
    require(bool(reps), ViewStateError, "Cannot create view without specifying a query")
    require(version.get("default-namespace") is not None, ViewStateError,
           "Cannot create view without specifying a default namespace")
    unsupported = sorted({str(r.get("type")) for r in reps if r.get("type") != "sql"})
    require(not unsupported, ViewStateError, f"Found unsupported view representations: {unsupported}")
    props = {k[len("view-default."):]: v for k, v in catalog.properties.items() if k.startswith("view-default.")}
    props.update(properties)
    props.update({k[len("view-override."):]: v for k, v in catalog.properties.items() if k.startswith("view-override.")})
    where = location or default_location(catalog, ns, name)
    first = {**version, "version-id": 1, "timestamp-ms": now_ms()}
    return ViewMetadataBuilder().set_properties(props).set_location(where).set_current_version(first, schema).build()


def default_location(catalog: ViewCatalog, ns: str, name: str) -> str:
    """``<warehouse>/<ns>.db/<view>``, where PyIceberg's catalogs put a table of that name."""
    return f"{str(catalog.properties['warehouse']).rstrip('/')}/{ns}.db/{name}"


def _commit(catalog: ViewCatalog, what: str, written: list[str], stage: Callable[[Transaction], None]) -> None:
    """Run `stage(txn)` in one lakehouse transaction and commit it; on failure the metadata
    files in `written` (referenced by nothing) are deleted."""
    txn = catalog.begin_write(what)
    try:
        stage(txn)
    except BaseException:
        if not txn.closed:
            txn.rollback()
        catalog.delete_unreferenced(written)
        raise
    catalog.commit_transaction(txn, what, written)


def create_view(catalog: ViewCatalog, ns: str, name: str, schema: Mapping[str, Any],
                version: Mapping[str, Any], location: str | None = None,
                properties: Mapping[str, str] | None = None) -> LoadedView:
    """Create view `ns.name` (the REST protocol's ``CreateViewRequest``).

    Raises:
        NoSuchNamespaceError: the namespace does not exist.
        ViewAlreadyExistsError: a view or a table of that name exists.
        ViewStateError, ViewArgumentError: the request is not a valid view.
    """
    what = f"create view {_name(ns, name)}"
    metadata = new_view_metadata(catalog, ns, name, schema, version, location, properties or {})
    loc = new_metadata_location(metadata, None)
    written: list[str] = []

    def stage(txn: Transaction) -> None:
        _check_name_free(txn, ns, name)  # before the file: a refused create leaves nothing behind
        write_metadata(catalog.properties, metadata, loc)
        written.append(loc)
        txn.create_view(ns, name, metadata_location=loc)

    _commit(catalog, what, written, stage)
    return LoadedView(metadata, loc)


def register_view(catalog: ViewCatalog, ns: str, name: str, metadata_location: str) -> LoadedView:
    """Add view `ns.name` whose metadata file exists already."""
    what = f"register view {_name(ns, name)}"
    require(bool(metadata_location), ViewArgumentError, "Cannot register an empty metadata file location as a view")
    metadata = read_metadata(catalog.properties, metadata_location)

    def stage(txn: Transaction) -> None:
        _check_name_free(txn, ns, name)
        txn.create_view(ns, name, metadata_location=metadata_location)

    _commit(catalog, what, [], stage)
    return LoadedView(metadata, metadata_location)


def replace_view(catalog: ViewCatalog, ns: str, name: str, requirements: Sequence[Mapping[str, Any]],
                 updates: Sequence[Mapping[str, Any]]) -> LoadedView:
    """Commit view `updates` (the REST protocol's ``POST .../views/{view}``): `requirements`
    checked against the view as the transaction reads it, the updates applied by
    `ViewMetadataBuilder`, the new metadata file written and the ViewDef repointed in one
    lakehouse version. Nothing changes (and nothing is written) when the updates change nothing.
    A commit that lost to a concurrent one on the same view is retried on the new view
    (`COMMIT_ATTEMPTS` in all), its requirements checked again, as Iceberg's server retries.

    Raises:
        NoSuchViewError: the view does not exist.
        CommitFailedException: a requirement does not hold, or concurrent commits kept changing the view.
    """
    what = f"replace view {_name(ns, name)}"
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        written: list[str] = []
        txn = catalog.begin_write(what)
        try:
            current = view_in(catalog, txn, ns, name)
            if current is None:
                raise NoSuchViewError(f"View does not exist: {_name(ns, name)}")
            check_requirements(requirements, current.metadata)
            builder = ViewMetadataBuilder(current.metadata)
            for u in updates:
                builder.apply(u)
            metadata = builder.build()
            if not builder.changes:
                txn.rollback()
                return current
            loc = new_metadata_location(metadata, current.metadata_location)
            write_metadata(catalog.properties, metadata, loc)
            written.append(loc)
            txn.alter_view(ns, name, metadata_location=loc)
        except BaseException:
            if not txn.closed:
                txn.rollback()
            catalog.delete_unreferenced(written)
            raise
        try:
            catalog.commit_transaction(txn, what, written)  # a conflict deletes `written`
        except CommitFailedException:
            if attempt == COMMIT_ATTEMPTS:
                raise
            continue
        return LoadedView(metadata, loc)
    raise AssertionError("unreachable")


def drop_view(catalog: ViewCatalog, ns: str, name: str) -> None:
    """Drop view `ns.name`; its metadata files stay (retained versions still read them)."""
    what = f"drop view {_name(ns, name)}"

    def stage(txn: Transaction) -> None:
        try:
            txn.drop_view(ns, name)
        except ObjectNotFoundError as e:
            raise NoSuchViewError(f"View does not exist: {_name(ns, name)}") from e

    _commit(catalog, what, [], stage)


def rename_view(catalog: ViewCatalog, ns: str, name: str, to_ns: str, to_name: str) -> None:
    """Rename view `ns.name` to `to_ns.to_name`, across namespaces too, as Iceberg words it.

    Raises:
        NoSuchViewError: the source view does not exist.
        NoSuchNamespaceError: the target namespace does not exist.
        ViewAlreadyExistsError: a view or a table has the target name.
    """
    src, dst = _name(ns, name), _name(to_ns, to_name)
    what = f"rename view {src} to {dst}"

    def stage(txn: Transaction) -> None:
        if not txn.view_exists(ns, name):
            raise NoSuchViewError(f"View does not exist: {src}")
        if not txn.namespace_exists(to_ns):
            raise NoSuchNamespaceError(f"Namespace does not exist: {to_ns}")
        if txn.view_exists(to_ns, to_name):
            raise ViewAlreadyExistsError(f"Cannot rename {src} to {dst}. View already exists")
        if txn.table_exists(to_ns, to_name):
            raise ViewAlreadyExistsError(f"Cannot rename {src} to {dst}. Table already exists")
        txn.rename_view(ns, name, to_ns, to_name)

    _commit(catalog, what, [], stage)
