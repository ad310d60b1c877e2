"""Export rules: what one export is, which files it copies and how it rewrites them, what a plan
holds and how its files are named. Pure: no I/O, no Spark (bytes in, bytes out; a `Storage`
is used only to resolve names, never read).

An export copies one version of a lakehouse to its own root URI (the *target*), where it is a
lakehouse of its own, and is recorded in the source's definition under a name. The job
(`trinitylake.jobs.export.job`) and its planner read and write files
(`trinitylake.jobs.export.plan`: the plan's Parquet parts, manifests and JSON) and only apply
these rules, on the driver or on executors.

Choices (see also ``docs`` in the job module):

- **Modes.** Node depth counts from the root (depth 0). ``full`` copies every file reachable
  from the root; ``partial`` copies the nodes down to depth D *and the definition files those
  nodes reference* (ODFs are small, and a partial export that still needed the source for
  every table read would be little better than a minimal one); ``minimal`` copies the root only.
  Every mode copies the lakehouse definition file (with the source's export records cleared:
  they are the source's bookkeeping, not part of the exported version).
- **Pointers.** Copied files keep their relative paths (the same hash-prefixed names). A
  pointer to a file that is not copied is rewritten as the absolute URI of that file in the
  source. A node whose pointers change is rewritten (re-serialized) but keeps its name: the
  target is a separate lakehouse, so its names stay unique. Pointers that were already absolute
  URIs outside the source are kept as they are and never followed.
- **Root.** The exported root keeps the version number: ``root_name(V)``, so ``--snapshot``
  reads report version V and later commits to the exported lakehouse continue at V+1. Its
  ``previous_root`` and ``rollback_from_root`` rows are dropped (the history is not exported;
  they would point at files that do not exist at the target), and so is ``txn_seq`` (a number
  of the source's control table; the target's audit log would read it as its own). ``txn_id``
  stays: it names the transaction that produced V, in any lakehouse.
- **Checksums.** MD5 of the bytes as written at the target, computed while copying from the
  one read of the source (S3 returns it as the ETag of a single-part PUT, so a target on S3 is
  verified with a HEAD request; a local target by reading each file back, see `verify_written`).
- **Plan.** ``<target>/_export/<name>/`` holds ``export.json`` (what is being exported, from
  which lakehouse; written before anything else), ``plan/part-NNNNN.parquet`` (one row per file:
  target path, source URI, kind, depth, action; node files also carry their exported bytes, size
  and MD5, because they are read anyway to find their children; definition files are not read
  at plan time), ``plan/_plan.json`` (the index of parts; its presence means the plan is
  complete) and ``copied/part-NNNNN.json`` (per finished part: the size and MD5 of every file
  verified at the target, so a re-run verifies them there without reading the source). Reading
  the target ignores ``_export/``: it is neither a root file nor a hash-prefixed format file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from trinitylake.errors import CorruptDefinitionError, ValidationError
from trinitylake.format import definitions as format_definitions
from trinitylake.format import keys as format_keys
from trinitylake.format.node import Message, Node, deserialize, serialize
from trinitylake.format.paths import root_name
from trinitylake.storage.uri import is_absolute, join_uri, parse_uri

if TYPE_CHECKING:
    from trinitylake.storage import Storage

MODES = ("full", "partial", "minimal")
EXPORT_DIR = "_export"
FORMAT_TAG = "trinitylake-export/1"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

# Kinds of planned files and what happens to them.
KIND_ROOT, KIND_DEF, KIND_NODE, KIND_ODF = "root", "def", "node", "odf"
ACTION_COPY, ACTION_REWRITE = "copy", "rewrite"

PLAN_SCHEMA = pa.schema(
    [
        pa.field("target", pa.utf8(), nullable=False),  # path relative to the target root
        pa.field("source", pa.utf8(), nullable=False),  # absolute URI of the source file
        pa.field("kind", pa.utf8(), nullable=False),  # root | def | node | odf
        pa.field("depth", pa.int32(), nullable=False),  # node depth (ODFs: the referencing node's)
        pa.field("action", pa.utf8(), nullable=False),  # copy (verbatim) | rewrite (pointers/records change)
        pa.field("size", pa.int64(), nullable=False),  # bytes at the target; -1: unknown until copied
        pa.field("md5", pa.utf8(), nullable=False),  # hex MD5 of the bytes at the target; "": unknown until copied
        pa.field("external", pa.int32(), nullable=False),  # pointers in this file to files outside the export
        pa.field("data", pa.binary(), nullable=True),  # node files: their exported bytes (read once, at plan time)
    ]
)
PLAN_COLUMNS = tuple(PLAN_SCHEMA.names)


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


# ---- what one export is ----------------------------------------------------------------------
@dataclass(frozen=True)
class ExportSpec:
    """One export: which version goes where, how deep. Picklable (sent to executors)."""

    name: str
    version: int
    mode: str
    depth: int  # partial: deepest copied node level; full: -1 (unbounded); minimal: 0
    source_uri: str
    target_uri: str
    source_id: str
    order: int
    #: Export the Iceberg tables too (`trinitylake.jobs.export.tables`): the copy rewrites
    #: table definitions' metadata locations under the source root to the target root.
    with_tables: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValidationError(f"export mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    @classmethod
    def make(cls, *, name: str, version: int, mode: str, depth: int | None, source_uri: str, target_uri: str,
             source_id: str, order: int, with_tables: bool = False) -> ExportSpec:
        validate_name(name)
        if with_tables and mode != "full":
            raise ValidationError(f"an export with tables is a full export, not {mode!r}")
        if mode == "partial":
            if depth is None or depth < 0:
                raise ValidationError(f"a partial export needs a depth >= 0, got {depth!r}")
            d = int(depth)
        else:
            d = -1 if mode == "full" else 0
        return cls(name, int(version), mode, d, source_uri, target_uri, source_id, int(order), bool(with_tables))

    def copies_node(self, depth: int) -> bool:
        """True when a node at `depth` is copied to the target."""
        if self.mode == "full":
            return True
        return depth <= self.depth

    def copies_odfs(self, depth: int) -> bool:
        """True when the definition files referenced by a node at `depth` are copied."""
        return self.mode != "minimal" and self.copies_node(depth)

    @property
    def root_path(self) -> str:
        return root_name(self.version)

    @property
    def export_dir(self) -> str:
        return f"{EXPORT_DIR}/{self.name}"

    @property
    def root_uri(self) -> str:
        """Full URI of the exported root file: the value recorded in ``exported_snapshots``."""
        return join_uri(parse_uri(self.target_uri).uri, self.root_path)

    def describe(self) -> dict[str, Any]:
        """What `export.json` records (and a resumed run must match)."""
        extra = {"with_tables": True} if self.with_tables else {}
        return {
            **extra,
            "format": FORMAT_TAG,
            "name": self.name,
            "version": self.version,
            "mode": self.mode,
            "depth": self.depth if self.mode == "partial" else None,
            "source": self.source_uri,
            "source_id": self.source_id,
            "target": self.target_uri,
            "root": self.root_path,
        }

    def same_export(self, recorded: Mapping[str, object]) -> bool:
        mine = self.describe()
        return (all(recorded.get(k) == mine[k] for k in ("name", "version", "mode", "depth", "source_id", "root"))
                and bool(recorded.get("with_tables", False)) == self.with_tables)


def validate_name(name: str) -> str:
    """Export names: 1-128 letters, digits, '.', '_', '-'; not all digits (reads as a version)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValidationError(
            f"invalid export name {name!r}: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if name.isdigit():
        raise ValidationError(f"export name {name!r} is all digits; it would read as a version number in AS OF")
    return name


# ---- pointers ----------------------------------------------------------------------------------
def key_in_source(source: Storage, pointer: str) -> str | None:
    """Path of `pointer` relative to the source root, or None for a file outside the source."""
    if not is_absolute(pointer):
        return source.relative(pointer)
    try:
        return source.relative(pointer)
    except Exception:  # noqa: BLE001 - an unparsable absolute pointer is left alone
        return None


INSIDE, INTO_SOURCE, FOREIGN = 0, 1, 2


def _repoint_list(source: Storage, pointers: list, copied: bool, refs: NodeRefs, inside: list[str]) -> bool:
    """`_repoint` each entry of `pointers` in place, counting where each points and keeping
    those inside the source in `inside`; True when one changed."""
    changed = False
    for i, pointer in enumerate(pointers):
        p, where = _repoint(source, pointer, copied)
        refs.count(where)
        if where == INSIDE:
            inside.append(p)
        if p != pointer:
            pointers[i] = p
            changed = True
    return changed


def _repoint(source: Storage, pointer: str, copied: bool) -> tuple[str, int]:
    """(pointer as the exported file stores it, where it points: INSIDE the export, INTO_SOURCE
    or FOREIGN, i.e. an absolute URI outside the source that is kept as it is and not followed)."""
    rel = key_in_source(source, pointer)
    if rel is None:
        return pointer, FOREIGN
    if copied:
        return rel, INSIDE
    return source.uri(rel), INTO_SOURCE


@dataclass
class NodeRefs:
    """What a node references, split by what the export does with it."""

    children: list[str] = field(default_factory=list)  # relative paths of child nodes to copy
    odfs: list[str] = field(default_factory=list)  # relative paths of definition files to copy
    external: int = 0  # pointers rewritten to absolute URIs into the source (what a pin protects)
    foreign: int = 0  # absolute pointers outside the source, kept as they were

    def count(self, where: int) -> None:
        if where == INTO_SOURCE:
            self.external += 1
        elif where == FOREIGN:
            self.foreign += 1


def export_node(node: Node, depth: int, spec: ExportSpec, source: Storage) -> tuple[Node, NodeRefs, bool]:
    """The node as the export stores it, what it references, and whether it changed.

    Children are copied when the next level is copied; definition-file values (key table and
    write-buffer messages, including superseded ones: the file references them) when this
    level's ODFs are copied. Anything not copied becomes an absolute URI into the source.
    The root also loses ``previous_root``, ``rollback_from_root`` and ``txn_seq`` and keeps
    ``lakehouse_def`` relative (the definition is always copied).
    """
    out = node.copy()
    out.buffer = [Message(m.key, m.value, m.txn) for m in node.buffer]  # rewritten below: no sharing
    refs = NodeRefs()
    changed = False
    if depth == 0:
        for k in (format_keys.SYS_PREVIOUS_ROOT, format_keys.SYS_ROLLBACK_FROM_ROOT, format_keys.SYS_ROLLBACK_TO_ROOT, format_keys.SYS_TXN_SEQ):
            if k in out.system:
                del out.system[k]
                changed = True
        d = out.system.get(format_keys.SYS_LAKEHOUSE_DEF)
        if d is not None:
            rel = key_in_source(source, d)
            if rel is None:
                raise ValidationError(f"root of version {spec.version} points at a lakehouse definition outside the "
                                      f"source ({d}); cannot export it")
            if rel != d:
                out.system[format_keys.SYS_LAKEHOUSE_DEF] = rel
                changed = True
    changed |= _repoint_list(source, out.children, spec.copies_node(depth + 1), refs, refs.children)
    copy_odfs = spec.copies_odfs(depth)
    changed |= _repoint_list(source, out.values, copy_odfs, refs, refs.odfs)
    for m in out.buffer:
        if m.value is None:
            continue
        p, where = _repoint(source, m.value, copy_odfs)
        refs.count(where)
        if where == INSIDE:
            refs.odfs.append(p)
        if p != m.value:
            m.value = p
            changed = True
    refs.odfs = list(dict.fromkeys(refs.odfs))
    return out, refs, changed


def exported_node_bytes(data: bytes, depth: int, spec: ExportSpec, source: Storage, where: str
                        ) -> tuple[bytes, NodeRefs, bool]:
    """Bytes of a node file as the export stores it (the source bytes when nothing changed)."""
    node = deserialize(data, None, where)
    out, refs, changed = export_node(node, depth, spec, source)
    if not changed:
        return data, refs, False
    return serialize(out, spec.order), refs, True


def exported_definition_bytes(data: bytes, where: str) -> bytes:
    """The lakehouse definition as the export stores it: the source's export records cleared
    (they name other exports of the source and pin source versions), everything else kept,
    including the id (it identifies the lineage: later exports into this target check it)."""
    d = format_definitions.loads(format_definitions.LakehouseDef, data, where)
    if not d.exported_snapshots and not d.exported_snapshot_pins:
        return data
    d.exported_snapshots.clear()
    d.exported_snapshot_pins.clear()
    return format_definitions.dumps(d)


# ---- plan rows -----------------------------------------------------------------------------------
class PlanRow(NamedTuple):
    """One planned file. `size`/`md5` are known for node files (read at plan time to find their
    children; `data` then holds their exported bytes, so the copy never reads them again) and
    unknown (-1, "") for definition files, which are read once, by the copy. A named tuple:
    plans hold one per file, and a frozen dataclass costs several times as much to build."""

    target: str
    source: str
    kind: str
    depth: int
    action: str
    size: int = -1
    md5: str = ""
    external: int = 0
    data: bytes | None = None


def plan_node_bytes(source: Storage, path: str, depth: int, spec: ExportSpec, data: bytes
                    ) -> tuple[PlanRow, NodeRefs]:
    out, refs, changed = exported_node_bytes(data, depth, spec, source, source.uri(path))
    kind = KIND_ROOT if depth == 0 else KIND_NODE
    row = PlanRow(path, source.uri(path), kind, depth, ACTION_REWRITE if changed else ACTION_COPY, len(out),
                  md5_hex(out), refs.external, bytes(out))
    return row, refs


def plan_file(source: Storage, path: str, kind: str, depth: int) -> PlanRow:
    """Plan one definition file without reading it (the copy reads it once, hashing as it writes).
    The lakehouse definition is planned as a rewrite: the copy clears the source's export records."""
    return PlanRow(path, source.uri(path), kind, depth, ACTION_REWRITE if kind == KIND_DEF else ACTION_COPY)


def exported_table_def_bytes(data: bytes, where: str, spec: ExportSpec, source: Storage) -> bytes:
    """A definition file as an export with tables stores it: a TableDef's ``metadata_location``
    and ``previous_metadata_location`` under the source root point at the same paths under the
    target root (where `trinitylake.jobs.export.tables` copies the table). Every other
    definition file, and a TableDef of a table elsewhere, comes back as it was.

    Definition files do not say what they hold: only a TableDef has format properties (field 9;
    namespace and view definitions have no such field), so bytes that do not parse as one, or
    parse without them, are not a table's."""
    try:
        d = format_definitions.loads(format_definitions.TableDef, data, where)
    except CorruptDefinitionError:  # a ViewDef's properties (field 6) need not parse as a TableDef's field 6
        return exported_view_def_bytes(data, where, spec, source)
    if not d.format_properties:
        return exported_view_def_bytes(data, where, spec, source)
    changed = False
    for key in ("metadata_location", "previous_metadata_location"):
        loc = d.format_properties.get(key)
        if not loc or not is_absolute(loc):
            continue  # a relative location resolves against the exported root as it is
        rel = key_in_source(source, loc)
        if rel:
            d.format_properties[key] = join_uri(parse_uri(spec.target_uri).uri, rel)
            changed = True
    return format_definitions.dumps(d) if changed else data


def exported_view_def_bytes(data: bytes, where: str, spec: ExportSpec, source: Storage) -> bytes:
    """A ViewDef as an export with tables stores it: its ``metadata_location`` and
    ``previous_metadata_location`` properties under the source root point at the same paths
    under the target root (`trinitylake.jobs.export.tables` copies the view metadata there).
    Bytes that do not parse as a ViewDef naming a metadata file come back as they were."""
    try:
        d = format_definitions.loads(format_definitions.ViewDef, data, where)
    except CorruptDefinitionError:
        return data
    if not d.properties.get("metadata_location"):
        return data
    changed = False
    for key in ("metadata_location", "previous_metadata_location"):
        loc = d.properties.get(key)
        if not loc or not is_absolute(loc):
            continue
        rel = key_in_source(source, loc)
        if rel:
            d.properties[key] = join_uri(parse_uri(spec.target_uri).uri, rel)
            changed = True
    return format_definitions.dumps(d) if changed else data


def exported_bytes(row: PlanRow, data: bytes, source: Storage, spec: ExportSpec) -> bytes:
    """The bytes the planned file `row` has at the target, from its source bytes `data`: a node
    loses its history rows and repoints what is not copied, the lakehouse definition loses the
    source's export records, a table definition of an export with tables points at the target's
    metadata; every other file is copied as it is (the same object back)."""
    if row.kind in (KIND_ROOT, KIND_NODE):
        return exported_node_bytes(data, row.depth, spec, source, row.source)[0]
    if row.kind == KIND_DEF:
        return exported_definition_bytes(data, row.source)
    if row.kind == KIND_ODF and spec.with_tables:
        return exported_table_def_bytes(data, row.source, spec, source)
    return data


# ---- plan files --------------------------------------------------------------------------------------
def plan_part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def part_summary(name: str, rows: list[PlanRow]) -> dict[str, Any]:
    """What the plan index (``_plan.json``) records of one part."""
    return {"name": name, "rows": len(rows), "bytes": sum(max(0, r.size) for r in rows),
            "unsized": sum(r.size < 0 for r in rows), "rewritten": sum(r.action == ACTION_REWRITE for r in rows),
            "external": sum(r.external for r in rows)}


def manifest_path(export_dir: str, part: str) -> str:
    """The result manifest of a copied plan part: what was verified at the target (size, MD5)."""
    return f"{export_dir}/copied/{part.removesuffix('.parquet')}.json"
