"""Snapshot export, engine-agnostic: what to copy, how pointers change, how copies are checked.

An export copies one version of a lakehouse to its own root URI (the *target*), where it is a
lakehouse of its own, and is recorded in the source's definition under a name. This module
holds everything that does not need an engine: the Spark job (`trinitylake.spark.export`)
only distributes these functions over executors, and a unit test can call them on a driver.

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
  verified with a HEAD request; a local target by its size, see `verify_written`).
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
import io
import json
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trinitylake.errors import AlreadyExistsError, TrinityLakeError, UnsafeOperationError, ValidationError
from trinitylake.format import definitions as D
from trinitylake.format import keys as K
from trinitylake.format.node import Message, Node, deserialize, serialize
from trinitylake.format.paths import HINT_FILE, is_root_name, root_name
from trinitylake.storage import Storage, is_absolute, join_uri, parse_uri

MODES = ("full", "partial", "minimal")
EXPORT_DIR = "_export"
FORMAT_TAG = "trinitylake-export/1"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_MD5_RE = re.compile(r"^[0-9a-f]{32}$")

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

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValidationError(f"export mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    @classmethod
    def make(cls, *, name: str, version: int, mode: str, depth: int | None, source_uri: str, target_uri: str,
             source_id: str, order: int) -> ExportSpec:
        validate_name(name)
        if mode == "partial":
            if depth is None or depth < 0:
                raise ValidationError(f"a partial export needs a depth >= 0, got {depth!r}")
            d = int(depth)
        else:
            d = -1 if mode == "full" else 0
        return cls(name, int(version), mode, d, source_uri, target_uri, source_id, int(order))

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
        return {
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

    def same_export(self, recorded: dict[str, Any]) -> bool:
        mine = self.describe()
        return all(recorded.get(k) == mine[k] for k in ("name", "version", "mode", "depth", "source_id", "root"))


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
def local_path(source: Storage, pointer: str) -> str | None:
    """Path of `pointer` relative to the source root, or None for a file outside the source."""
    if not is_absolute(pointer):
        return source.relative(pointer)
    try:
        return source.relative(pointer)
    except Exception:  # noqa: BLE001 - an unparsable absolute pointer is left alone
        return None


INSIDE, INTO_SOURCE, FOREIGN = 0, 1, 2


def _repoint(source: Storage, pointer: str, copied: bool) -> tuple[str, int]:
    """(pointer as the exported file stores it, where it points: INSIDE the export, INTO_SOURCE
    or FOREIGN, i.e. an absolute URI outside the source that is kept as it is and not followed)."""
    rel = local_path(source, pointer)
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
        for k in (K.SYS_PREVIOUS_ROOT, K.SYS_ROLLBACK_FROM_ROOT, K.SYS_TXN_SEQ):
            if k in out.system:
                del out.system[k]
                changed = True
        d = out.system.get(K.SYS_LAKEHOUSE_DEF)
        if d is not None:
            rel = local_path(source, d)
            if rel is None:
                raise ValidationError(f"root of version {spec.version} points at a lakehouse definition outside the "
                                      f"source ({d}); cannot export it")
            if rel != d:
                out.system[K.SYS_LAKEHOUSE_DEF] = rel
                changed = True
    copy_children = spec.copies_node(depth + 1)
    for i, c in enumerate(out.children):
        p, where = _repoint(source, c, copy_children)
        refs.count(where)
        if where == INSIDE:
            refs.children.append(p)
        if p != c:
            out.children[i] = p
            changed = True
    copy_odfs = spec.copies_odfs(depth)
    for i, v in enumerate(out.values):
        p, where = _repoint(source, v, copy_odfs)
        refs.count(where)
        if where == INSIDE:
            refs.odfs.append(p)
        if p != v:
            out.values[i] = p
            changed = True
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
    d = D.loads(D.LakehouseDef, data, where)
    if not d.exported_snapshots and not d.exported_snapshot_pins:
        return data
    d.exported_snapshots.clear()
    d.exported_snapshot_pins.clear()
    return D.dumps(d)


# ---- plan rows -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanRow:
    """One planned file. `size`/`md5` are known for node files (read at plan time to find their
    children; `data` then holds their exported bytes, so the copy never reads them again) and
    unknown (-1, "") for definition files, which are read once, by the copy."""

    target: str
    source: str
    kind: str
    depth: int
    action: str
    size: int = -1
    md5: str = ""
    external: int = 0
    data: bytes | None = None

    def as_tuple(self) -> tuple:
        return (self.target, self.source, self.kind, self.depth, self.action, self.size, self.md5, self.external,
                self.data)

    @classmethod
    def from_tuple(cls, t: tuple | list) -> PlanRow:
        return cls(*t)


def plan_node(source: Storage, path: str, depth: int, spec: ExportSpec) -> tuple[PlanRow, NodeRefs]:
    """Read one node of the source and plan it: its row (with its exported bytes) and what it references."""
    data = source.read(path)
    return plan_node_bytes(source, path, depth, spec, data)


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


def export_bytes(row: PlanRow, source: Storage, spec: ExportSpec) -> tuple[bytes, bool]:
    """The bytes a planned file has at the target, and whether they differ from the source's:
    a node's from the plan, a definition file's read (once) from the source."""
    if row.data is not None:
        return row.data, row.action == ACTION_REWRITE
    data = source.read(row.target)
    if row.kind in (KIND_ROOT, KIND_NODE):  # a plan without bytes (not written by this module)
        out = exported_node_bytes(data, row.depth, spec, source, row.source)[0]
        return out, out is not data
    if row.kind == KIND_DEF:
        out = exported_definition_bytes(data, row.source)
        return out, out is not data
    return data, False


# ---- plan files ------------------------------------------------------------------------------------
def plan_part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def plan_table(rows: Iterable[PlanRow]) -> pa.Table:
    cols: list[list] = [[] for _ in PLAN_COLUMNS]
    for r in rows:
        for i, v in enumerate(r.as_tuple()):
            cols[i].append(v)
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, PLAN_SCHEMA, strict=True)],
                                schema=PLAN_SCHEMA)


def table_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def plan_part_bytes(rows: Iterable[PlanRow]) -> bytes:
    return table_bytes(plan_table(rows))


def read_plan_part(data: bytes) -> list[PlanRow]:
    table = pq.read_table(pa.BufferReader(data))
    cols = [table.column(n).to_pylist() if n in table.column_names else [None] * table.num_rows
            for n in PLAN_COLUMNS]
    return [PlanRow(*vals) for vals in zip(*cols, strict=True)]


def part_summary(name: str, rows: list[PlanRow]) -> dict[str, Any]:
    """What the plan index (``_plan.json``) records of one part."""
    return {"name": name, "rows": len(rows), "bytes": sum(max(0, r.size) for r in rows),
            "unsized": sum(r.size < 0 for r in rows), "rewritten": sum(r.action == ACTION_REWRITE for r in rows),
            "external": sum(r.external for r in rows)}


def manifest_path(export_dir: str, part: str) -> str:
    """The result manifest of a copied plan part: what was verified at the target (size, MD5)."""
    return f"{export_dir}/copied/{part.removesuffix('.parquet')}.json"


def manifest_bytes(part: str, files: dict[str, tuple[int, str]]) -> bytes:
    obj = {"format": FORMAT_TAG, "part": part, "files": {k: list(v) for k, v in sorted(files.items())}}
    return json.dumps(obj, separators=(",", ":")).encode()


def read_manifest(storage: Storage, path: str) -> dict[str, tuple[int, str]] | None:
    obj = read_json(storage, path)
    if obj is None or obj.get("format") != FORMAT_TAG or not isinstance(obj.get("files"), dict):
        return None
    try:
        return {k: (int(v[0]), str(v[1])) for k, v in obj["files"].items()}
    except (TypeError, ValueError, IndexError):
        return None


def json_bytes(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()


def read_json(storage: Storage, path: str) -> dict[str, Any] | None:
    try:
        data = storage.read(path)
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


# ---- verification --------------------------------------------------------------------------------
OK, MISSING, MISMATCH = "ok", "missing", "mismatch"


def verify_file(storage: Storage, path: str, size: int, md5: str, checksum: bool = True) -> str:
    """Whether the file at `path` has `size` bytes and MD5 `md5`: ``ok``, ``missing`` or ``mismatch``.

    On S3 the ETag of a single-part upload is the MD5: a HEAD request then suffices. Other
    ETags (multipart, SSE-KMS) fall back to reading the bytes.
    """
    if storage.scheme == "s3":
        fp = parse_uri(storage.uri(path)).fs_path
        try:
            info = storage.fs.info(fp)
        except FileNotFoundError:
            return MISSING
        if info.get("type") == "directory":
            return MISSING
        if int(info.get("size") or 0) != size:
            return MISMATCH
        if not checksum:
            return OK
        etag = str(info.get("ETag") or info.get("etag") or "").strip('"').lower()
        if _MD5_RE.match(etag) and etag == md5:
            return OK
    elif not checksum:
        try:
            return OK if storage.info(path).size == size else MISMATCH
        except FileNotFoundError:
            return MISSING
    try:  # one read gives both the size and the checksum (cheaper than a stat, then a read)
        data = storage.read(path)
    except FileNotFoundError:
        return MISSING
    return OK if len(data) == size and md5_hex(data) == md5 else MISMATCH


def verify_written(storage: Storage, path: str, size: int, md5: str, checksum: bool = True) -> str:
    """Verification right after this process created `path` from bytes whose MD5 it computed.

    S3: a HEAD request: the size, and (with `checksum`) the ETag of the single-part PUT, which is
    the MD5 of what the store received. Elsewhere: a stat for the size; the checksum is the MD5
    of the very bytes handed to the exclusive create (computed while copying), since re-reading a
    file just written locally only reads our own page cache back (see the job's module doc).
    """
    if storage.scheme == "s3":
        return verify_file(storage, path, size, md5, checksum)
    try:
        return OK if storage.info(path).size == size else MISMATCH
    except FileNotFoundError:
        return MISSING


@dataclass
class CopyStats:
    """What copying one batch (plan part) did. Failures are data, not exceptions, so that the
    driver raises a typed error naming the files."""

    rows: int = 0
    copied: int = 0
    copied_bytes: int = 0
    skipped: int = 0
    skipped_bytes: int = 0
    verified: int = 0
    verified_bytes: int = 0
    rewritten: int = 0
    source_reads: int = 0
    seconds_verify: float = 0.0
    conflicts: list[str] = field(default_factory=list)
    missing_sources: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, other: CopyStats) -> None:
        self.rows += other.rows
        self.copied += other.copied
        self.copied_bytes += other.copied_bytes
        self.skipped += other.skipped
        self.skipped_bytes += other.skipped_bytes
        self.verified += other.verified
        self.verified_bytes += other.verified_bytes
        self.rewritten += other.rewritten
        self.source_reads += other.source_reads
        self.seconds_verify += other.seconds_verify
        if other.conflicts or other.missing_sources or other.errors:
            for k in ("conflicts", "missing_sources", "errors"):
                getattr(self, k).extend(getattr(other, k)[: max(0, 20 - len(getattr(self, k)))])

    @property
    def failed(self) -> bool:
        return bool(self.conflicts or self.missing_sources or self.errors)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CopyStats:
        return cls(**d)


def _skip(st: CopyStats, size: int) -> CopyStats:
    st.skipped, st.skipped_bytes, st.verified, st.verified_bytes = 1, size, 1, size
    return st


def copy_one(row: PlanRow, source: Storage, target: Storage, spec: ExportSpec, *, checksum: bool = True,
             recorded: tuple[int, str] | None = None) -> tuple[CopyStats, tuple[int, str] | None]:
    """Copy one planned file, reading its source at most once; returns what happened and, when
    the target holds the file verified, its (size, MD5) for the part's result manifest.

    `recorded` is the (size, MD5) an earlier run's manifest holds for this file: the target is
    then verified against it without reading the source (a resumed run). Otherwise the source is
    read once (node files come with their bytes in the plan and are not read at all), rewritten
    if planned, hashed, and created exclusively at the target; a file that is already there is
    kept when it holds exactly these bytes (an earlier run or an earlier export of the same
    lakehouse wrote it) and reported as a conflict otherwise. Nothing is ever overwritten.
    """
    st = CopyStats(rows=1)
    if recorded is not None:
        t = time.perf_counter()
        state = verify_file(target, row.target, recorded[0], recorded[1], checksum)
        st.seconds_verify += time.perf_counter() - t
        if state == OK:
            return _skip(st, recorded[0]), recorded
        if state == MISMATCH:
            st.conflicts.append(f"{target.uri(row.target)} exists with other content than {row.source}")
            return st, None
    try:
        st.source_reads += row.data is None
        data, changed = export_bytes(row, source, spec)
    except FileNotFoundError:
        st.missing_sources.append(row.source)
        return st, None
    except TrinityLakeError as e:
        st.errors.append(f"{type(e).__name__}: {e}")
        return st, None
    size, md5 = len(data), md5_hex(data)
    if (row.size >= 0 and size != row.size) or (row.md5 and md5 != row.md5):
        st.errors.append(f"{row.source}: the bytes to write do not match the plan (size {size} vs {row.size}); "
                         f"the plan is corrupt")
        return st, None
    try:
        if data:
            target.create_exclusive(row.target, data)
        else:
            target.write(row.target, data)
        created = True
    except FileExistsError:
        created = False
    except Exception as e:  # noqa: BLE001 - reported as data; the driver raises a typed error
        st.errors.append(f"StorageError: cannot create {target.uri(row.target)}: {type(e).__name__}: {e}")
        return st, None
    t = time.perf_counter()
    try:
        state = (verify_written if created else verify_file)(target, row.target, size, md5, checksum)
    except Exception as e:  # noqa: BLE001
        st.errors.append(f"StorageError: cannot verify {target.uri(row.target)}: {type(e).__name__}: {e}")
        return st, None
    st.seconds_verify += time.perf_counter() - t
    if state != OK:
        if created:
            st.errors.append(f"StorageError: {target.uri(row.target)} failed verification after the copy ({state})")
        else:
            st.conflicts.append(f"{target.uri(row.target)} exists with other content than {row.source}")
        return st, None
    if not created:
        return _skip(st, size), (size, md5)
    st.verified, st.verified_bytes = 1, size
    st.copied, st.copied_bytes = 1, size
    st.rewritten += bool(changed)
    return st, (size, md5)


# ---- targets -----------------------------------------------------------------------------------
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
        def_path = node.system.get(K.SYS_LAKEHOUSE_DEF)
        if not def_path or is_absolute(def_path):
            return None
        return D.loads(D.LakehouseDef, target.read(def_path), target.uri(def_path)).id
    except Exception:  # noqa: BLE001 - an unreadable root is no evidence either way
        return None


def check_name_free(d: D.LakehouseDef, name: str, root_uri: str) -> bool:
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


def record_export(name: str, root_uri: str, pin: int | None):
    """Definition mutation that records an export (applied to the latest definition at commit).

    Raises AlreadyExistsError at commit time when the name was taken meanwhile, so export
    names stay unique under concurrent exports.
    """

    def fn(d: D.LakehouseDef) -> None:
        if name in d.exported_snapshots:
            raise AlreadyExistsError(
                f"an export named {name!r} was recorded concurrently ({d.exported_snapshots[name]})"
            )
        d.exported_snapshots[name] = root_uri
        if pin is not None:
            d.exported_snapshot_pins[name] = pin

    return fn


def drop_export(name: str):
    """Definition mutation that removes an export's record and its pin."""
    from trinitylake.errors import SnapshotNotFoundError

    def fn(d: D.LakehouseDef) -> None:
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
    from trinitylake.format.paths import parse_hint

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


def list_exports(d: D.LakehouseDef) -> list[dict[str, Any]]:
    """The exports a definition records: name, root URI, version, pin (None for full exports)."""
    from trinitylake.format.paths import root_version

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
