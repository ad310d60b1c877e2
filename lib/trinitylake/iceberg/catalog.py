"""`TrinityLakeCatalog`: a PyIceberg catalog whose namespaces and tables are a lakehouse's.

* A namespace is a lakehouse namespace (flat: one level), its properties the NamespaceDef's.
* A table is a lakehouse table: a TableDef with ``table_format`` ICEBERG, ``table_type``
  MANAGED and the table's current metadata file in ``format_properties["metadata_location"]``
  (the previous one in ``previous_metadata_location``), as the Java reference stores them.
* ``commit_table`` is one lakehouse transaction: it reads the table's current metadata location
  in the transaction, checks the commit's requirements against that metadata, applies its
  updates as Iceberg's Java ``TableMetadata`` builder does (ids, format v3, messages:
  `trinitylake.iceberg.table_updates`, over PyIceberg's per-update code), writes the new
  metadata file and repoints the table. Commits of other objects that landed meanwhile are
  rebased over by the lakehouse's conflict rules; a commit to the same table (its metadata
  location changed) is a conflict, raised as PyIceberg's ``CommitFailedException``.
* `TrinityLakeCatalog.multi_table_transaction` commits changes to several tables in one
  lakehouse version, or none.
* Time travel: the properties ``version`` (a version number), ``as-of`` (ISO-8601 or epoch
  milliseconds) or ``export`` (an export name) give a read-only catalog of that version
  (`at_version`, `as_of`, `at_export` make one from a catalog).

Properties: ``lakehouse`` (its URI, required), ``warehouse`` (where new tables go; default
``<lakehouse>/warehouse``), ``lakehouse.storage.<key>`` (fsspec options of the lakehouse's
storage), ``control-uri`` and ``audit`` (``false``: no control-table rows), and FileIO
properties for the tables' files. The tables' files go through the project's own storage engine
(`trinitylake.iceberg.fileio.TrinityLakeFileIO`, PyIceberg's S3 properties mapped onto it)
unless ``py-io-impl`` names another FileIO.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io import PY_IO_IMPL, FileIO, load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import Compressor, FromInputFile
from pyiceberg.table import CommitTableResponse, StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties

from trinitylake.errors import (
    AlreadyExistsError,
    NotFoundError,
    ObjectNotFoundError,
    TransactionConflictError,
    TransactionExpiredError,
    UnknownOutcomeError,
    ValidationError,
)
from trinitylake.format import definitions
from trinitylake.iceberg.catalog_objects import NamespacesAndViews
from trinitylake.iceberg.fileio import FILE_IO_IMPL, TrinityLakeFileIO
from trinitylake.iceberg.metadata_cache import read_table_metadata
from trinitylake.iceberg.multi_table import MultiTableTransaction, check_base, check_creates, commit_response
from trinitylake.iceberg.table_updates import (
    apply_updates,
    check_defaults,
    check_requirements,
    keep_defaults,
    metadata_json,
    with_row_lineage,
)
from trinitylake.lakehouse import Lakehouse, LakehouseView, RootRef, Transaction
from trinitylake.lakehouse.context import AuditContext
from trinitylake.storage import is_absolute
from trinitylake.storage.iceberg_properties import STORAGE_PREFIX

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table.update import TableRequirement, TableUpdate

log = logging.getLogger(__name__)

LAKEHOUSE = "lakehouse"
WAREHOUSE = "warehouse"
VERSION, AS_OF, EXPORT = "version", "as-of", "export"
METADATA_LOCATION = "metadata_location"
PREVIOUS_METADATA_LOCATION = "previous_metadata_location"
TABLE_DEFAULT_PREFIX = "table-default."
TABLE_DEFAULTS = {"commit.retry.num-retries": "0"}
#: Table properties that make a table's FileIO differ from the catalog's.
_IO_PROPERTY_PREFIXES = (PY_IO_IMPL, "s3.", "client.", "gcs.", "adls.", "hdfs.", "hf.", STORAGE_PREFIX)


class ReadOnlyCatalogError(ValidationError):
    """A write through a catalog pinned to a past version (time travel) or an export."""


class MetadataFileNotFoundError(NoSuchTableError, NotFoundError):
    """A table whose current metadata file is missing: the REST protocol's 404 ``NotFoundException``
    (what Iceberg's reference catalog answers), and a NoSuchTableError to PyIceberg's callers."""


def _flag(value: object, default: bool) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() not in ("false", "0", "no", "off")


def _parse_as_of(value: str) -> datetime | int:
    v = str(value).strip()
    if v.isdigit():
        return int(v)
    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(f"cannot parse as-of {value!r}; use ISO-8601 or epoch milliseconds") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


class TrinityLakeCatalog(NamespacesAndViews):
    """PyIceberg catalog on a TrinityLake lakehouse (see the module doc)."""

    lakehouse: Lakehouse
    #: The command its commits' audit rows name (the operation follows it), e.g. ``iceberg
    #: commit table sales.orders``; a server over the catalog names itself instead.
    audit_command: str = "iceberg"

    def __init__(self, name: str, **properties: str):
        super().__init__(name, **properties)
        uri = properties.get(LAKEHOUSE)
        if not uri:
            raise ValueError(f"catalog {name!r}: the property {LAKEHOUSE!r} (the lakehouse URI) is required")
        options = {k[len(STORAGE_PREFIX):]: v for k, v in properties.items() if k.startswith(STORAGE_PREFIX)}
        self.lakehouse = Lakehouse.open(uri, storage_options=options or None, control_uri=properties.get("control-uri"),
                                        audit=_flag(properties.get("audit"), True), context=AuditContext("iceberg"))
        if not self.properties.get(WAREHOUSE):
            self.properties = {**self.properties, WAREHOUSE: self.lakehouse.uri.rstrip("/") + "/warehouse"}
        if not self.properties.get(PY_IO_IMPL):
            self.properties = {**self.properties, PY_IO_IMPL: FILE_IO_IMPL}
        #: The FileIO of the tables' files (one for the catalog: its stores are opened once).
        self.io: FileIO = load_file_io(self.properties)
        given = [k for k in (VERSION, AS_OF, EXPORT) if properties.get(k) not in (None, "")]
        if len(given) > 1:
            raise ValueError(f"catalog {name!r}: give at most one of {VERSION}, {AS_OF} and {EXPORT}, got {given}")
        self._pinned: RootRef | None = None
        if given:
            k = given[0]
            v = str(properties[k])
            if k == VERSION:
                self._pinned = self.lakehouse.root_at(version=int(v))
            elif k == AS_OF:
                self._pinned = self.lakehouse.root_at(as_of=_parse_as_of(v))
            else:
                self._pinned = self.lakehouse.root_at(snapshot=v)
        self._mtx: MultiTableTransaction | None = None
        #: Added to the arguments of its commits' audit rows (e.g. the client of a server).
        self.audit_arguments: dict[str, str] = {}

    # ---- time travel ------------------------------------------------------------------------
    @property
    def read_only(self) -> bool:
        return self._pinned is not None

    @property
    def version(self) -> int:
        """The version this catalog reads: its pinned one, or the latest now."""
        return self._pinned.version if self._pinned is not None else self.lakehouse.latest_version()

    def _travel(self, key: str, value: str) -> TrinityLakeCatalog:
        props = {k: v for k, v in self.properties.items() if k not in (VERSION, AS_OF, EXPORT)}
        return type(self)(self.name, **{**props, key: value})

    def at_version(self, version: int) -> TrinityLakeCatalog:
        """A read-only catalog of lakehouse version `version`."""
        return self._travel(VERSION, str(version))

    def as_of(self, when: datetime | int | str) -> TrinityLakeCatalog:
        """A read-only catalog of the newest version created at or before `when`."""
        text = when.isoformat() if isinstance(when, datetime) else str(when)
        return self._travel(AS_OF, text)

    def at_export(self, name: str) -> TrinityLakeCatalog:
        """A read-only catalog of the exported snapshot `name` (read from the export's storage)."""
        return self._travel(EXPORT, name)

    def _view(self) -> LakehouseView:
        return LakehouseView(self.lakehouse, self._pinned) if self._pinned is not None else self.lakehouse.view()

    def _check_writable(self, what: str) -> None:
        if self._pinned is not None:
            raise ReadOnlyCatalogError(f"catalog {self.name!r} reads version {self._pinned.version} of "
                                       f"{self.lakehouse.uri} (time travel) and is read-only: cannot {what}")

    def _begin(self, what: str) -> Transaction:
        self._check_writable(what)
        return self.lakehouse.begin()

    # ---- helpers -----------------------------------------------------------------------------
    def _ident(self, identifier: str | Identifier) -> tuple[str, str]:
        return self.identifier_to_database_and_table(identifier, NoSuchTableError)

    def _absolute(self, location: str) -> str:
        return location if is_absolute(location) else self.lakehouse.storage.uri(location)

    def _table_in(self, view: LakehouseView, ns: str, table: str, catalog: Catalog | None = None,
                  known: Mapping[str, TableMetadata] | None = None) -> Table | None:
        """The table as `view` sees it (None when it does not exist); its metadata from `known`
        (by location) when there, else read."""
        try:
            d = view.load_table(ns, table)
        except ObjectNotFoundError:
            return None
        if definitions.table_format_name(d) != "ICEBERG":
            raise NoSuchTableError(f"table {ns}.{table} is a {definitions.table_format_name(d)} table, not an Iceberg table")
        location = d.format_properties.get(METADATA_LOCATION)
        if not location:
            raise NoSuchTableError(f"table {ns}.{table} has no {METADATA_LOCATION} (no Iceberg metadata yet)")
        location = self._absolute(location)
        try:
            metadata = (known or {}).get(location) or read_table_metadata(self.io, location)  # metadata_cache.py
        except FileNotFoundError:
            # Iceberg's answer (404 NotFound, the metadata location its clients are served anyway),
            # not the storage library's error text
            log.warning("table %s.%s: its metadata file %s is missing", ns, table, location)
            raise MetadataFileNotFoundError(f"Failed to open input stream for file: {location} "
                                            f"(table {ns}.{table}: its metadata file is missing)") from None
        return Table(identifier=(ns, table), metadata=metadata, metadata_location=location,
                     io=self._load_file_io(metadata.properties, location), catalog=catalog or self)

    def _commit(self, txn: Transaction, what: str, written: list[str]) -> int | None:
        """Commit `txn`; a conflict becomes CommitFailedException (and the metadata files this
        commit wrote, referenced by nothing, are deleted), an unknown outcome
        CommitStateUnknownException (they are kept: the commit may have landed)."""
        try:
            return txn.commit(command=f"{self.audit_command} {what}",
                              arguments={"catalog": self.name, "operation": what, **self.audit_arguments})
        except (TransactionConflictError, TransactionExpiredError) as e:
            self._delete_quietly(written)
            raise CommitFailedException(f"{what}: {e}") from e
        except UnknownOutcomeError as e:
            raise CommitStateUnknownException(f"{what}: {e}") from e

    def _load_file_io(self, properties: Properties = EMPTY_DICT, location: str | None = None) -> FileIO:
        """The catalog's FileIO, unless the table's `properties` set FileIO properties of their own."""
        if any(k.startswith(_IO_PROPERTY_PREFIXES) for k in properties):
            return super()._load_file_io(properties, location)
        return self.io

    def _delete_quietly(self, locations: list[str]) -> None:
        if not locations:
            return
        if isinstance(self.io, TrinityLakeFileIO):
            try:
                failed = self.io.delete_many(locations)
            except Exception as e:  # noqa: BLE001 - best effort: unreferenced metadata files
                failed = [(loc, str(e)) for loc in locations]
            for loc, err in failed:
                log.warning("could not delete unreferenced metadata file %s: %s", loc, err)
            return
        for loc in locations:
            try:
                self.io.delete(loc)
            except Exception as e:  # noqa: BLE001 - best effort: an unreferenced metadata file
                log.warning("could not delete unreferenced metadata file %s: %s", loc, e)

    # ---- what a multi-table transaction uses of its catalog ----------------------------------
    def table_key(self, identifier: str | Identifier) -> tuple[str, str]:
        """``(namespace, table)`` of a table identifier (NoSuchTableError when malformed)."""
        return self._ident(identifier)

    def table_in(self, view: LakehouseView, ns: str, table: str, catalog: Catalog | None = None,
                 known: Mapping[str, TableMetadata] | None = None) -> Table | None:
        """The Iceberg table `ns.table` as `view` sees it (None when it does not exist), its
        commits going through `catalog` (default: this one); its metadata from `known` (by
        metadata location, just read by the caller) when there."""
        return self._table_in(view, ns, table, catalog, known)

    def staging_copy(self, mtx: MultiTableTransaction) -> TrinityLakeCatalog:
        """A copy of this catalog whose table commits are staged in `mtx` instead of committed."""
        stager: TrinityLakeCatalog = copy.copy(self)
        stager._mtx = mtx
        return stager

    def stage_new_table(self, key: tuple[str, str], schema: Schema | pa.Schema, location: str | None,
                        partition_spec: PartitionSpec, sort_order: SortOrder, properties: Properties) -> StagedTable:
        """A new table's first metadata, written to its metadata file (not yet in the lakehouse)."""
        staged = self._create_staged_table(key, schema, location, partition_spec, sort_order, properties)
        self.write_staged(staged)
        return staged

    def stage_table_update(self, current: Table | None, key: tuple[str, str],
                           requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
                           ) -> StagedTable:
        """`updates` applied to `current` after checking `requirements` (PyIceberg's rules);
        nothing written."""
        return self._update_and_stage_table(current, key, requirements, updates)

    def write_staged(self, staged: StagedTable) -> None:
        """Write a staged table's metadata file."""
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)

    def write_staged_each(self, staged: list[StagedTable]) -> list[BaseException | None]:
        """Write the metadata files of `staged`, each only if absent (in flight together through
        our FileIO); per file None or its own error."""
        if staged and {id(s.io) for s in staged} == {id(self.io)} and isinstance(self.io, TrinityLakeFileIO):
            return self.io.create_many([(s.metadata_location, self._metadata_bytes(s.metadata, s.metadata_location))
                                        for s in staged])
        return [_error_of(self.write_staged, s) for s in staged]

    def write_staged_many(self, staged: list[StagedTable]) -> dict[str, bytes]:
        """Write the metadata files of `staged` (through our FileIO: their requests in flight
        together), each only if absent; their bytes by location.

        Raises:
            CommitFailedException: one of the files exists already (another writer's).
            StorageError: one could not be written.
        """
        items = [(s.metadata_location, self._metadata_bytes(s.metadata, s.metadata_location)) for s in staged]
        ios = {id(s.io) for s in staged}
        if not (ios == {id(self.io)} and isinstance(self.io, TrinityLakeFileIO)):
            for s, (loc, data) in zip(staged, items, strict=True):
                with s.io.new_output(loc).create(overwrite=False) as out:
                    out.write(data)
            return dict(items)
        for (loc, _), err in zip(items, self.io.create_many(items), strict=True):
            if isinstance(err, FileExistsError):
                raise CommitFailedException(f"metadata file {loc} exists already: another writer's") from err
            if err is not None:
                raise err
        return dict(items)

    def commit_transaction(self, txn: Transaction, what: str, written: list[str]) -> int | None:
        """Commit `txn` as this catalog commits (typed Iceberg errors; `written` deleted on conflict)."""
        return self._commit(txn, what, written)

    def delete_unreferenced(self, locations: list[str]) -> None:
        """Delete metadata files nothing references (best effort: failures are logged)."""
        self._delete_quietly(locations)

    # ---- tables ------------------------------------------------------------------------------
    def create_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        ns, table = self._ident(identifier)
        self._check_writable(f"create table {ns}.{table}")
        if not self._view().namespace_exists(ns):
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}")
        if self._view().table_exists(ns, table):
            raise TableAlreadyExistsError(f"Table already exists: {ns}.{table}")
        self._refuse_view_name(self._view(), ns, table)
        staged = self._create_staged_table((ns, table), schema, location, partition_spec, sort_order, properties)
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        self._create_def(ns, table, staged.metadata_location, f"create table {ns}.{table}", [staged.metadata_location])
        return self.load_table((ns, table))

    def stage_create_table(self, identifier: str | Identifier, schema: Schema | pa.Schema, location: str | None = None,
                           partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
                           sort_order: SortOrder = UNSORTED_SORT_ORDER,
                           properties: Properties = EMPTY_DICT) -> StagedTable:
        """A new table's first metadata and location, nothing written and nothing committed (the
        REST protocol's staged create: the client commits the table later with ``assert-create``,
        `commit_changes`)."""
        ns, table = self._ident(identifier)
        self._check_writable(f"create table {ns}.{table}")
        view = self._view()
        if not view.namespace_exists(ns):
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}")
        if view.table_exists(ns, table):
            raise TableAlreadyExistsError(f"Table already exists: {ns}.{table}")
        self._refuse_view_name(view, ns, table)
        return self._create_staged_table((ns, table), schema, location, partition_spec, sort_order, properties)

    def table_defaults(self) -> dict[str, str]:
        """Properties every table created through this catalog starts with: ours, then the
        catalog's ``table-default.<key>`` properties (the Java catalogs' convention).

        Ours: ``commit.retry.num-retries`` 0. PyIceberg re-applies a failed append on the
        refreshed table by itself; a commit whose table changed since it was loaded is refused
        instead (CommitFailedException), and the writer decides whether its change still holds.
        A catalog or table property of 4 brings PyIceberg's retries back."""
        out = dict(TABLE_DEFAULTS)
        out.update({k[len(TABLE_DEFAULT_PREFIX):]: v for k, v in self.properties.items()
                    if k.startswith(TABLE_DEFAULT_PREFIX)})
        return out

    def _create_staged_table(self, identifier: str | Identifier, schema: Schema | pa.Schema,
                             location: str | None = None,
                             partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
                             sort_order: SortOrder = UNSORTED_SORT_ORDER,
                             properties: Properties = EMPTY_DICT) -> StagedTable:
        props = {**self.table_defaults(), **properties}
        staged = super()._create_staged_table(identifier, schema, location, partition_spec, sort_order, props)
        metadata = staged.metadata
        if isinstance(schema, Schema):
            metadata = keep_defaults(schema, metadata)
        check_defaults(metadata)
        metadata = with_row_lineage(metadata)
        if metadata is not staged.metadata:
            staged = StagedTable(identifier=staged.name(), metadata=metadata, metadata_location=staged.metadata_location,
                                 io=staged.io, catalog=self)
        return staged

    def _update_and_stage_table(self, current_table: Table | None, table_identifier: Identifier,
                                requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
                                ) -> StagedTable:
        """PyIceberg's, with the Java builder's requirement messages, ids and format v3
        (`trinitylake.iceberg.table_updates`)."""
        base = current_table.metadata if current_table else None
        check_requirements(requirements, base)
        metadata = apply_updates(base if base is not None else self._empty_table_metadata(), updates,
                                 enforce_validation=current_table is None,
                                 metadata_location=current_table.metadata_location if current_table else None)
        version = self._parse_metadata_version(current_table.metadata_location) + 1 if current_table else 0
        location = load_location_provider(metadata.location, metadata.properties).new_table_metadata_file_location(version)
        return StagedTable(identifier=table_identifier, metadata=metadata, metadata_location=location,
                           io=self._load_file_io(properties=metadata.properties, location=location), catalog=self)

    @staticmethod
    def _write_metadata(metadata: TableMetadata, io: FileIO, metadata_path: str) -> None:
        """Write a metadata file, v3 included; serialized first, so a refused metadata leaves no
        file behind."""
        data = TrinityLakeCatalog._metadata_bytes(metadata, metadata_path)
        with io.new_output(metadata_path).create(overwrite=False) as out:
            out.write(data)

    @staticmethod
    def _metadata_bytes(metadata: TableMetadata, metadata_path: str) -> bytes:
        """The bytes of a metadata file (v3 included), compressed as its name says."""
        out: bytes = Compressor.get_compressor(metadata_path).bytes_compressor()(metadata_json(metadata).encode("utf-8"))
        return out

    @staticmethod
    def _refuse_view_name(view: LakehouseView, ns: str, table: str) -> None:
        """A table cannot take a view's name (Iceberg's text: the REST kit checks it)."""
        if view.view_exists(ns, table):
            raise TableAlreadyExistsError(f"View with same name already exists: {ns}.{table}")

    def _create_def(self, ns: str, table: str, metadata_location: str, what: str, written: list[str] | None = None
                    ) -> None:
        """Commit the table's definition; the metadata files in `written` (this create wrote them)
        are deleted when the create is refused, as nothing can reference them then."""
        txn = self._begin(what)
        try:
            txn.create_table(ns, table, metadata_location=metadata_location, table_type="managed")
        except AlreadyExistsError as e:
            self._abandon(txn)
            self._delete_quietly(written or [])
            raise TableAlreadyExistsError(f"Table already exists: {ns}.{table}") from e
        except ObjectNotFoundError as e:
            self._abandon(txn)
            self._delete_quietly(written or [])
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}") from e
        self._commit(txn, what, written or [])

    def register_table(self, identifier: str | Identifier, metadata_location: str, overwrite: bool = False) -> Table:
        ns, table = self._ident(identifier)
        self._check_writable(f"register table {ns}.{table}")
        self._refuse_view_name(self._view(), ns, table)
        FromInputFile.table_metadata(self.io.new_input(metadata_location))  # refuse what does not read as Iceberg metadata
        if overwrite and self._view().table_exists(ns, table):
            txn = self._begin(f"register table {ns}.{table}")
            txn.alter_table(ns, table, metadata_location=metadata_location)
            self._commit(txn, f"register table {ns}.{table}", [])
        else:
            self._create_def(ns, table, metadata_location, f"register table {ns}.{table}")
        return self.load_table((ns, table))

    def load_table(self, identifier: str | Identifier) -> Table:
        ns, table = self._ident(identifier)
        t = self._table_in(self._view(), ns, table)
        if t is None:
            raise NoSuchTableError(f"Table does not exist: {ns}.{table} (lakehouse version {self.version})")
        return t

    def drop_table(self, identifier: str | Identifier) -> None:
        ns, table = self._ident(identifier)
        txn = self._begin(f"drop table {ns}.{table}")
        try:
            txn.drop_table(ns, table)
        except ObjectNotFoundError as e:
            self._abandon(txn)
            raise NoSuchTableError(f"Table does not exist: {ns}.{table}") from e
        self._commit(txn, f"drop table {ns}.{table}", [])

    def rename_table(self, from_identifier: str | Identifier, to_identifier: str | Identifier) -> Table:
        ns, table = self._ident(from_identifier)
        to_ns, to_table = self._ident(to_identifier)
        what = f"rename table {ns}.{table} to {to_ns}.{to_table}"
        txn = self._begin(what)
        try:
            d = txn.load_table(ns, table)
            if txn.view_exists(to_ns, to_table):
                raise AlreadyExistsError(f"Cannot rename {ns}.{table} to {to_ns}.{to_table}. View already exists")
            txn.create_table(to_ns, to_table, table_type=definitions.table_type_name(d).lower(),
                             properties=dict(d.properties), format_properties=dict(d.format_properties))
            txn.drop_table(ns, table)
        except ObjectNotFoundError as e:
            self._abandon(txn)
            if not txn.namespace_exists(to_ns):
                raise NoSuchNamespaceError(f"Namespace does not exist: {to_ns}") from e
            raise NoSuchTableError(f"Table does not exist: {ns}.{table}") from e
        except AlreadyExistsError as e:
            self._abandon(txn)
            if str(e).startswith("Cannot rename"):  # the target is a view
                raise TableAlreadyExistsError(str(e)) from e
            raise TableAlreadyExistsError(f"Table already exists: {to_ns}.{to_table}") from e
        self._commit(txn, what, [])
        return self.load_table((to_ns, to_table))

    def commit_table(self, table: Table, requirements: tuple[TableRequirement, ...],
                     updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        """Commit `updates` to `table` as one lakehouse version (see the module doc).

        Raises:
            CommitFailedException: a requirement does not hold for the table's current metadata,
                or the table was changed by a concurrent commit.
            CommitStateUnknownException: the lakehouse commit's outcome is unknown.
        """
        if self._mtx is not None:
            return self._mtx.stage(table, requirements, updates)
        ns, name = self._ident(table.name())
        return self._commit_update(ns, name, requirements, updates, table)

    def commit_changes(self, identifier: str | Identifier, requirements: tuple[TableRequirement, ...],
                       updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        """Commit `updates` to a table as the Iceberg REST protocol commits: the `requirements`,
        checked against the table's current metadata as the lakehouse transaction reads it, are
        the only check (there is no loaded table to compare). A table that does not exist is
        created when the requirements hold ``assert-create`` (a create transaction).

        Raises:
            NoSuchTableError: the table does not exist and the commit does not create it.
            NoSuchNamespaceError: the commit creates a table in a namespace that does not exist.
            CommitFailedException: a requirement does not hold, or a concurrent commit changed
                the table between the read and the commit.
            CommitStateUnknownException: the lakehouse commit's outcome is unknown.
        """
        ns, name = self._ident(identifier)
        return self._commit_update(ns, name, requirements, updates, None)

    def _commit_update(self, ns: str, name: str, requirements: tuple[TableRequirement, ...],
                       updates: tuple[TableUpdate, ...], base: Table | None) -> CommitTableResponse:
        what = f"commit table {ns}.{name}"
        txn = self._begin(what)
        written: list[str] = []
        try:
            current = self._table_in(txn, ns, name)
            if base is not None:
                check_base(base, current)
            elif current is None:
                check_creates(txn, ns, name, requirements)
            staged = self._update_and_stage_table(current, (ns, name), requirements, updates)
            if current is not None and staged.metadata == current.metadata:
                self._abandon(txn)
                return commit_response(current.metadata, current.metadata_location)
            self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
            written.append(staged.metadata_location)
            if current is None:
                txn.create_table(ns, name, metadata_location=staged.metadata_location, table_type="managed")
            else:
                txn.alter_table(ns, name, metadata_location=staged.metadata_location)
        except BaseException:
            self._abandon(txn)
            self._delete_quietly(written)
            raise
        self._commit(txn, what, written)
        return commit_response(staged.metadata, staged.metadata_location)

    def multi_table_transaction(self, write_later: bool = False) -> MultiTableTransaction:
        """Changes to several tables committed as one lakehouse version, all or nothing::

            with catalog.multi_table_transaction() as mtx:
                mtx.load_table("sales.orders").append(orders)
                mtx.load_table("sales.lines").append(lines)

        Tables loaded through `mtx` stage their commits (their metadata files are written, the
        lakehouse is not touched); leaving the block commits them all in one version, and an
        exception inside it commits nothing. With `write_later`, the staged metadata files are
        written at the commit, all together (`MultiTableTransaction`).
        """
        self._check_writable("begin a multi-table transaction")
        return MultiTableTransaction(self, write_later)


def _error_of(fn: Callable[[StagedTable], None], staged: StagedTable) -> BaseException | None:
    try:
        fn(staged)
    except Exception as e:  # noqa: BLE001 - this file's own error, returned
        return e
    return None
