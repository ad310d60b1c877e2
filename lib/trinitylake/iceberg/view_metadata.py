"""Iceberg view metadata, built and checked as Iceberg's Java ``ViewMetadata.Builder`` does.

`ViewMetadataBuilder` applies the REST protocol's view updates (``assign-uuid``,
``upgrade-format-version``, ``add-schema``, ``set-location``, ``set-properties``,
``remove-properties``, ``add-view-version``, ``set-current-view-version``): schema ids
reassigned (an identical schema reuses its id), a version identical to a known one reuses its
id, ``-1`` means the last added schema or version, one ``version-log`` entry per change of the
current version, old versions expired past ``version.history.num-entries``, and a replace that
drops a dialect refused unless ``replace.drop-dialect.allowed``. The metadata is kept as the
JSON Iceberg writes (plain dicts); schemas are compared through PyIceberg's ``Schema``.
`check_requirements` checks a view commit's REST requirements.

Refusals are Java's exception types (`ViewArgumentError`, `ViewStateError`,
`ViewValidationError`), with its texts. The metadata's files are `trinitylake.iceberg.view_files`;
the catalog's view operations `trinitylake.iceberg.views`.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema

Json = dict[str, Any]

SUPPORTED_VIEW_FORMAT_VERSION = 1
LAST_ADDED = -1
INITIAL_SCHEMA_ID = 0
VERSION_HISTORY_SIZE = "version.history.num-entries"
VERSION_HISTORY_SIZE_DEFAULT = 10
REPLACE_DROP_DIALECT_ALLOWED = "replace.drop-dialect.allowed"


class ViewArgumentError(ValueError):
    """Java's IllegalArgumentException of the view builder (a REST 400 ``IllegalArgumentException``)."""


class ViewStateError(ValueError):
    """Java's IllegalStateException of the view builder (a REST 400 ``IllegalStateException``)."""


class ViewValidationError(ValueError):
    """Java's ValidationException of the view builder (a REST 400 ``ValidationException``)."""


def require(ok: bool, exc: type[ValueError], message: str) -> None:
    """Raise `exc` with `message` unless `ok` (Java's ``Preconditions.check*``)."""
    if not ok:
        raise exc(message)


def now_ms() -> int:
    """The wall clock in epoch milliseconds (a version's or a log entry's ``timestamp-ms``)."""
    return int(time.time() * 1000)


# ---- parts of the metadata, as Iceberg's JSON ---------------------------------------------------
def _schema(obj: Mapping[str, Any]) -> Schema:
    try:
        return Schema.model_validate(obj)
    except ValueError as e:
        raise ViewArgumentError(f"Cannot parse schema: {e}") from None


def _schema_json(schema: Schema) -> Json:
    out: Json = json.loads(schema.model_dump_json(by_alias=True, exclude_none=True))
    return out


def same_schema(one: Mapping[str, Any], two: Mapping[str, Any]) -> bool:
    """Java's ``Schema.sameSchema``: the same struct and identifier fields, ids aside."""
    a, b = _schema(one), _schema(two)
    return a.as_struct() == b.as_struct() and sorted(a.identifier_field_ids) == sorted(b.identifier_field_ids)


def _representation(r: Mapping[str, Any]) -> Json:
    kind = r.get("type")
    if kind != "sql":
        raise ViewStateError(f"Found unsupported view representations: [{kind}]")
    sql, dialect = r.get("sql"), r.get("dialect")
    require(isinstance(sql, str), ViewArgumentError, "Invalid sql: null")
    require(isinstance(dialect, str) and bool(dialect), ViewArgumentError,
           "Invalid dialect: " + ("(empty string)" if dialect == "" else "null"))
    return {"type": "sql", "sql": sql, "dialect": dialect}


