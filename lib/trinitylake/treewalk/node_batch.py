"""One level of the walk, many node files at a time, as Arrow arrays.

`reach.expand_node` reads one node file and returns a Python tuple per pointer; this module
does the same for a batch of frontier rows ``(key, base, first_version, depth, is_root)`` with
no Python object per pointer:

1. **read** the files in batches through the storage (`Storage.read_many`: local files
   opened relative to a descriptor of the root, an object store's requests in flight
   together, any other store on a lent thread pool);
2. **decode** them together (`trinitylake.format.node_arrow.decode_pointers`: the node layout
   over the concatenated columns of the batch);
3. **reference** rules of `reach.node_references`: children (kind ``node``), key-table values
   and set messages (``definition``), for a root its ``lakehouse_def`` system row; each pointer
   once per node, the first kind winning (node, then definition, then lakehouse_def);
4. **keys** (`reach.Locator.key`): a plain relative pointer in a file of the lakehouse's own
   tree is its own key, checked once per distinct pointer of the batch with one regular
   expression; any other pointer (a URI, a path to normalize, a file of an export's tree)
   goes through `Locator.key` one by one.

The outcome is a `NodeBatch`: per node its role (read, missing, unreadable), size and error
text, and per reference its node, kind and key (an index into the batch's distinct keys), from
which a level's task (a driver thread or an executor task, the same function) builds its
`LEVEL_SCHEMA` batches directly. Errors read exactly as `expand_node` writes them: a missing file is a ``missing``
row, an unreadable or corrupt one an ``error`` row with the typed error naming the file, a
root without ``lakehouse_def`` and a bad pointer too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trinitylake.errors import TrinityLakeError
from trinitylake.format.node_arrow import decode_pointers
from trinitylake.treewalk import reach

#: Rows one level of the walk emits (see the ROLE_* constants of `reach`).
LEVEL_SCHEMA = pa.schema([("role", pa.string()), ("path", pa.string()), ("kind", pa.string()), ("size", pa.int64()),
                          ("depth", pa.int32()), ("first_version", pa.int64()), ("base", pa.string()),
                          ("error", pa.string())])

#: Node roles, as numbers (`ROLES` names them).
SELF, MISSING, ERROR = 0, 1, 2
ROLES = (reach.ROLE_SELF, reach.ROLE_MISSING, reach.ROLE_ERROR)
#: Reference kinds, as numbers, in the order `node_references` lets them win (`KINDS` names them).
NODE, DEFINITION, LAKEHOUSE_DEF = 0, 1, 2
KINDS = (reach.KIND_NODE, reach.KIND_DEFINITION, reach.KIND_LAKEHOUSE_DEF)

#: `trinitylake.storage.uri.is_plain_relative` for RE2 (no look-ahead): segments of
#: ``[A-Za-z0-9_.=+-]``, the first not starting with a dot, none ``.`` or ``..``.
PLAIN_RELATIVE_RE2 = (r"^[A-Za-z0-9_=+-][A-Za-z0-9_.=+-]*"
                      r"(?:/(?:[A-Za-z0-9_=+-][A-Za-z0-9_.=+-]*|\.[A-Za-z0-9_=+-][A-Za-z0-9_.=+-]*"
                      r"|\.\.[A-Za-z0-9_.=+-]+))*$")

#: A batch holds at most this many files, and stops taking more once it holds this many bytes
#: (measured at 100k tables: 512-1,024 files a batch were fastest; 4,096 cost 10% more, the
#: batch's objects no longer in cache).
MAX_FILES = 1024
MAX_BYTES = 16 << 20
_READ_CAP = 1 << 16  # first read of a local file; bigger files read on


@dataclass
class NodeBatch:
    """What a batch of frontier rows expands to (see the module doc)."""

    keys: list[str]  # per node: its walk key
    bases: list[str]  # per node: the base its relative pointers resolve against
    first_version: np.ndarray  # int64 per node
    depth: np.ndarray  # int64 per node
    is_root: np.ndarray  # bool per node
    role: np.ndarray  # int8 per node: SELF, MISSING or ERROR
    size: np.ndarray  # int64 per node: bytes read, -1 when not read
    errors: dict[int, str]  # per MISSING or ERROR node: the error text
    ref_node: np.ndarray  # int32 per reference: its node
    ref_kind: np.ndarray  # int8 per reference: NODE, DEFINITION or LAKEHOUSE_DEF
    ref_id: np.ndarray  # int32 per reference: index of its key in `ref_keys`
    ref_keys: pa.Array  # utf8: the distinct keys of the references
    ref_base: pa.Array | None  # utf8 per reference: a child's base (NULL for others); None: every child's is the root
    bad_pointers: list[tuple[int, str]]  # (node, error text) per pointer that is not a valid location
    root: str  # the lakehouse root (the base of every child when `ref_base` is None)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def reads(self) -> int:
        """Node files read (including the ones that then failed to decode)."""
        return int(np.count_nonzero(self.size >= 0))

    def node_kinds(self) -> pa.Array:
        return pa.array(np.where(self.is_root, reach.KIND_ROOT, reach.KIND_NODE), pa.string())

    def level_batches(self) -> list[pa.RecordBatch]:
        """The batch as `LEVEL_SCHEMA` rows: one per node (self, missing or error), one per
        child and leaf reference, one error row per bad pointer."""
        n = len(self.keys)
        errors = [self.errors.get(i) for i in range(n)] if self.errors else pa.nulls(n, pa.string())
        out = [pa.RecordBatch.from_arrays([
            pa.array(ROLES, pa.string()).take(pa.array(self.role)),
            pa.array(self.keys, pa.string()),
            self.node_kinds(),
            pa.array(self.size, pa.int64()),
            pa.array(self.depth, pa.int32()),
            pa.array(self.first_version, pa.int64()),
            pa.array(self.bases, pa.string()),
            pa.array(errors, pa.string()),
        ], schema=LEVEL_SCHEMA)]
        m = len(self.ref_node)
        if m:
            child = self.ref_kind == NODE
            base = (self.ref_base if self.ref_base is not None
                    else pc.if_else(pa.array(child), pa.scalar(self.root, pa.string()), pa.scalar(None, pa.string())))
            out.append(pa.RecordBatch.from_arrays([
                pa.array([reach.ROLE_CHILD, reach.ROLE_LEAF], pa.string()).take(pa.array(np.where(child, 0, 1))),
                self.ref_keys.take(pa.array(self.ref_id)),
                pa.array(KINDS, pa.string()).take(pa.array(self.ref_kind)),
                pa.array(np.full(m, -1, np.int64)),
                pa.array(self.depth[self.ref_node] + 1, pa.int32()),
                pa.array(self.first_version[self.ref_node], pa.int64()),
                base,
                pa.nulls(m, pa.string()),
            ], schema=LEVEL_SCHEMA))
        if self.bad_pointers:
            idx = np.asarray([i for i, _ in self.bad_pointers], np.int64)
            out.append(pa.RecordBatch.from_arrays([
                pa.array([reach.ROLE_ERROR] * len(idx), pa.string()),
                pa.array([self.keys[i] for i in idx], pa.string()),
                self.node_kinds().take(pa.array(idx)),
                pa.array(self.size[idx], pa.int64()),
                pa.array(self.depth[idx], pa.int32()),
                pa.array(self.first_version[idx], pa.int64()),
                pa.array([self.bases[i] for i in idx], pa.string()),
                pa.array([t for _, t in self.bad_pointers], pa.string()),
            ], schema=LEVEL_SCHEMA))
        return out

    def failures(self, tolerate_missing: bool = False) -> list[tuple[str, int, str]]:
        """(key, first_version, error) per node that failed, and per bad pointer."""
        out = [(self.keys[i], int(self.first_version[i]), t) for i, t in sorted(self.errors.items())
               if not (tolerate_missing and self.role[i] == MISSING)]
        out += [(self.keys[i], int(self.first_version[i]), t) for i, t in self.bad_pointers]
        return out


# ---- reading ---------------------------------------------------------------------------------------
def _read_one(reader: reach.Reader, key: str) -> tuple[bytes | None, tuple[int, str] | None]:
    """The bytes of `key`, or its failure as `expand_node` reports it."""
    try:
        return reader.read(key), None
    except Exception as e:  # noqa: BLE001 - reported as a row, the driver raises with context
        return None, _failure(e)


def _failure(e: BaseException) -> tuple[int, str]:
    """A read's error as `expand_node` reports it: missing, or an error row naming it."""
    if isinstance(e, FileNotFoundError):
        return MISSING, str(e)
    return ERROR, f"{type(e).__name__}: {e}"


