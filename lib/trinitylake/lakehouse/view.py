"""A read-only view of one version: namespaces, tables and views as of that root."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from trinitylake.errors import InvalidNameError, ObjectNotFoundError, UndecodableKeyError, ValidationError
from trinitylake.format import definitions, tree
from trinitylake.format.keys import NS_PREFIX, KeyCodec
from trinitylake.json_data import JsonObject

_Def = TypeVar("_Def", bound=Message)

#: A ViewDef's property naming its Iceberg view metadata file, as a TableDef's
#: ``format_properties["metadata_location"]`` names the table's (ViewDef has no format
#: properties); the one before it is ``previous_metadata_location``.
VIEW_METADATA_LOCATION = "metadata_location"
VIEW_PREVIOUS_METADATA_LOCATION = "previous_metadata_location"

if TYPE_CHECKING:
    from trinitylake.lakehouse.ports import NodeSource
    from trinitylake.lakehouse.roots import RootRef


class LakehouseView:
    """Reads pinned to one root. Transactions extend it with read tracking and writes."""

    def __init__(self, lakehouse: NodeSource, root: RootRef):
        self.lakehouse = lakehouse
        self.root = root
        d = root.lakehouse_def
        self.codec = KeyCodec(d.namespace_name_max_size_bytes, d.table_name_max_size_bytes, d.view_name_max_size_bytes)
        self.store = lakehouse.node_store(root.base)

    @property
    def version(self) -> int:
        return self.root.version

    # -- primitive reads (Transaction overrides these to track read sets and overlay writes)
    def get_key(self, key: str) -> str | None:
        """The stored value of an encoded key in this version, None when absent."""
        return tree.get(self.store, self.root.node, key)

    def _scan(self, prefix: str) -> list[tuple[str, str]]:
        return tree.scan_prefix(self.store, self.root.node, prefix)

    # -- keys as the spec pads them, or as the Java reference did (UTF-16 units; see format.keys)
    def _resolve(self, spec_key: Callable[[], str], java_key: str | None) -> str:
        """The key of an object as stored: the spec key, unless only the Java-padded one is
        present. `spec_key` is a thunk: a name within Java's UTF-16 limit may be too long in
        UTF-8 bytes for a spec key (InvalidNameError, raised only if Java's is absent too)."""
        try:
            key = spec_key()
        except InvalidNameError:
            if java_key is not None and self.get_key(java_key) is not None:
                return java_key
            raise
        if java_key is not None and self.get_key(key) is None and self.get_key(java_key) is not None:
            return java_key
        return key

    def _ns_key(self, ns: str) -> str:
        return self._resolve(lambda: self.codec.namespace_key(ns), self.codec.java_namespace_key(ns))

    def _table_key(self, ns: str, table: str) -> str:
        return self._resolve(lambda: self.codec.table_key(ns, table), self.codec.java_table_key(ns, table))

    def _view_key(self, ns: str, view: str) -> str:
        return self._resolve(lambda: self.codec.view_key(ns, view), self.codec.java_view_key(ns, view))

    def _scan_members(self, ns: str, views: bool = False) -> list[tuple[str, str]]:
        """Tables (or views) of `ns`, under the spec's and Java's padding of the namespace."""
        spec = self.codec.views_prefix if views else self.codec.tables_prefix
        java = self.codec.java_views_prefix(ns) if views else self.codec.java_tables_prefix(ns)
        try:
            out = self._scan(spec(ns))
        except InvalidNameError:
            if java is None:
                raise
            out = []
        if java is None:
            return out
        # The spec prefix of a non-ASCII name is a prefix of Java's (it pads fewer spaces):
        # both scans may return the same Java-written key.
        return sorted(dict(out + self._scan(java)).items())

    def _decoded(self, pairs: list[tuple[str, str]], part: int, what: str) -> list[str]:
        """Names decoded from keys; keys neither padding explains raise UndecodableKeyError
        naming them, carrying every name that did decode."""
        names, bad = [], []
        for k, _ in pairs:
            try:
                names.append(self.codec.decode(k)[1][part])
            except ValidationError:
                bad.append(k)
        if bad:
            raise UndecodableKeyError(
                f"{len(bad)} {what} key(s) in version {self.version} cannot be decoded: "
                + ", ".join(repr(k) for k in bad[:5]) + f"; the other {len(names)} are listed",
                keys=bad, listed=sorted(names))
        return sorted(names)

    def read_def(self, cls: type[_Def], path: str) -> _Def:
        storage, p = self.lakehouse.resolve(path, self.root.base)
        uri = storage.uri(p)
        data = self.lakehouse.def_file(uri)
        if data is None:
            try:
                data = storage.read(p)
            except FileNotFoundError:
                raise ObjectNotFoundError(f"definition file {uri} is missing") from None
            self.lakehouse.keep_def_file(uri, data)
        return definitions.loads(cls, data, uri)

    # -- namespaces
    def namespace_exists(self, ns: str) -> bool:
        return self.get_key(self._ns_key(ns)) is not None

    def list_namespaces(self) -> list[str]:
        """Namespace names, sorted.

        Raises:
            UndecodableKeyError: some keys cannot be decoded (``e.listed`` has the others).
        """

        return self._decoded(self._scan(NS_PREFIX), 0, "namespace")

    def _namespace_path(self, ns: str) -> str:
        path = self.get_key(self._ns_key(ns))
        if path is None:
            raise ObjectNotFoundError(f"namespace {ns!r} does not exist (version {self.version})")
        return path

    def load_namespace(self, ns: str) -> definitions.NamespaceDef:
        return self.read_def(definitions.NamespaceDef, self._namespace_path(ns))

    def describe_namespace(self, ns: str) -> JsonObject:
        path = self._namespace_path(ns)
        d = self.read_def(definitions.NamespaceDef, path)
        return {"name": ns, "id": d.id, "properties": dict(d.properties), "definition": path, "version": self.version}

    # -- tables
    def table_exists(self, ns: str, table: str) -> bool:
        return self.get_key(self._table_key(ns, table)) is not None

    def list_tables(self, ns: str) -> list[str]:
        """Table names of `ns`, sorted.

        Raises:
            UndecodableKeyError: some keys cannot be decoded (``e.listed`` has the others).
        """
        self._namespace_path(ns)
        return self._decoded(self._scan_members(ns), 1, f"table (namespace {ns!r})")

    def _table_path(self, ns: str, table: str) -> str:
        path = self.get_key(self._table_key(ns, table))
        if path is None:
            if not self.namespace_exists(ns):
                raise ObjectNotFoundError(f"namespace {ns!r} does not exist (version {self.version})")
            raise ObjectNotFoundError(f"table {ns}.{table} does not exist (version {self.version})")
        return path

    def load_table(self, ns: str, table: str) -> definitions.TableDef:
        return self.read_def(definitions.TableDef, self._table_path(ns, table))

    def describe_table(self, ns: str, table: str) -> JsonObject:
        path = self._table_path(ns, table)
        d = self.read_def(definitions.TableDef, path)
        return {
            "namespace": ns,
            "name": table,
            "id": d.id,
            "table_type": definitions.table_type_name(d).lower(),
            "table_format": definitions.table_format_name(d).lower(),
            "metadata_location": d.format_properties.get("metadata_location"),
            "format_properties": dict(d.format_properties),
            "properties": dict(d.properties),
            "schema": MessageToDict(d.schema) if d.HasField("schema") else None,
            "definition": path,
            "version": self.version,
        }

    # -- views
    def view_exists(self, ns: str, view: str) -> bool:
        return self.get_key(self._view_key(ns, view)) is not None

    def list_views(self, ns: str) -> list[str]:
        """View names of `ns`, sorted.

        Raises:
            ObjectNotFoundError: the namespace does not exist.
            UndecodableKeyError: some keys cannot be decoded (``e.listed`` has the others).
        """
        self._namespace_path(ns)
        return self._decoded(self._scan_members(ns, views=True), 1, f"view (namespace {ns!r})")

    def _view_path(self, ns: str, view: str) -> str:
        path = self.get_key(self._view_key(ns, view))
        if path is None:
            if not self.namespace_exists(ns):
                raise ObjectNotFoundError(f"namespace {ns!r} does not exist (version {self.version})")
            raise ObjectNotFoundError(f"view {ns}.{view} does not exist (version {self.version})")
        return path

    def load_view(self, ns: str, view: str) -> definitions.ViewDef:
        """The view's definition; an Iceberg view's metadata file is its
        ``properties["metadata_location"]`` (`VIEW_METADATA_LOCATION`)."""
        return self.read_def(definitions.ViewDef, self._view_path(ns, view))

    def describe_view(self, ns: str, view: str) -> JsonObject:
        path = self._view_path(ns, view)
        d = self.read_def(definitions.ViewDef, path)
        return {
            "namespace": ns,
            "name": view,
            "id": d.id,
            "metadata_location": d.properties.get(VIEW_METADATA_LOCATION),
            "properties": dict(d.properties),
            "schema": MessageToDict(d.schema) if d.HasField("schema") else None,
            "definition": path,
            "version": self.version,
        }

    # -- everything, for comparisons and exports
    def all_items(self) -> list[tuple[str, str]]:
        """Every live (key, definition path) pair of this version, in key order."""
        return list(tree.iter_items(self.store, self.root.node))