def view_version(v: Mapping[str, Any]) -> Json:
    """A view version as Iceberg writes it (keys in Java's order, defaults filled)."""
    for key in ("version-id", "schema-id", "representations", "default-namespace"):
        require(key in v and v[key] is not None, ViewArgumentError, f"Cannot parse missing field: {key}")
    out: Json = {
        "version-id": int(v["version-id"]),
        "timestamp-ms": int(v.get("timestamp-ms") or now_ms()),
        "schema-id": int(v["schema-id"]),
        "summary": {str(k): str(x) for k, x in (v.get("summary") or {}).items()},
    }
    if v.get("default-catalog") is not None:
        out["default-catalog"] = str(v["default-catalog"])
    out["default-namespace"] = [str(x) for x in v["default-namespace"]]
    out["representations"] = [_representation(r) for r in v["representations"]]
    return out


def _same_version(one: Mapping[str, Any], two: Mapping[str, Any]) -> bool:
    """Java's ``sameViewVersion``: id, timestamp and operation aside."""
    return (one.get("summary", {}) == two.get("summary", {})
            and one["representations"] == two["representations"]
            and one.get("default-catalog") == two.get("default-catalog")
            and one["default-namespace"] == two["default-namespace"]
            and one["schema-id"] == two["schema-id"])


def _dialects(version: Mapping[str, Any]) -> set[str]:
    return {r["dialect"].lower() for r in version["representations"] if r.get("type") == "sql"}


def _int_property(props: Mapping[str, str], key: str, default: int) -> int:
    raw = props.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ViewArgumentError(f"{key} must be an integer, got {raw!r}") from None


def _bool_property(props: Mapping[str, str], key: str) -> bool:
    return str(props.get(key, "false")).strip().lower() == "true"


