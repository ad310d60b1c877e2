"""Node files decoded many at a time with Arrow compute: the pointers of a batch of files.

`trinitylake.format.node.deserialize` turns one file into Python lists, one object per cell.
A walk needs only each file's pointers, from hundreds of thousands of files, so this module
reads a batch of files the way `deserialize` defines the layout, over the concatenated columns
of the whole batch (numpy and ``pyarrow.compute``, no Python object per row), and hands the
pointers on as Arrow arrays:

* system rows: every row before the first row whose key and value are both NULL (each with a
  key and a value);
* the key table: from that row up to the first later row with a ``txn`` (the order is taken
  from the file, as ``deserialize(data, None, ...)`` does); row 0 holds the leftmost child,
  key rows their value and, in an internal node, the child right of the key;
* the write buffer: every row after it (key and txn set; a NULL value deletes);
* the Java reference's layout (no NULL/NULL row, possibly only the ``key,value`` columns):
  the known system keys are system rows, every other row a key of a leaf root.

Same rules, same errors. Every check `deserialize` makes is made here over the batch; a file
that fails one, or that the vectorized path cannot vouch for (a schema other than the spec's
four utf8 columns or the Java pair, other than one record batch, a key after a NULL row of the
key table, an ``n_keys`` that is not the key count spelled plainly, an Arrow error), goes to
`deserialize` itself, which raises the typed error naming the file (or, on a false alarm,
parses it). So a file decodes to the same pointers, or fails with the same message, either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trinitylake.errors import TrinityLakeError
from trinitylake.format.keys import SYS_LAKEHOUSE_DEF, SYS_N_KEYS
from trinitylake.format.node import _JAVA_SYSTEM_KEYS, SCHEMA, deserialize

#: Kinds of pointers a node file stores.
CHILD = 0  # a ``pnode`` of the key table
VALUE = 1  # the value of a key in the key table
MESSAGE = 2  # the value of a *set* message of the write buffer

SCHEMA_2 = pa.schema([SCHEMA.field("key"), SCHEMA.field("value")])
_JAVA_SYSTEM = pa.array(sorted(_JAVA_SYSTEM_KEYS), pa.utf8())
_NAMES_4 = SCHEMA.names
_NAMES_2 = SCHEMA_2.names
_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)


@dataclass
class NodePointers:
    """The pointers stored in a batch of node files.

    Pointers are ordered by file, and within a file as `deserialize` lists them: children
    (leftmost first), key-table values, set messages of the buffer (oldest first) (unless
    decoded with ``ordered=False``). Files that failed (`errors`) or were not given (None)
    have no pointers.
    """

    count: int  # files in the batch
    node: np.ndarray  # int32 per pointer: index of its file in the batch
    kind: np.ndarray  # int8 per pointer: CHILD, VALUE or MESSAGE
    pointer: pa.Array  # utf8 per pointer, never NULL
    lakehouse_def: list[str | None]  # per file: its ``lakehouse_def`` system row, if any
    errors: dict[int, TrinityLakeError] = field(default_factory=dict)  # per failed file: what deserialize raised


def decode_pointers(datas: Sequence[bytes | None], where: Callable[[int], str], ordered: bool = True) -> NodePointers:
    """The pointers of node files (`datas[i]` None: skip file i), decoded together.

    Args:
        datas: the bytes of each file.
        where: the name of file i in error messages (called only for files that fail).
        ordered: order the pointers as `NodePointers` says; False leaves them in an order of
            the decoder's choosing (each still with its file and kind).

    Raises:
        whatever `deserialize` raises other than a `TrinityLakeError` (those are returned per
        file in `errors`).
    """
    n = len(datas)
    out = NodePointers(n, np.zeros(0, np.int32), np.zeros(0, np.int8), pa.array([], pa.utf8()), [None] * n)
    slow: list[int] = []
    parts: list[pa.Table] = []
    lens: list[int] = []
    index: list[int] = []
    todo = [i for i, d in enumerate(datas) if d is not None]
    for s in range(0, len(todo), PART):
        part = _part(datas, todo[s:s + PART], slow, lens, index)
        if part is not None:
            parts.append(part)
    if parts:
        big = parts[0] if len(parts) == 1 else pa.concat_tables(parts).combine_chunks()
        slow.extend(_decode(big, np.asarray(lens, np.int64), np.asarray(index, np.int64), out, ordered))
    if slow:
        _deserialize_each(sorted(slow), datas, where, out, ordered)
    return out


#: Files decoded, validated and concatenated together before the batch's pointers are read:
#: few enough that their Arrow objects are freed while still in cache (a batch of 1,024 per-file
#: record batches alive at once cost 74 us a file to concatenate, validate and free; parts of
#: 64, 53 us; the bare decode 25 us).
PART = 64


def _part(datas: Sequence[bytes | None], files: list[int], slow: list[int], lens: list[int], index: list[int]
          ) -> pa.Table | None:
    """Files `files` of the batch decoded into one table of the spec's schema, one chunk per
    column, fully validated as `deserialize` validates each file before it converts a column (a
    corrupt file can carry offsets that point outside its buffers, or bytes that are not UTF-8).
    Files it cannot take go to `slow`; the others' row counts and indexes to `lens`, `index`.

    The cheap checks per file (buffer sizes, first and last offsets: what concatenation reads)
    come first, then the full ones once over the concatenated columns: offsets stay monotonic,
    values keep their bytes and declared null counts add up, so the whole fails exactly when a
    file would; only then, file by file, to find the files `deserialize` must report."""
    batches: list[pa.RecordBatch] = []
    taken: list[int] = []
    open_file, buffer_reader, options = pa.ipc.open_file, pa.BufferReader, _READ_OPTIONS
    for i in files:
        try:
            # One small record batch: the reader's threads cost more than they save.
            reader = open_file(buffer_reader(datas[i]), options=options)
            if reader.num_record_batches != 1:  # none, or several: not what writers write
                slow.append(i)
                continue
            batches.append(reader.get_batch(0))
        except Exception:  # noqa: BLE001 - deserialize raises the typed error (or what it always raised)
            slow.append(i)
            continue
        taken.append(i)
    if not batches:
        return None
    try:
        table = pa.Table.from_batches(batches)
        if not table.schema.equals(SCHEMA):
            raise pa.ArrowInvalid("not the spec's schema")
        table.validate()
        table = table.combine_chunks()
        table.validate(full=True)
    except Exception:  # noqa: BLE001 - sorted out file by file
        table = None
    if table is None:
        keep, keep_taken = [], []
        for b, i in zip(batches, taken, strict=True):
            c = b if b.schema.equals(SCHEMA) else _conform(b)
            try:
                if c is None:
                    raise pa.ArrowInvalid("not the spec's schema")
                c.validate(full=True)
            except Exception:  # noqa: BLE001 - deserialize reports it
                slow.append(i)
                continue
            keep.append(c)
            keep_taken.append(i)
        batches, taken = keep, keep_taken
        if not batches:
            return None
        table = pa.Table.from_batches(batches).combine_chunks()
    lens.extend(b.num_rows for b in batches)
    index.extend(taken)
    return table


def _conform(b: pa.RecordBatch) -> pa.RecordBatch | None:
    """`b` with the spec's four columns (the Java pair widened with NULL ``pnode``/``txn``), or
    None when its columns are anything else (`deserialize` decides about those)."""
    try:
        names = b.schema.names
    except ValueError:  # a name that is not UTF-8
        return None
    if names != _NAMES_4 and names != _NAMES_2:
        return None
    if any(f.type != pa.utf8() for f in b.schema):
        return None
    cols = list(b.columns)
    if len(cols) == 2:
        nulls = pa.nulls(b.num_rows, pa.utf8())
        cols += [nulls, nulls]
    return pa.RecordBatch.from_arrays(cols, schema=SCHEMA)


def _column(t: pa.Table, name: str) -> pa.Array:
    col = t.column(name)
    return col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks) if col.num_chunks else pa.array(
        [], pa.utf8())


def _nulls(a: pa.Array) -> np.ndarray:
    if a.null_count == 0:
        return np.zeros(len(a), bool)
    return pc.is_null(a).to_numpy(zero_copy_only=False)


def _mask(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow result as numpy (NULL = False)."""
    return pc.fill_null(a, False).to_numpy(zero_copy_only=False)


