"""Export targets and export records (engine-agnostic; see `export_plan`): where an export may
go, what a target already holds, and how an export is recorded in (and dropped from) the
source's lakehouse definition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trinitylake.errors import AlreadyExistsError, SnapshotNotFoundError, UnsafeOperationError, ValidationError
from trinitylake.format import definitions as format_definitions
from trinitylake.format import keys as format_keys
from trinitylake.format.node import deserialize
from trinitylake.format.paths import HINT_FILE, is_root_name, parse_hint, root_name, root_version
from trinitylake.jobs.export.plan import read_json
from trinitylake.jobs.export.rules import EXPORT_DIR, FORMAT_TAG
from trinitylake.storage import Storage, is_absolute, parse_uri


def check_locations(source_uri: str, target_uri: str) -> None:
    """Refuse a target that overlaps the source (one inside the other, or the same).

    Orphan cleanup of the one would delete the other's files, and a target inside the source
    would be walked as part of it.
    """
    s = parse_uri(source_uri).uri.rstrip("/")
    t = parse_uri(target_uri).uri.rstrip("/")
    if s == t or t.startswith(s + "/"):
        raise UnsafeOperationError(f"export target {t} lies inside the lakehouse {s}; export to a location outside it")
    if s.startswith(t + "/"):
        raise UnsafeOperationError(f"export target {t} contains the lakehouse {s}; export to a location outside it")


@dataclass
class TargetState:
    """What the target holds before an export starts."""

    empty: bool
    exports: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> export.json
    roots: list[str] = field(default_factory=list)  # root file names at the target top level


def inspect_target(target: Storage, source_id: str, source_uri: str) -> TargetState:
    """Look at the target and refuse one that holds something other than exports of this lakehouse.

    A target is acceptable when it is empty (or missing), or when everything that identifies
    it says "an export of lakehouse `source_id`": the ``_export/*/export.json`` records and
    the lakehouse definition of its latest root.

    Raises:
        ValidationError: the target is not empty and holds no export of this lakehouse, or an
            export of another lakehouse.
    """
    dirs, files = target.list_dirs("")
    if not dirs and not files:
        return TargetState(empty=True)
    state = TargetState(empty=False)
    evidence: list[tuple[str, str]] = []  # (where, lakehouse id)
    if EXPORT_DIR in dirs:
        sub, _ = target.list_dirs(EXPORT_DIR)
        for d in sub:
            meta = read_json(target, f"{d}/export.json")
            if meta is None or meta.get("format") != FORMAT_TAG:
                continue
            state.exports[d.rsplit("/", 1)[-1]] = meta
            evidence.append((target.uri(f"{d}/export.json"), str(meta.get("source_id"))))
    state.roots = sorted(f.path for f in files if is_root_name(f.path))
    if state.roots:
        lh_id = _target_lakehouse_id(target, state.roots[-1])
        if lh_id is not None:
            evidence.append((target.uri(state.roots[-1]), lh_id))
    others = [(w, i) for w, i in evidence if i != source_id]
    if others:
        where, other = others[0]
        raise ValidationError(
            f"export target {target.root} holds an export of another lakehouse (id {other}, see {where}); "
            f"this lakehouse {source_uri} has id {source_id}. Export to an empty location"
        )
    if not evidence:
        names = ", ".join(sorted([d + "/" for d in dirs] + [f.path for f in files])[:5])
        raise ValidationError(
            f"export target {target.root} is not empty ({names}) and holds no export of lakehouse {source_uri}; "
            f"export to an empty location (or to an earlier export target of this lakehouse)"
        )
    return state


def _target_lakehouse_id(target: Storage, root_path: str) -> str | None:
    try:
        node = deserialize(target.read(root_path), None, target.uri(root_path))
        def_path = node.system.get(format_keys.SYS_LAKEHOUSE_DEF)
        if not def_path or is_absolute(def_path):
            return None
        return format_definitions.loads(format_definitions.LakehouseDef, target.read(def_path), target.uri(def_path)).id
    except Exception:  # noqa: BLE001 - an unreadable root is no evidence either way
        return None


def check_name_free(d: format_definitions.LakehouseDef, name: str, root_uri: str) -> bool:
    """Whether `name` can be used: False when it is already recorded with this very root
    (an earlier run finished the export), True when it is free.

    Raises:
        AlreadyExistsError: the name is recorded for another export.
    """
    existing = d.exported_snapshots.get(name)
    if existing is None:
        return True
    if existing == root_uri:
        return False
    raise AlreadyExistsError(f"an export named {name!r} already exists ({existing}); pick another name or drop it first")


def record_export(name: str, root_uri: str, pin: int | None) -> Callable[[format_definitions.LakehouseDef], None]:
    """Definition mutation that records an export (applied to the latest definition at commit).

    Raises AlreadyExistsError at commit time when the name was taken meanwhile, so export
    names stay unique under concurrent exports.
    """

    def fn(d: format_definitions.LakehouseDef) -> None:
        if name in d.exported_snapshots:
            raise AlreadyExistsError(
                f"an export named {name!r} was recorded concurrently ({d.exported_snapshots[name]})"
            )
        d.exported_snapshots[name] = root_uri
        if pin is not None:
            d.exported_snapshot_pins[name] = pin

    return fn


def drop_export(name: str) -> Callable[[format_definitions.LakehouseDef], None]:
    """Definition mutation that removes an export's record and its pin."""

    def fn(d: format_definitions.LakehouseDef) -> None:
        if name not in d.exported_snapshots and name not in d.exported_snapshot_pins:
            known = ", ".join(sorted(d.exported_snapshots)) or "none"
            raise SnapshotNotFoundError(f"no export named {name!r} (known: {known})")
        if name in d.exported_snapshots:
            del d.exported_snapshots[name]
        if name in d.exported_snapshot_pins:
            del d.exported_snapshot_pins[name]

    return fn


def update_hint(target: Storage, version: int) -> None:
    """Raise the target's ``_latest_hint.txt`` to `version` (never lower it); best effort."""

    try:
        current = parse_hint(target.read(HINT_FILE))
    except FileNotFoundError:
        current = None
    except Exception:  # noqa: BLE001
        current = None
    if current is not None and current >= version and target.exists(root_name(current)):
        return
    try:
        target.write(HINT_FILE, str(version).encode())
    except Exception:  # noqa: BLE001 - the hint is best effort by design (readers probe)
        pass


def list_exports(d: format_definitions.LakehouseDef) -> list[dict[str, Any]]:
    """The exports a definition records: name, root URI, version, pin (None for full exports)."""

    out = []
    for name in sorted(set(d.exported_snapshots) | set(d.exported_snapshot_pins)):
        loc = d.exported_snapshots.get(name)
        try:
            version = root_version(loc) if loc else None
        except ValidationError:
            version = None
        pin = d.exported_snapshot_pins[name] if name in d.exported_snapshot_pins else None
        out.append({"name": name, "root": loc, "version": version, "pinned_version": pin,
                    "kind": "full" if pin is None else "partial/minimal"})
    return out