# ---- the builder ----------------------------------------------------------------------------------
class ViewMetadataBuilder:
    """Iceberg's ``ViewMetadata.Builder`` over the metadata JSON (see the module doc)."""

    def __init__(self, base: Mapping[str, Any] | None = None):
        b = copy.deepcopy(dict(base)) if base is not None else {}
        self.format_version: int = int(b.get("format-version", SUPPORTED_VIEW_FORMAT_VERSION))
        self.uuid: str | None = b.get("view-uuid")
        self.location: str | None = b.get("location")
        self.properties: dict[str, str] = dict(b.get("properties") or {})
        self.schemas: list[Json] = list(b.get("schemas") or [])
        self.versions: list[Json] = list(b.get("versions") or [])
        self.history: list[Json] = list(b.get("version-log") or [])
        self.current_version_id: int = int(b.get("current-version-id", 0) or 0)
        self.changes: list[Json] = []
        self._last_added_version: int | None = None
        self._last_added_schema: int | None = None
        self._history_entry: Json | None = None
        self._previous = self._by_id(self.current_version_id) if base is not None else None

    def _by_id(self, version_id: int) -> Json | None:
        return next((v for v in self.versions if v["version-id"] == version_id), None)

    def _schema_ids(self) -> set[int]:
        return {int(s.get("schema-id", 0)) for s in self.schemas}

    def _added_version_ids(self) -> set[int]:
        return {c["view-version"]["version-id"] for c in self.changes if c["action"] == "add-view-version"}

    # -- updates
    def upgrade_format_version(self, version: int) -> ViewMetadataBuilder:
        require(version >= self.format_version, ViewArgumentError,
               f"Cannot downgrade v{self.format_version} view to v{version}")
        require(version <= SUPPORTED_VIEW_FORMAT_VERSION, ViewArgumentError, f"Unsupported format version: {version}")
        if version != self.format_version:
            self.format_version = version
            self.changes.append({"action": "upgrade-format-version", "format-version": version})
        return self

    def set_location(self, location: str | None) -> ViewMetadataBuilder:
        require(location is not None, ViewArgumentError, "Invalid location: null")
        if location != self.location:
            self.location = location
            self.changes.append({"action": "set-location", "location": location})
        return self

    def set_properties(self, updates: Mapping[str, str]) -> ViewMetadataBuilder:
        if updates:
            self.properties.update({str(k): str(v) for k, v in updates.items()})
            self.changes.append({"action": "set-properties", "updates": dict(updates)})
        return self

    def remove_properties(self, removals: Iterable[str]) -> ViewMetadataBuilder:
        keys = list(removals)
        if keys:
            for k in keys:
                self.properties.pop(k, None)
            self.changes.append({"action": "remove-properties", "removals": keys})
        return self

    def assign_uuid(self, new_uuid: str | None) -> ViewMetadataBuilder:
        require(new_uuid is not None, ViewArgumentError, "Cannot set uuid to null")
        require(self.uuid is None or new_uuid == self.uuid, ViewArgumentError, "Cannot reassign uuid")
        if new_uuid != self.uuid:
            self.uuid = new_uuid
            self.changes.append({"action": "assign-uuid", "uuid": new_uuid})
        return self

    def add_schema(self, schema: Mapping[str, Any]) -> ViewMetadataBuilder:
        self._add_schema(schema)
        return self

    def _add_schema(self, schema: Mapping[str, Any]) -> int:
        new_id = INITIAL_SCHEMA_ID
        for s in self.schemas:
            if same_schema(s, schema):
                return int(s.get("schema-id", 0))
            if int(s.get("schema-id", 0)) >= new_id:
                new_id = int(s.get("schema-id", 0)) + 1
        parsed = _schema(schema)
        fresh = _schema_json(Schema(*parsed.fields, schema_id=new_id, identifier_field_ids=parsed.identifier_field_ids))
        self.schemas.append(fresh)
        self.changes.append({"action": "add-schema", "schema": fresh})
        self._last_added_schema = new_id
        return new_id

    def add_version(self, version: Mapping[str, Any]) -> ViewMetadataBuilder:
        self._add_version(view_version(version))
        return self

    def _add_version(self, version: Json) -> int:
        new_id = version["version-id"]
        for v in self.versions:
            if _same_version(v, version):
                new_id = v["version-id"]
                break
            if v["version-id"] >= new_id:
                new_id = v["version-id"] + 1
        version = {**version, "version-id": new_id}
        if self._by_id(new_id) is not None:
            self._last_added_version = new_id if new_id in self._added_version_ids() else None
            return new_id
        if version["schema-id"] == LAST_ADDED:
            require(self._last_added_schema is not None, ViewValidationError,
                   "Cannot set last added schema: no schema has been added")
            version["schema-id"] = self._last_added_schema
        require(version["schema-id"] in self._schema_ids(), ViewArgumentError,
               f"Cannot add version with unknown schema: {version['schema-id']}")
        seen: set[str] = set()
        for r in version["representations"]:
            d = r["dialect"].lower()
            require(d not in seen, ViewArgumentError, f"Invalid view version: Cannot add multiple queries for dialect {d}")
            seen.add(d)
        self.versions.append(version)
        change = dict(version)
        if self._last_added_schema is not None and version["schema-id"] == self._last_added_schema:
            change["schema-id"] = LAST_ADDED
        self.changes.append({"action": "add-view-version", "view-version": change})
        self._last_added_version = new_id
        return new_id

    def set_current_version_id(self, version_id: int) -> ViewMetadataBuilder:
        if version_id == LAST_ADDED:
            require(self._last_added_version is not None, ViewValidationError,
                   "Cannot set last version id: no current version id has been set")
            assert self._last_added_version is not None
            return self.set_current_version_id(self._last_added_version)
        if version_id == self.current_version_id:
            return self
        version = self._by_id(version_id)
        require(version is not None, ViewArgumentError, f"Cannot set current version to unknown version: {version_id}")
        assert version is not None
        self.current_version_id = version_id
        added = version_id in self._added_version_ids()
        self.changes.append({"action": "set-current-view-version",
                             "view-version-id": LAST_ADDED if self._last_added_version == version_id else version_id})
        self._history_entry = {"timestamp-ms": version["timestamp-ms"] if added else now_ms(), "version-id": version_id}
        return self

    def set_current_version(self, version: Mapping[str, Any], schema: Mapping[str, Any]) -> ViewMetadataBuilder:
        schema_id = self._add_schema(schema)
        v = view_version({**version, "schema-id": schema_id})
        return self.set_current_version_id(self._add_version(v))

    def apply(self, update: Mapping[str, Any]) -> ViewMetadataBuilder:
        """One REST ``MetadataUpdate`` (its JSON, ``action`` first)."""
        action = update.get("action")
        if action == "assign-uuid":
            return self.assign_uuid(update.get("uuid"))
        if action == "upgrade-format-version":
            return self.upgrade_format_version(int(update["format-version"]))
        if action == "add-schema":
            return self.add_schema(update["schema"])
        if action == "set-location":
            return self.set_location(update.get("location"))
        if action == "set-properties":
            return self.set_properties(update.get("updates") or {})
        if action == "remove-properties":
            return self.remove_properties(update.get("removals") or [])
        if action == "add-view-version":
            return self.add_version(update["view-version"])
        if action == "set-current-view-version":
            return self.set_current_version_id(int(update["view-version-id"]))
        raise ViewArgumentError(f"Cannot apply update {action} to a view")

    # -- the result
    def build(self) -> Json:
        require(self.location is not None, ViewArgumentError, "Invalid location: null")
        require(bool(self.versions), ViewArgumentError, "Invalid view: no versions were added")
        history = list(self.history)
        if self._history_entry is not None:
            history.append(self._history_entry)
        current = self._by_id(self.current_version_id)
        require(current is not None, ViewArgumentError,
               f"Cannot find current version {self.current_version_id} in view versions: "
               f"{sorted(v['version-id'] for v in self.versions)}")
        assert current is not None
        if self._previous is not None and not _bool_property(self.properties, REPLACE_DROP_DIALECT_ALLOWED):
            before, after = _dialects(self._previous), _dialects(current)
            require(before <= after, ViewStateError,
                   f"Cannot replace view due to loss of view dialects ({REPLACE_DROP_DIALECT_ALLOWED}=false):\n"
                   f"Previous dialects: {sorted(before)}\nNew dialects: {sorted(after)}")
        size = _int_property(self.properties, VERSION_HISTORY_SIZE, VERSION_HISTORY_SIZE_DEFAULT)
        require(size > 0, ViewArgumentError, f"{VERSION_HISTORY_SIZE} must be positive but was {size}")
        keep = max(len(self._added_version_ids() | {self.current_version_id}), size)
        versions = self.versions
        if len(versions) > keep:
            versions = _expire_versions(versions, keep, current)
            ids = {v["version-id"] for v in versions}
            retained: list[Json] = []
            for entry in history:
                if entry["version-id"] in ids:
                    retained.append(entry)
                else:
                    retained.clear()  # history past an unknown version is cleared
            history = retained
        out: Json = {"view-uuid": self.uuid or str(uuid.uuid4()), "format-version": self.format_version,
                     "location": self.location}
        if self.properties:
            out["properties"] = dict(self.properties)
        out.update({"schemas": self.schemas, "current-version-id": self.current_version_id, "versions": versions,
                    "version-log": history})
        return out


def _expire_versions(versions: Sequence[Json], keep: int, current: Json) -> list[Json]:
    """Java's ``expireVersions``: the current version and the newest others, by id."""
    out = [current]
    for v in sorted(versions, key=lambda x: x["version-id"], reverse=True)[:keep]:
        if len(out) == keep:
            break
        if v["version-id"] != current["version-id"]:
            out.append(v)
    return out


def check_requirements(requirements: Sequence[Mapping[str, Any]], base: Mapping[str, Any]) -> None:
    """The REST requirements of a view commit (``assert-view-uuid``), as Iceberg words them.

    Raises:
        CommitFailedException: a requirement does not hold.
        ViewArgumentError: a requirement a view cannot have.
    """
    for r in requirements:
        kind = r.get("type")
        if kind == "assert-view-uuid":
            want = str(r.get("uuid"))
            if want.lower() != str(base.get("view-uuid", "")).lower():
                raise CommitFailedException(
                    f"Requirement failed: view UUID does not match: expected {base.get('view-uuid')} != {want}")
        else:
            raise ViewArgumentError(f"Cannot validate requirement {kind} against a view")