def wants_threads(reader: reach.Reader) -> bool:
    """Whether `read_files` would use a lent thread pool (`Storage.reads_on_threads`: local
    files are read in line, an object store the I/O engine serves through the engine)."""
    return reader.storage.reads_on_threads


def read_files(reader: reach.Reader, keys: Sequence[str], pool: ThreadPoolExecutor | None = None,
               max_bytes: int = MAX_BYTES) -> tuple[list[bytes | None], dict[int, tuple[int, str]]]:
    """The bytes of the first files of `keys` (as many as `max_bytes` allows, at least one),
    and the failures among them by index (role, text). The files are asked for in batches of
    the storage's size (`Storage.read_many`: how it reads them is the storage's own)."""
    datas: list[bytes | None] = []
    failed: dict[int, tuple[int, str]] = {}
    total = 0
    step = reader.storage.batch_files
    for s in range(0, len(keys), step):
        part = keys[s:s + step]
        got = reader.read_many(part, pool, max_bytes - total)
        for j, r in enumerate(got):
            if isinstance(r, BaseException):
                failed[s + j] = _failure(r)
                datas.append(None)
            else:
                datas.append(r)
                total += len(r)
        if total >= max_bytes or len(got) < len(part):
            break
    return datas, failed


# ---- expanding -------------------------------------------------------------------------------------
def iter_expand(reader: reach.Reader, rows: Sequence[Sequence[Any]], pool: ThreadPoolExecutor | None = None,
                max_files: int | None = None, max_bytes: int | None = None, *, exact: bool = True
                ) -> Iterator[NodeBatch]:
    """`expand_nodes` over `rows` in batches of at most `max_files` files and about
    `max_bytes` bytes (bounds what a batch holds; default `MAX_FILES`, `MAX_BYTES`)."""
    max_files = MAX_FILES if max_files is None else max_files
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    i = 0
    while i < len(rows):
        part = rows[i:i + max_files]
        datas, failed = read_files(reader, [r[0] for r in part], pool, max_bytes)
        yield expand_read(reader, part[:len(datas)], datas, failed, exact=exact)
        i += len(datas)


