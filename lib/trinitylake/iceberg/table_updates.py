"""A commit's requirements and updates applied as Iceberg's Java ``TableMetadata`` builder applies
them, where PyIceberg 0.12's own `update_table_metadata` differs:

* **Requirements** fail with the Java reference server's messages (``UpdateRequirement``), e.g.
  ``Requirement failed: current schema changed: expected id 0 != 1``.
* **Ids are reassigned.** A schema, partition spec or sort order a commit adds takes the id of an
  equal one the table already has, or the next free id; ``-1`` in a ``set-current-schema``,
  ``set-default-spec`` or ``set-default-sort-order`` means the one this commit added last. So two
  concurrent replace transactions with different sort orders both commit (the second order gets
  id 2, where PyIceberg refuses "Sort-order with id 1 already exists").
* **Format v3.** ``upgrade-format-version`` to 3 is applied (``next-row-id`` starts at 0); a
  v3 snapshot must carry ``first-row-id`` no lower than the table's ``next-row-id``, which grows by
  its ``added-rows`` (row lineage); schema fields may carry ``initial-default``/``write-default``
  from v3 on. `metadata_json` writes v3 metadata, which PyIceberg's model refuses to serialize.
* Removing a property the table does not have is a no-op (PyIceberg raises ``KeyError``), and
  `SERVED_ONLY` properties (what the catalog server adds to the tables it serves) are never stored,
  nor the served GC switches a commit echoes back with them (`SERVED_ECHO`).

Everything else is PyIceberg's own per-update code (`_apply_table_update`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema, index_by_id
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil, TableMetadataV2, TableMetadataV3
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSnapshotUpdate,
    AddSortOrderUpdate,
    AssertCreate,
    AssertCurrentSchemaId,
    AssertDefaultSortOrderId,
    AssertDefaultSpecId,
    AssertLastAssignedFieldId,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemovePartitionStatisticsUpdate,
    RemovePropertiesUpdate,
    RemoveStatisticsUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
    SetPropertiesUpdate,
    TableRequirement,
    TableUpdate,
    UpgradeFormatVersionUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.types import StructType
from pyiceberg.utils.datetime import datetime_to_millis

#: The newest table format version this catalog writes (PyIceberg 0.12 writes up to 2).
MAX_FORMAT_VERSION = 3
#: Format version from which tables track row lineage and fields may have default values.
ROW_LINEAGE_VERSION = 3
#: Iceberg's GC switches and the note the catalog server serves every table with
#: (`trinitylake.rest_catalog.served`): the note is never stored, and a commit that carries it echoes
#: the served values back, which are then not stored either (they are not the user's opt-out).
GC_ENABLED = "gc.enabled"
DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
GC_NOTE = "trinitylake.gc"
SERVED_ONLY = frozenset({GC_NOTE})
SERVED_ECHO = {GC_ENABLED: "false", DELETE_AFTER_COMMIT: "false"}


# ---- requirements -------------------------------------------------------------------------------------
def _failed(message: str) -> CommitFailedException:
    return CommitFailedException(f"Requirement failed: {message}")


def check_requirement(req: TableRequirement, base: TableMetadata | None) -> None:
    """Raise CommitFailedException, with the Java reference's message, when `req` does not hold
    for `base` (None: the table does not exist)."""
    if isinstance(req, AssertCreate):
        if base is not None:
            raise _failed("table already exists")
        return
    if base is None:
        raise _failed("current table metadata is missing")
    if isinstance(req, AssertTableUUID):
        if str(req.uuid).lower() != str(base.table_uuid).lower():
            raise _failed(f"UUID does not match: expected {base.table_uuid} != {req.uuid}")
    elif isinstance(req, AssertRefSnapshotId):
        ref = base.refs.get(req.ref)
        if ref is not None:
            kind = "branch" if ref.snapshot_ref_type == SnapshotRefType.BRANCH else "tag"
            if req.snapshot_id is None:
                raise _failed(f"{kind} {req.ref} was created concurrently")
            if req.snapshot_id != ref.snapshot_id:
                raise _failed(f"{kind} {req.ref} has changed: expected id {req.snapshot_id} != {ref.snapshot_id}")
        elif req.snapshot_id is not None:
            raise _failed(f"branch or tag {req.ref} is missing, expected {req.snapshot_id}")
    elif isinstance(req, AssertLastAssignedFieldId):
        if base.last_column_id != req.last_assigned_field_id:
            raise _failed(f"last assigned field id changed: expected id {req.last_assigned_field_id} != "
                          f"{base.last_column_id}")
    elif isinstance(req, AssertCurrentSchemaId):
        if base.current_schema_id != req.current_schema_id:
            raise _failed(f"current schema changed: expected id {req.current_schema_id} != {base.current_schema_id}")
    elif isinstance(req, AssertLastAssignedPartitionId):
        if base.last_partition_id != req.last_assigned_partition_id:
            raise _failed(f"last assigned partition id changed: expected id {req.last_assigned_partition_id} != "
                          f"{base.last_partition_id}")
    elif isinstance(req, AssertDefaultSpecId):
        if base.default_spec_id != req.default_spec_id:
            raise _failed(f"default partition spec changed: expected id {req.default_spec_id} != "
                          f"{base.default_spec_id}")
    elif isinstance(req, AssertDefaultSortOrderId):
        if base.default_sort_order_id != req.default_sort_order_id:
            raise _failed(f"default sort order changed: expected id {req.default_sort_order_id} != "
                          f"{base.default_sort_order_id}")
    else:  # a requirement type PyIceberg knows and we do not: its own check
        req.validate(base)


def check_requirements(requirements: Iterable[TableRequirement], base: TableMetadata | None) -> None:
    """`check_requirement` for each of `requirements`, in order."""
    for req in requirements:
        check_requirement(req, base)


# ---- updates ------------------------------------------------------------------------------------------
def _same_spec(a: PartitionSpec, b: PartitionSpec) -> bool:
    """Java's ``PartitionSpec.compatibleWith``: the same fields (source, transform, name) in order."""
    return len(a.fields) == len(b.fields) and all(
        x.source_id == y.source_id and str(x.transform) == str(y.transform) and x.name == y.name
        for x, y in zip(a.fields, b.fields, strict=True))