def _first(mask: np.ndarray, f: np.ndarray, files: int, last: bool = False) -> np.ndarray:
    """Per file: the row of its first (or last) True in `mask`, -1 where none."""
    out = np.full(files, -1, np.int64)
    hit = np.flatnonzero(mask)
    if hit.size:
        fh = f[hit]
        edge = np.ones(hit.size, bool)
        if last:
            edge[:-1] = fh[1:] != fh[:-1]
        else:
            edge[1:] = fh[1:] != fh[:-1]
        out[fh[edge]] = hit[edge]
    return out


def _decode(big: pa.Table, lens: np.ndarray, index: np.ndarray, out: NodePointers, ordered: bool = True
            ) -> list[int]:
    """Fill `out` with the pointers of `big` (validated, one chunk per column: the files
    `index` of the batch, `lens` rows each, one after the other); return the files the
    vectorized checks found wrong or could not vouch for (for `deserialize`)."""
    files = len(lens)
    key, value, pnode, txn = (_column(big, c) for c in _NAMES_4)
    rows_n = len(key)
    starts = np.zeros(files, np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    f = np.repeat(np.arange(files, dtype=np.int64), lens)
    row = np.arange(rows_n, dtype=np.int64)
    kn, vn = _nulls(key), _nulls(value)
    pv, tv = ~_nulls(pnode), ~_nulls(txn)

    # Sections. The separator is the first NULL/NULL row; every row before it must have both.
    sep = _first(kn & vn, f, files)
    bad = _first(kn | vn, f, files) != sep  # a system row with a NULL (any NULL in a Java-layout file)
    spec_f = sep >= 0
    sep_r = sep[f]
    spec = sep_r >= 0
    after_sep = spec & (row > sep_r)
    end = _first(tv & after_sep, f, files)
    end = np.where(end < 0, starts + lens, end)
    end_r = end[f]
    kt = after_sep & (row < end_r)  # key-table rows after row 0
    buf = spec & (row >= end_r)
    system = spec & (row < sep_r)
    java = ~spec
    has_child = np.zeros(files, bool)
    has_child[spec_f] = pv[sep[spec_f]]
    keyrow = kt & ~kn
    bad_rows = kt & ((kn & (~vn | pv)) | (~kn & vn) | (~kn & (pv != has_child[f])))
    bad_rows |= buf & (kn | ~tv)
    unsure = np.zeros(rows_n, bool)

    # Keys sorted (strictly), compared with the key of the row above.
    values_r = keyrow
    if rows_n > 1:
        le = _mask(pc.less_equal(key.slice(1), key.slice(0, rows_n - 1)))
        bad_rows[1:] |= keyrow[1:] & keyrow[:-1] & le
        # A key after a NULL row of the key table compares with the last key before it.
        unsure[1:] |= keyrow[1:] & kt[:-1] & ~keyrow[:-1]
    if java.any():
        sys_key = _mask(pc.is_in(key, value_set=_JAVA_SYSTEM))
        nonsys = java & ~sys_key
        values_r = keyrow | nonsys
        if rows_n > 1:
            same = f[1:] == f[:-1]
            bad_rows[1:] |= nonsys[1:] & nonsys[:-1] & same & le
            first_nonsys = _first(nonsys, f, files)
            unsure[1:] |= nonsys[1:] & ~nonsys[:-1] & same & (row[1:] > first_nonsys[f[1:]])
        system = system | (java & sys_key)

    # n_keys, when declared, must count the key rows (spelled otherwise: deserialize decides).
    nk = _first(system & spec & _mask(pc.equal(key, SYS_N_KEYS)), f, files, last=True)
    has_nk = np.flatnonzero(nk >= 0)
    if has_nk.size:
        counts = np.bincount(f[keyrow], minlength=files)
        declared = value.take(pa.array(nk[has_nk]))
        same_n = _mask(pc.equal(declared, pa.array(counts[has_nk]).cast(pa.utf8())))
        bad[has_nk[~same_n]] = True

    bad_f = bad.copy()
    if bad_rows.any():
        bad_f[f[bad_rows]] = True
    if unsure.any():
        bad_f[f[unsure]] = True
    ok = ~bad_f[f]

    ld = _first(system & _mask(pc.equal(key, SYS_LAKEHOUSE_DEF)), f, files, last=True)
    has_ld = np.flatnonzero((ld >= 0) & ~bad_f)
    if has_ld.size:
        for i, v in zip(index[has_ld].tolist(), value.take(pa.array(ld[has_ld])).to_pylist(), strict=True):
            out.lakehouse_def[i] = v

    ci = np.flatnonzero(ok & pv & spec & (row >= sep_r) & (row < end_r))
    message = buf & ~vn
    vi = np.flatnonzero(ok & (values_r | message))  # a file's key-table rows come before its buffer rows
    node = np.concatenate([f[ci], f[vi]])
    kind = np.concatenate([np.full(ci.size, CHILD, np.int8), np.where(message[vi], MESSAGE, VALUE).astype(np.int8)])
    pointer = pa.concat_arrays([pnode.take(pa.array(ci)), value.take(pa.array(vi))])
    if ordered and ci.size and vi.size:
        order = np.argsort(node, kind="stable")  # two sorted runs: a merge
        node, kind, pointer = node[order], kind[order], pointer.take(pa.array(order))
    out.pointer = pointer
    out.node = index[node].astype(np.int32)
    out.kind = kind
    return index[bad_f].tolist()


def _deserialize_each(slow: list[int], datas: Sequence[bytes | None], where: Callable[[int], str],
                      out: NodePointers, ordered: bool = True) -> None:
    """Files the batch path left: `deserialize` reports them, or parses them after all."""
    nodes: list[int] = []
    kinds: list[int] = []
    pointers: list[str] = []
    for i in slow:
        data = datas[i]
        assert data is not None
        try:
            node = deserialize(data, None, where(i))
        except TrinityLakeError as e:
            out.errors[i] = e
            continue
        out.lakehouse_def[i] = node.system.get(SYS_LAKEHOUSE_DEF)
        found = ([(CHILD, c) for c in node.children] + [(VALUE, v) for v in node.values]
                 + [(MESSAGE, m.value) for m in node.buffer if m.value is not None])
        nodes.extend([i] * len(found))
        kinds.extend(k for k, _ in found)
        pointers.extend(p for _, p in found)
    if not nodes:
        return
    at = np.concatenate([out.node, np.asarray(nodes, np.int32)])
    kind = np.concatenate([out.kind, np.asarray(kinds, np.int8)])
    pointer = pa.concat_arrays([out.pointer, pa.array(pointers, pa.utf8())])
    if ordered:
        order = np.argsort(at, kind="stable")
        at, kind, pointer = at[order], kind[order], pointer.take(pa.array(order))
    out.node, out.kind, out.pointer = at, kind, pointer