def expand_nodes(reader: reach.Reader, rows: Sequence[Sequence[Any]], pool: ThreadPoolExecutor | None = None,
                 *, exact: bool = True) -> NodeBatch:
    """Read and expand every row of `rows` (frontier rows: key, base, first_version, depth,
    is_root) in one batch."""
    datas, failed = read_files(reader, [r[0] for r in rows], pool, max_bytes=1 << 62)
    return expand_read(reader, rows, datas, failed, exact=exact)


def expand_read(reader: reach.Reader, rows: Sequence[Sequence[Any]], datas: Sequence[bytes | None],
                failed: dict[int, tuple[int, str]], *, exact: bool = True) -> NodeBatch:
    """Expand frontier rows whose files were read (`datas`, with `failed` from `read_files`).

    `exact` (the default): each node's references once each, in its file's order (what
    `node_references` lists). ``exact=False`` spares a caller that deduplicates per key anyway
    (the driver's walk: the smallest depth, first version and kind win) the per-node
    deduplication and the ordering: a pointer a node names twice may come twice, its second
    kind included (a child also named as a definition; a definition also the lakehouse_def).
    """
    n = len(rows)
    loc = reader.locator
    cols = list(zip(*rows, strict=True)) if n else [()] * 5
    keys, bases = list(cols[0]), list(cols[1])
    fv = np.array(cols[2], np.int64)
    depth = np.array(cols[3], np.int64)
    is_root = np.array(cols[4], bool)
    role = np.zeros(n, np.int8)
    size = np.array([-1 if d is None else len(d) for d in datas], np.int64)
    errors: dict[int, str] = {}
    for i, (r, text) in failed.items():
        role[i] = r
        errors[i] = text

    def where(i: int) -> str:
        return loc.uri(keys[i])

    decoded = decode_pointers(datas, where, ordered=exact)
    for i, e in decoded.errors.items():
        role[i] = ERROR
        errors[i] = f"{type(e).__name__}: {e}"
    node, kind, pointer = decoded.node, np.minimum(decoded.kind, DEFINITION).astype(np.int8), decoded.pointer
    roots = np.flatnonzero(is_root & (role == SELF))
    if roots.size:
        lds: list[int] = []
        ld_values: list[str] = []
        for i in roots.tolist():
            ld = decoded.lakehouse_def[i]
            if not ld:
                role[i] = ERROR
                errors[i] = f"CorruptNodeError: root node file {where(i)} has no lakehouse_def system row"
            else:
                lds.append(i)
                ld_values.append(ld)
        if lds:
            node = np.concatenate([node, np.asarray(lds, np.int32)])
            kind = np.concatenate([kind, np.full(len(lds), LAKEHOUSE_DEF, np.int8)])
            pointer = pa.concat_arrays([pointer, pa.array(ld_values, pa.utf8())])
            if exact:  # each root's lakehouse_def after its other pointers
                order = np.argsort(node, kind="stable")
                node, kind, pointer = node[order], kind[order], pointer.take(pa.array(order))
        keep = role[node] == SELF  # a root without lakehouse_def references nothing
        if not keep.all():
            node, kind, pointer = node[keep], kind[keep], pointer.filter(pa.array(keep))
    return _with_keys(loc, keys, bases, fv, depth, is_root, role, size, errors, node, kind, pointer, exact)


