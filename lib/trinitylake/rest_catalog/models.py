"""Request bodies of the Iceberg REST protocol (pydantic), as Java and Python clients send them.

PyIceberg's own request models are client-side: they require keys the Java client omits when
null (a create request's ``location``, ``partition-spec``, ``write-order``; a commit's
``identifier``). These accept both; the parts that carry Iceberg semantics (schemas, specs,
sort orders, requirements, updates) are PyIceberg's models, so the server reads exactly what
PyIceberg's own catalog commit would apply.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate


class Body(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class TableIdent(Body):
    namespace: list[str]
    name: str


class CreateNamespace(Body):
    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespaceProperties(Body):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


class CreateTable(Body):
    name: str
    location: str | None = None
    table_schema: Schema = Field(alias="schema")
    partition_spec: PartitionSpec | None = Field(default=None, alias="partition-spec")
    write_order: SortOrder | None = Field(default=None, alias="write-order")
    stage_create: bool = Field(default=False, alias="stage-create")
    properties: dict[str, str] = Field(default_factory=dict)


class RegisterTable(Body):
    name: str
    metadata_location: str = Field(alias="metadata-location")
    overwrite: bool = False


class CommitTable(Body):
    identifier: TableIdent | None = None
    requirements: tuple[TableRequirement, ...] = Field(default_factory=tuple)
    updates: tuple[TableUpdate, ...] = Field(default_factory=tuple)


class CommitTransaction(Body):
    table_changes: list[CommitTable] = Field(alias="table-changes", min_length=1)


class RenameTable(Body):
    source: TableIdent
    destination: TableIdent
