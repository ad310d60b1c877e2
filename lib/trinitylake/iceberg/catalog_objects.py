"""Namespaces and views of `trinitylake.iceberg.catalog.TrinityLakeCatalog`, its base class (the
catalog module keeps to the tables): a namespace is a lakehouse namespace (flat: one level), its
properties the NamespaceDef's; a view is a ViewDef pointing at Iceberg view metadata
(`trinitylake.iceberg.views`). Every write is one lakehouse transaction of the catalog's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.catalog import MetastoreCatalog, PropertiesUpdateSummary
from pyiceberg.exceptions import (
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchViewError,
)
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties

from trinitylake.errors import AlreadyExistsError, ObjectNotFoundError, ValidationError
from trinitylake.iceberg import views

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.view import View
    from pyiceberg.view.metadata import ViewVersion

    from trinitylake.lakehouse import LakehouseView, Transaction


class NamespacesAndViews(MetastoreCatalog):
    """The namespace and view operations; the catalog gives its transactions and version."""

    def _begin(self, what: str) -> Transaction:
        """A lakehouse transaction for the write `what` (refused under time travel)."""
        raise NotImplementedError

    def _commit(self, txn: Transaction, what: str, written: list[str]) -> int | None:
        raise NotImplementedError

    def commit_transaction(self, txn: Transaction, what: str, written: list[str]) -> int | None:
        raise NotImplementedError

    def delete_unreferenced(self, locations: list[str]) -> None:
        raise NotImplementedError

    def _view(self) -> LakehouseView:
        """The version this catalog reads."""
        raise NotImplementedError

    def _ns(self, namespace: str | Identifier) -> str:
        return self.identifier_to_database(namespace, NoSuchNamespaceError)

    @staticmethod
    def _abandon(txn: Transaction) -> None:
        if not txn.closed:
            txn.rollback()

    # ---- namespaces --------------------------------------------------------------------------
    def create_namespace(self, namespace: str | Identifier, properties: Properties = EMPTY_DICT) -> None:
        ns = self.identifier_to_database(namespace)
        txn = self._begin(f"create namespace {ns}")
        try:
            txn.create_namespace(ns, dict(properties))
        except AlreadyExistsError as e:
            self._abandon(txn)
            raise NamespaceAlreadyExistsError(f"Namespace already exists: {ns}") from e
        self._commit(txn, f"create namespace {ns}", [])

    def drop_namespace(self, namespace: str | Identifier) -> None:
        ns = self._ns(namespace)
        txn = self._begin(f"drop namespace {ns}")
        try:
            txn.drop_namespace(ns)
        except ObjectNotFoundError as e:
            self._abandon(txn)
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}") from e
        except ValidationError as e:
            self._abandon(txn)
            raise NamespaceNotEmptyError(f"Namespace {ns} is not empty: {e}") from e
        self._commit(txn, f"drop namespace {ns}", [])

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        parent = self.identifier_to_tuple(namespace)
        view = self._view()
        if parent:
            if len(parent) == 1 and view.namespace_exists(parent[0]):
                return []  # lakehouse namespaces are flat
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(parent)}")
        return [(n,) for n in view.list_namespaces()]

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        ns = self._ns(namespace)
        try:
            return [(ns, t) for t in self._view().list_tables(ns)]
        except ObjectNotFoundError as e:
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}") from e

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        ns = self._ns(namespace)
        try:
            return dict(self._view().load_namespace(ns).properties)
        except ObjectNotFoundError as e:
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}") from e

    def update_namespace_properties(self, namespace: str | Identifier, removals: set[str] | None = None,
                                    updates: Properties = EMPTY_DICT) -> PropertiesUpdateSummary:
        ns = self._ns(namespace)
        current = self.load_namespace_properties(ns)
        summary, _ = self._get_updated_props_and_update_summary(current, removals, updates)
        txn = self._begin(f"alter namespace {ns}")
        try:
            txn.alter_namespace(ns, set_properties=dict(updates), remove=sorted(removals or ()))
        except ObjectNotFoundError as e:
            self._abandon(txn)
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}") from e
        self._commit(txn, f"alter namespace {ns}", [])
        return summary

    # ---- views: ViewDefs pointing at Iceberg view metadata (`trinitylake.iceberg.views`) ------
    def lakehouse_view(self) -> LakehouseView:
        """The version this catalog reads: its pinned one (time travel), or the latest now."""
        return self._view()

    def begin_write(self, what: str) -> Transaction:
        """A lakehouse transaction for a write (ReadOnlyCatalogError under time travel)."""
        return self._begin(what)

    def _view_ident(self, identifier: str | Identifier) -> tuple[str, str]:
        parts = self.identifier_to_tuple(identifier)
        if len(parts) != 2:
            raise NoSuchViewError(f"View does not exist: {'.'.join(parts)}")
        return parts[0], parts[1]

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        ns = self._ns(namespace)
        return [(ns, v) for v in views.list_views(self, ns)]

    def view_exists(self, identifier: str | Identifier) -> bool:
        ns, name = self._view_ident(identifier)
        return views.view_exists(self, ns, name)

    def load_view(self, identifier: str | Identifier) -> View:
        from pyiceberg.view import View
        from pyiceberg.view.metadata import ViewMetadata

        ns, name = self._view_ident(identifier)
        loaded = views.load_view(self, ns, name)
        return View((ns, name), ViewMetadata.model_validate(loaded.metadata))

    def drop_view(self, identifier: str | Identifier) -> None:
        ns, name = self._view_ident(identifier)
        views.drop_view(self, ns, name)

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        ns, name = self._view_ident(identifier)
        views.register_view(self, ns, name, metadata_location)
        return self.load_view((ns, name))

    def create_view(self, identifier: str | Identifier, schema: Schema | pa.Schema, view_version: ViewVersion,
                    location: str | None = None, properties: Properties = EMPTY_DICT) -> View:
        ns, name = self._view_ident(identifier)
        iceberg_schema = self._convert_schema_if_needed(schema)
        views.create_view(self, ns, name, iceberg_schema.model_dump(by_alias=True, mode="json"),
                          view_version.model_dump(by_alias=True, mode="json", exclude_none=True), location,
                          dict(properties))
        return self.load_view((ns, name))