def _same_order(a: SortOrder, b: SortOrder) -> bool:
    return list(a.fields) == list(b.fields)


def _same_schema(a: Schema, b: Schema) -> bool:
    return a.fields == b.fields and set(a.identifier_field_ids) == set(b.identifier_field_ids)


class _Builder:
    """One commit's updates applied in order to a running metadata (see the module doc)."""

    def __init__(self, base: TableMetadata):
        self.md = base
        self.context = _TableMetadataUpdateContext()
        self.last_schema: int | None = None
        self.last_spec: int | None = None
        self.last_order: int | None = None
        self.added_schemas: set[int] = set()
        self.added_specs: set[int] = set()
        self.added_orders: set[int] = set()

    def _apply(self, update: TableUpdate) -> None:
        self.md = _apply_table_update(update, self.md, self.context)

    def apply(self, u: TableUpdate) -> None:  # noqa: C901 - one branch per update the builder treats itself
        if isinstance(u, UpgradeFormatVersionUpdate):
            self._upgrade(u)
        elif isinstance(u, AddSchemaUpdate):
            self._add_schema(u.schema_)
        elif isinstance(u, SetCurrentSchemaUpdate):
            self._apply(SetCurrentSchemaUpdate.model_validate({"schema-id": self._last(u.schema_id, self.last_schema, "schema")}))
        elif isinstance(u, AddPartitionSpecUpdate):
            self._add_spec(u.spec)
        elif isinstance(u, SetDefaultSpecUpdate):
            self._apply(SetDefaultSpecUpdate.model_validate({"spec-id": self._last(u.spec_id, self.last_spec, "spec")}))
        elif isinstance(u, AddSortOrderUpdate):
            self._add_order(u.sort_order)
        elif isinstance(u, SetDefaultSortOrderUpdate):
            oid = self._last(u.sort_order_id, self.last_order, "sort order")
            self._apply(SetDefaultSortOrderUpdate.model_validate({"sort-order-id": oid}))
        elif isinstance(u, AddSnapshotUpdate):
            self._add_snapshot(u)
        elif isinstance(u, SetPropertiesUpdate):
            echo = any(k in SERVED_ONLY for k in u.updates)
            kept = {k: v for k, v in u.updates.items()
                    if k not in SERVED_ONLY and not (echo and SERVED_ECHO.get(k) == str(v).strip().lower())}
            if kept:
                self._apply(SetPropertiesUpdate(updates=kept))
        elif isinstance(u, RemovePropertiesUpdate):
            present = [k for k in u.removals if k in self.md.properties]
            if present:
                self._apply(RemovePropertiesUpdate(removals=present))
        elif isinstance(u, RemoveStatisticsUpdate | RemovePartitionStatisticsUpdate):
            # Java's builder ignores a removal of statistics that are not there; its expiry sends
            # remove-snapshots, then remove-statistics of those snapshots, which the first update
            # already dropped (PyIceberg raises "does not exist": a 400 for Spark's expiry).
            held = self.md.statistics if isinstance(u, RemoveStatisticsUpdate) else self.md.partition_statistics
            if any(f.snapshot_id == u.snapshot_id for f in held):
                self._apply(u)
        else:
            self._apply(u)

    @staticmethod
    def _last(asked: int, last: int | None, what: str) -> int:
        if asked != -1:
            return asked
        if last is None:
            raise ValueError(f"Cannot set last added {what}: no {what} has been added")
        return last

    def _upgrade(self, u: UpgradeFormatVersionUpdate) -> None:
        have, want = self.md.format_version, u.format_version
        if want > MAX_FORMAT_VERSION:
            raise ValueError(f"Cannot upgrade table to unsupported format version: v{want} "
                             f"(supported: v{MAX_FORMAT_VERSION})")
        if want < have:
            raise ValueError(f"Cannot downgrade v{have} table to v{want}")
        if want == have:
            return
        changed: dict[str, object] = {"format_version": want}
        if want >= ROW_LINEAGE_VERSION and getattr(self.md, "next_row_id", None) is None:
            changed["next_row_id"] = 0
        model: type[TableMetadataV2] | type[TableMetadataV3] = TableMetadataV3 if want == 3 else TableMetadataV2
        self.md = model.model_construct(**dict(self.md.model_copy(update=changed)))
        self.context.add_update(u)

    def _add_schema(self, schema: Schema) -> None:
        new_id = self.md.current_schema_id
        for s in self.md.schemas:
            if _same_schema(s, schema):
                new_id = s.schema_id
                break
            if s.schema_id >= new_id:
                new_id = s.schema_id + 1
        last_column_id = max(self.md.last_column_id, schema.highest_field_id)
        if any(s.schema_id == new_id for s in self.md.schemas):
            if last_column_id != self.md.last_column_id:
                self.md = self.md.model_copy(update={"last_column_id": last_column_id})
            self.last_schema = new_id if new_id in self.added_schemas else None
            return
        if schema.schema_id != new_id:
            schema = Schema(*schema.fields, schema_id=new_id, identifier_field_ids=schema.identifier_field_ids)
        self._apply(AddSchemaUpdate(schema=schema))
        self.added_schemas.add(new_id)
        self.last_schema = new_id

    def _add_spec(self, spec: PartitionSpec) -> None:
        new_id = 0
        for s in self.md.partition_specs:
            if _same_spec(s, spec):
                self.last_spec = s.spec_id if s.spec_id in self.added_specs else None
                return
            new_id = max(new_id, s.spec_id + 1)
        if spec.spec_id != new_id:
            spec = PartitionSpec(*spec.fields, spec_id=new_id)
        self._apply(AddPartitionSpecUpdate(spec=spec))
        self.added_specs.add(new_id)
        self.last_spec = new_id

    def _add_order(self, order: SortOrder) -> None:
        if order.is_unsorted:
            order, new_id = UNSORTED_SORT_ORDER, UNSORTED_SORT_ORDER.order_id
        else:
            new_id = 1
            for o in self.md.sort_orders:
                if _same_order(o, order):
                    new_id = o.order_id
                    break
                new_id = max(new_id, o.order_id + 1)
        if any(o.order_id == new_id for o in self.md.sort_orders):
            self.last_order = new_id if new_id in self.added_orders else None
            return
        if order.order_id != new_id:
            order = SortOrder(*order.fields, order_id=new_id)
        self._apply(AddSortOrderUpdate.model_validate({"sort-order": order}))
        self.added_orders.add(new_id)
        self.last_order = new_id

    def _add_snapshot(self, u: AddSnapshotUpdate) -> None:
        if self.md.format_version < ROW_LINEAGE_VERSION:
            self._apply(u)
            return
        snap = u.snapshot
        next_row_id = getattr(self.md, "next_row_id", None) or 0
        if snap.first_row_id is None:
            raise ValueError("Cannot add a snapshot: first-row-id is null")
        if snap.first_row_id < next_row_id:
            raise CommitFailedException(f"Cannot add a snapshot, first-row-id is behind table next-row-id: "
                                        f"{snap.first_row_id} < {next_row_id}")
        if snap.added_rows is None:
            raise ValueError("Cannot add a snapshot: added-rows is null")
        last = getattr(self.md, "last_sequence_number", 0) or 0
        if snap.parent_snapshot_id is not None and snap.sequence_number is not None and snap.sequence_number <= last:
            raise CommitFailedException(f"Cannot add snapshot with sequence number {snap.sequence_number} older than "
                                        f"last sequence number {last}")  # PyIceberg checks it for v2 only
        self.md = self.md.model_copy(update={"next_row_id": next_row_id})
        self._apply(u)  # PyIceberg's own: next-row-id grows by added-rows


