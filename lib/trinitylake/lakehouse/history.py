"""A lakehouse's version history: the versions it keeps with their commit facts, what each one
changed (its change set, a diff of two roots) and the changes described for people.

`Lakehouse` delegates its history methods here; these functions read through the narrow face
`ports.VersionSource` (which `Lakehouse` satisfies), so this module never imports
`lakehouse.lakehouse`.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from trinitylake.control import VersionInfo
from trinitylake.errors import TrinityLakeError, ValidationError, VersionNotFoundError
from trinitylake.format import keys
from trinitylake.format.paths import root_version
from trinitylake.json_data import JsonObject
from trinitylake.lakehouse.changes import ChangeSet
from trinitylake.lakehouse.view import LakehouseView

if TYPE_CHECKING:
    from trinitylake.lakehouse.ports import VersionSource
    from trinitylake.lakehouse.roots import RootRef

log = logging.getLogger(__name__)


def versions(lh: VersionSource) -> list[JsonObject]:
    """Every available version, oldest first, with its commit facts. A root that cannot be
    read is listed with ``corrupt`` = its typed error in one line (None for the others), so
    one bad old version does not hide the rest."""

    latest = lh.latest_version()
    listed = [v for v in lh.listed_versions() if v <= latest]
    out: list[JsonObject] = []
    for v in listed:
        row: JsonObject
        try:
            r = lh.load_root(v)
            row = {
                "version": v,
                "created_at": fmt_ms(r.created_at_millis),
                "created_at_millis": r.created_at_millis,
                "txn_id": r.txn_id,
                "txn_seq": r.txn_seq,
                "previous_version": _version_of(r.previous_root),
                "rollback_from_version": _version_of(r.rollback_from_root),
                "rollback_to_version": _version_of(r.rollback_to_root),
                "changes": None,
                "corrupt": None,
            }
        except TrinityLakeError as e:
            row = {"version": v, "created_at": None, "created_at_millis": None, "txn_id": None, "txn_seq": None,
                   "previous_version": None, "rollback_from_version": None, "rollback_to_version": None,
                   "changes": None, "corrupt": _one_line(e)}
        else:
            try:
                row["changes"] = len(change_set(lh, v, r).keys)
            except TrinityLakeError as e:  # e.g. the previous root, diffed against, is corrupt
                row["changes_error"] = _one_line(e)
        out.append(row)
    return out


def version_info(lh: VersionSource, version: int) -> VersionInfo:
    """What the tree says about one version, for the control table's history."""

    r = lh.load_root(version)
    return VersionInfo(
        version=version,
        txn_seq=r.txn_seq,
        txn_id=r.txn_id,
        created_at_millis=r.created_at_millis,
        rollback_from=_version_of(r.rollback_from_root),
        rollback_to=_version_of(r.rollback_to_root),
        changes=describe_changes_safely(lh, version),
    )


def version_infos(lh: VersionSource) -> list[VersionInfo]:
    """`version_info` of every available version; a root that cannot be read gives an
    info with only ``corrupt`` set (its typed error in one line) instead of failing."""

    latest = lh.latest_version()
    out = []
    for v in lh.listed_versions():
        if v > latest:
            continue
        try:
            out.append(version_info(lh, v))
        except TrinityLakeError as e:
            out.append(VersionInfo(version=v, txn_seq=None, txn_id=None, created_at_millis=None, corrupt=_one_line(e)))
    return out


def change_set(lh: VersionSource, version: int, ref: RootRef | None = None) -> ChangeSet:
    """Keys written by the transaction that produced `version`.

    Read from the root's write buffer (messages tagged with the root's txn id, which are
    never flushed in that root); roots without a txn id (version 0, foreign writers) fall
    back to a full diff with the previous version.
    """
    ref = ref or lh.load_root(version)
    prev_def = None
    prev_ref = None
    if ref.previous_root:
        try:
            prev_ref = lh.load_root(root_version(ref.previous_root))
            prev_def = prev_ref.def_path
        except VersionNotFoundError:
            prev_ref = None
    def_changed = prev_def is not None and prev_def != ref.def_path
    if ref.txn_id is not None:
        changed: dict[str, str | None] = {}
        for m in ref.node.buffer:
            if m.txn == ref.txn_id:
                changed[m.key] = m.value
        return ChangeSet(version, ref.txn_id, changed, def_changed)
    if prev_ref is None:
        items = dict(LakehouseView(lh, ref).all_items())
        return ChangeSet(version, None, dict(items), def_changed)
    return ChangeSet(version, None, diff(lh, prev_ref, ref), def_changed)


def diff(lh: VersionSource, a: RootRef, b: RootRef) -> dict[str, str | None]:
    """Keys whose value differs from version a to version b (None = absent in b)."""
    ia = dict(LakehouseView(lh, a).all_items())
    ib = dict(LakehouseView(lh, b).all_items())
    out: dict[str, str | None] = {}
    for k in ia.keys() | ib.keys():
        if ia.get(k) != ib.get(k):
            out[k] = ib.get(k)
    return dict(sorted(out.items()))


def describe_changes(lh: VersionSource, version: int) -> list[str]:
    """Human-readable changes of a version: 'create table ns.t', 'drop namespace x', ..."""
    ref = lh.load_root(version)
    cs = change_set(lh, version, ref)
    codec = keys.KeyCodec(
        ref.lakehouse_def.namespace_name_max_size_bytes,
        ref.lakehouse_def.table_name_max_size_bytes,
        ref.lakehouse_def.view_name_max_size_bytes,
    )
    prev_view = None
    if ref.previous_root:
        try:
            prev_view = LakehouseView(lh, lh.load_root(root_version(ref.previous_root)))
        except VersionNotFoundError:
            prev_view = None
    out = []
    for key, value in cs.keys.items():
        try:
            kind, names = codec.decode(key)
        except ValidationError:
            out.append(f"change {key!r}")
            continue
        existed = prev_view is not None and prev_view.get_key(key) is not None
        if value is None:
            action = "drop"
        elif existed:
            action = "alter"
        else:
            action = "create"
        out.append(f"{action} {kind} {'.'.join(names)}")
    if cs.def_changed:
        out.append("alter lakehouse definition")
    if version == 0:
        out.append("create lakehouse")
    return out


def describe_changes_safely(lh: VersionSource, version: int) -> list[str]:
    """`describe_changes`, or nothing (logged) when they cannot be described."""
    try:
        return describe_changes(lh, version)
    except Exception as e:  # noqa: BLE001 - the audit row must not fail a committed version
        log.warning("could not describe changes of version %s: %s", version, e)
        return []


def fmt_ms(ms: int) -> str:
    """ISO-8601 UTC spelling of epoch milliseconds, as the version listings show them."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _version_of(root: str | None) -> int | None:
    return root_version(root) if root else None


def _one_line(e: BaseException) -> str:
    """``<ErrorClass>: <message>`` on one line, for a listing that marks a bad version."""
    return f"{type(e).__name__}: " + " ".join(str(e).split())
