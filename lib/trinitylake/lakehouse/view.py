"""A read-only view of one version: namespaces, tables and views as of that root."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.protobuf.json_format import MessageToDict

from trinitylake.errors import ObjectNotFoundError
from trinitylake.format import definitions as D
from trinitylake.format import tree
from trinitylake.format.keys import KeyCodec

if TYPE_CHECKING:
    from trinitylake.lakehouse.lakehouse import Lakehouse
    from trinitylake.lakehouse.roots import RootRef


class LakehouseView:
    """Reads pinned to one root. Transactions extend it with read tracking and writes."""

    def __init__(self, lakehouse: Lakehouse, root: RootRef):
        self.lakehouse = lakehouse
        self.root = root
        d = root.lakehouse_def
        self.codec = KeyCodec(d.namespace_name_max_size_bytes, d.table_name_max_size_bytes, d.view_name_max_size_bytes)
        self.store = lakehouse.node_store(root.base)

    @property
    def version(self) -> int:
        return self.root.version

    # -- primitive reads (Transaction overrides these to track read sets and overlay writes)
    def _get(self, key: str) -> str | None:
        return tree.get(self.store, self.root.node, key)

    def _scan(self, prefix: str) -> list[tuple[str, str]]:
        return tree.scan_prefix(self.store, self.root.node, prefix)

    def _read_def(self, cls, path: str):
        storage, p = self.lakehouse.resolve(path, self.root.base)
        try:
            data = storage.read(p)
        except FileNotFoundError:
            raise ObjectNotFoundError(f"definition file {storage.uri(p)} is missing") from None
        return D.loads(cls, data, storage.uri(p))

    # -- namespaces
    def namespace_exists(self, ns: str) -> bool:
        return self._get(self.codec.namespace_key(ns)) is not None

    def list_namespaces(self) -> list[str]:
        from trinitylake.format.keys import NS_PREFIX

        return [self.codec.decode(k)[1][0] for k, _ in self._scan(NS_PREFIX)]

    def _namespace_path(self, ns: str) -> str:
        path = self._get(self.codec.namespace_key(ns))
        if path is None:
            raise ObjectNotFoundError(f"namespace {ns!r} does not exist (version {self.version})")
        return path

    def load_namespace(self, ns: str) -> D.NamespaceDef:
        return self._read_def(D.NamespaceDef, self._namespace_path(ns))

    def describe_namespace(self, ns: str) -> dict[str, Any]:
        path = self._namespace_path(ns)
        d = self._read_def(D.NamespaceDef, path)
        return {"name": ns, "id": d.id, "properties": dict(d.properties), "definition": path, "version": self.version}

    # -- tables
    def table_exists(self, ns: str, table: str) -> bool:
        return self._get(self.codec.table_key(ns, table)) is not None

    def list_tables(self, ns: str) -> list[str]:
        self._namespace_path(ns)
        return [self.codec.decode(k)[1][1] for k, _ in self._scan(self.codec.tables_prefix(ns))]

    def _table_path(self, ns: str, table: str) -> str:
        path = self._get(self.codec.table_key(ns, table))
        if path is None:
            if not self.namespace_exists(ns):
                raise ObjectNotFoundError(f"namespace {ns!r} does not exist (version {self.version})")
            raise ObjectNotFoundError(f"table {ns}.{table} does not exist (version {self.version})")
        return path

    def load_table(self, ns: str, table: str) -> D.TableDef:
        return self._read_def(D.TableDef, self._table_path(ns, table))

    def describe_table(self, ns: str, table: str) -> dict[str, Any]:
        path = self._table_path(ns, table)
        d = self._read_def(D.TableDef, path)
        return {
            "namespace": ns,
            "name": table,
            "id": d.id,
            "table_type": D.table_type_name(d).lower(),
            "table_format": D.table_format_name(d).lower(),
            "metadata_location": d.format_properties.get("metadata_location"),
            "format_properties": dict(d.format_properties),
            "properties": dict(d.properties),
            "schema": MessageToDict(d.schema) if d.HasField("schema") else None,
            "definition": path,
            "version": self.version,
        }

    # -- everything, for comparisons and exports
    def all_items(self) -> list[tuple[str, str]]:
        """Every live (key, definition path) pair of this version, in key order."""
        return list(tree.iter_items(self.store, self.root.node))