def _with_keys(loc: reach.Locator, keys: list[str], bases: list[str], fv: np.ndarray, depth: np.ndarray,
               is_root: np.ndarray, role: np.ndarray, size: np.ndarray, errors: dict[int, str],
               node: np.ndarray, kind: np.ndarray, pointer: pa.Array, exact: bool) -> NodeBatch:
    """Each pointer mapped to its walk key (and, when `exact`, once per node: first kind wins)."""
    enc = pc.dictionary_encode(pointer)
    dictionary = enc.dictionary
    ids = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    if exact and ids.size:
        pair = (node.astype(np.int64) << 32) | ids
        if pc.count_distinct(pa.array(pair)).as_py() != pair.size:
            _, first = np.unique(pair, return_index=True)  # first occurrence of each (node, pointer)
            keep = np.sort(first)
            node, kind, ids = node[keep], kind[keep], ids[keep]
    plain = (pc.match_substring_regex(dictionary, PLAIN_RELATIVE_RE2).to_numpy(zero_copy_only=False)
             if len(dictionary) else np.zeros(0, bool))
    at_root = (np.ones(len(bases), bool) if bases.count(loc.root) == len(bases)
               else np.array([b == loc.root for b in bases], bool))
    fast = plain[ids] & at_root[node]
    batch = NodeBatch(keys, bases, fv, depth, is_root, role, size, errors, node.astype(np.int32), kind,
                      ids.astype(np.int32), dictionary, None, [], loc.root)
    if fast.all():
        return batch
    # Pointers that are not plain relative paths of the lakehouse's own tree: one by one.
    slow = np.flatnonzero(~fast)
    slow_ptrs = dictionary.take(pa.array(ids[slow])).to_pylist()
    keep = np.ones(ids.size, bool)
    slow_keys: list[str] = []
    slow_bases: list[str | None] = []
    reported: set[tuple[int, str]] = set()
    for j, p in zip(slow.tolist(), slow_ptrs, strict=True):
        i = int(node[j])
        base = bases[i]
        try:
            ck = loc.key(p, base)
        except TrinityLakeError as e:
            if (i, p) not in reported:  # once per node, as `expand_node` reports it
                reported.add((i, p))
                batch.bad_pointers.append((i, f"bad pointer {p!r} in {loc.uri(keys[i])}: {e}"))
            keep[j] = False
            continue
        slow_keys.append(ck)
        slow_bases.append(loc.base_for(ck, base) if kind[j] == NODE else None)
    mapped = np.zeros(ids.size, bool)
    mapped[slow[keep[slow]]] = True
    full = dictionary.take(pa.array(ids))
    if slow_keys:
        full = pc.replace_with_mask(full, pa.array(mapped), pa.array(slow_keys, pa.string()))
    child = kind == NODE
    base_arr = pc.if_else(pa.array(child), pa.scalar(loc.root, pa.string()), pa.scalar(None, pa.string()))
    if slow_keys:
        base_arr = pc.replace_with_mask(base_arr, pa.array(mapped), pa.array(slow_bases, pa.string()))
    if not keep.all():
        k = pa.array(keep)
        full, base_arr, node, kind = full.filter(k), base_arr.filter(k), node[keep], kind[keep]
    enc = pc.dictionary_encode(full)
    batch.ref_node, batch.ref_kind = node.astype(np.int32), kind
    batch.ref_id = enc.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    batch.ref_keys = enc.dictionary
    batch.ref_base = base_arr
    return batch


def expand_rows(reader: reach.Reader, rows: Sequence[Sequence[Any]], pool: ThreadPoolExecutor | None = None
                ) -> Iterator[pa.RecordBatch]:
    """`LEVEL_SCHEMA` record batches of frontier rows (what executors emit per level)."""
    for batch in iter_expand(reader, rows, pool):
        yield from batch.level_batches()