def check_defaults(metadata: TableMetadata) -> None:
    """Default values (``initial-default``, ``write-default``) need format v3 (Java's
    ``Schema.checkCompatibility``)."""
    if metadata.format_version >= ROW_LINEAGE_VERSION:
        return
    for schema in metadata.schemas:
        schema.check_format_version_compatibility(metadata.format_version)
        for f in index_by_id(schema).values():
            for kind, value in (("initial", f.initial_default), ("write", f.write_default)):
                if value is not None:
                    raise ValueError(f"Invalid {kind} default for {f.name}: non-null default ({value}) is not "
                                     f"supported until v{ROW_LINEAGE_VERSION}")


def apply_updates(base: TableMetadata, updates: Iterable[TableUpdate], *, enforce_validation: bool = False,
                  metadata_location: str | None = None) -> TableMetadata:
    """`updates` applied to `base` (see the module doc); what PyIceberg's `update_table_metadata`
    returns, with the Java builder's ids, format v3 and messages."""
    b = _Builder(base)
    for u in updates:
        b.apply(u)
    md = b.md
    if b.context.has_changes():
        if metadata_location:
            md = _update_table_metadata_log(md, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == md.last_updated_ms:
            md = md.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    md.spec().check_compatible(md.schema())
    md.sort_order().check_compatible(md.schema())
    check_defaults(md)
    if enforce_validation:
        return TableMetadataUtil.parse_obj(md.model_dump())
    # No deep copy (PyIceberg's `update_table_metadata` makes one): every update builds new
    # models and containers (`model_copy(update=...)`) and never changes `base`'s in place, so
    # the parts the result shares with `base` are as immutable as `base` is. The copy was the
    # largest part of a catalog server's commit (pydantic's deepcopy of the whole metadata).
    return md


def _field_defaults(given: StructType, fresh: StructType) -> StructType:
    fields = []
    for g, f in zip(given.fields, fresh.fields, strict=True):
        if isinstance(g.field_type, StructType) and isinstance(f.field_type, StructType):
            f = f.model_copy(update={"field_type": _field_defaults(g.field_type, f.field_type)})
        if g.initial_default is not None or g.write_default is not None:
            f = f.model_copy(update={"initial_default": g.initial_default, "write_default": g.write_default})
        fields.append(f)
    return StructType(*fields)


def keep_defaults(given: Schema, metadata: TableMetadata) -> TableMetadata:
    """A new table's metadata whose schema keeps the default values of the schema it was created
    with (PyIceberg's fresh ids drop ``initial-default`` and ``write-default``)."""
    fresh = metadata.schema()
    if not any(f.initial_default is not None or f.write_default is not None for f in index_by_id(given).values()):
        return metadata
    kept = Schema(*_field_defaults(given.as_struct(), fresh.as_struct()).fields, schema_id=fresh.schema_id,
                  identifier_field_ids=fresh.identifier_field_ids)
    return metadata.model_copy(update={"schemas": [kept if s.schema_id == fresh.schema_id else s
                                                   for s in metadata.schemas]})


def with_row_lineage(metadata: TableMetadata) -> TableMetadata:
    """A new table's metadata as Java starts it: a v3 table's ``next-row-id`` is 0."""
    if metadata.format_version >= ROW_LINEAGE_VERSION and getattr(metadata, "next_row_id", None) is None:
        return metadata.model_copy(update={"next_row_id": 0})
    return metadata


def metadata_json(metadata: TableMetadata) -> str:
    """Table metadata as JSON, v3 included (PyIceberg's v3 model refuses ``model_dump_json``)."""
    return IcebergBaseModel.model_dump_json(metadata)
