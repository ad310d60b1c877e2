"""Node files: Arrow IPC (file format), four nullable utf8 columns ``key,value,pnode,txn``.

Layout, top to bottom:

1. system rows (key and value set);
2. the node key table: exactly `order` rows, row 0 is NULL/NULL with the leftmost child
   pointer, rows 1..k hold sorted keys with values and the pointer to the child right of the
   key, the rest are all NULL;
3. the write buffer: B-epsilon messages (key, value or NULL for delete, txn), newest last.

Readers also accept the Java reference's 2-column single-root layout (system rows then keys,
no separator row, no buffer).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import pyarrow as pa

from trinitylake.errors import CorruptNodeError, NodeLayoutError
from trinitylake.format.keys import SYS_N_KEYS

SCHEMA = pa.schema(
    [
        pa.field("key", pa.utf8(), nullable=True),
        pa.field("value", pa.utf8(), nullable=True),
        pa.field("pnode", pa.utf8(), nullable=True),
        pa.field("txn", pa.utf8(), nullable=True),
    ]
)

# Fixed bytes an IPC file costs beyond its cells (schema, footer, buffers' alignment);
# used by the size estimate that decides flushes and splits.
IPC_OVERHEAD_BYTES = 1024
CELL_OVERHEAD_BYTES = 4


@dataclass
class Message:
    """A write-buffer message: set `key` to `value`, or delete it when `value` is None."""

    key: str
    value: str | None
    txn: str


@dataclass
class Node:
    """One node of the B-epsilon tree, in memory.

    `children` is empty for a leaf; for an internal node it has ``len(keys) + 1`` entries:
    children[0] is left of keys[0] and children[i + 1] right of keys[i].
    """

    system: dict[str, str] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    buffer: list[Message] = field(default_factory=list)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def buffer_index(self) -> dict[str, str | None]:
        """Newest message per key. Cached: only call on nodes that are no longer mutated
        (loaded from a file); a large root buffer would otherwise be scanned per lookup."""
        idx = self.__dict__.get("_buffer_index")
        if idx is None or self.__dict__.get("_buffer_index_len") != len(self.buffer):
            idx = {m.key: m.value for m in self.buffer}
            self.__dict__["_buffer_index"] = idx
            self.__dict__["_buffer_index_len"] = len(self.buffer)
        return idx

    def copy(self) -> Node:
        return Node(dict(self.system), list(self.keys), list(self.values), list(self.children), list(self.buffer))

    def estimated_size(self) -> int:
        """Bytes the IPC file will roughly take; cheap enough to call on every change."""
        n = IPC_OVERHEAD_BYTES
        for k, v in self.system.items():
            n += len(k) + len(v) + 4 * CELL_OVERHEAD_BYTES
        for k, v in zip(self.keys, self.values, strict=True):
            n += len(k.encode()) + len(v.encode()) + 4 * CELL_OVERHEAD_BYTES
        for c in self.children:
            n += len(c) + CELL_OVERHEAD_BYTES
        for m in self.buffer:
            n += len(m.key.encode()) + len(m.txn) + (len(m.value.encode()) if m.value else 0) + 4 * CELL_OVERHEAD_BYTES
        return n


def serialize(node: Node, order: int) -> bytes:
    """Arrow IPC file bytes of `node` with exactly `order` key-table rows."""
    if len(node.keys) > order - 1:
        raise NodeLayoutError(f"node has {len(node.keys)} keys, order {order} allows {order - 1}")
    if node.children and len(node.children) != len(node.keys) + 1:
        raise NodeLayoutError(f"internal node has {len(node.keys)} keys and {len(node.children)} children, "
                              "needs one child more than keys")
    keys: list[str | None] = []
    values: list[str | None] = []
    pnodes: list[str | None] = []
    txns: list[str | None] = []
    system = dict(node.system)
    system[SYS_N_KEYS] = str(len(node.keys))
    for k, v in system.items():
        keys.append(k)
        values.append(v)
        pnodes.append(None)
        txns.append(None)
    keys.append(None)
    values.append(None)
    pnodes.append(node.children[0] if node.children else None)
    txns.append(None)
    for i, (k, v) in enumerate(zip(node.keys, node.values, strict=True)):
        keys.append(k)
        values.append(v)
        pnodes.append(node.children[i + 1] if node.children else None)
        txns.append(None)
    pad = order - 1 - len(node.keys)
    keys.extend([None] * pad)
    values.extend([None] * pad)
    pnodes.extend([None] * pad)
    txns.extend([None] * pad)
    for m in node.buffer:
        keys.append(m.key)
        values.append(m.value)
        pnodes.append(None)
        txns.append(m.txn)
    table = pa.Table.from_arrays(
        [pa.array(keys, pa.utf8()), pa.array(values, pa.utf8()), pa.array(pnodes, pa.utf8()), pa.array(txns, pa.utf8())],
        schema=SCHEMA,
    )
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_table(table)
    return sink.getvalue()


def deserialize(data: bytes, order: int | None, where: str) -> Node:
    """Parse node file bytes. `order` None means "take it from the file" (root before the
    lakehouse definition is known): the key table then extends to the first buffer row.

    Raises:
        CorruptNodeError: naming `where`, for truncated files, wrong schemas or broken layout.
    """
    try:
        table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
        # The IPC reader checks the metadata only: a corrupt file can carry offsets that point
        # outside its buffers, and converting those columns would read out of bounds (a
        # segfault, found by the reliability fuzzer). Full validation turns that into an error.
        table.validate(full=True)
    except (pa.ArrowException, OSError, ValueError, TypeError, KeyError, IndexError) as e:
        raise CorruptNodeError(f"node file {where} is not a readable Arrow IPC file: {e}") from None
    names = table.column_names
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise CorruptNodeError(f"node file {where} has duplicate columns {dup}")
    if "key" not in names or "value" not in names:
        raise CorruptNodeError(f"node file {where} lacks the key/value columns (has {names})")
    # A missing pnode/txn column reads as NULL (Java writes key,value only), so a column whose
    # name is damaged must not pass as missing: a root whose "pnode" was corrupted would read
    # as a leaf, every subtree silently gone (found by the reliability fuzzer at full scale).
    unknown = [c for c in names if c not in SCHEMA.names]
    if unknown:
        raise CorruptNodeError(f"node file {where} has columns the format does not define: {unknown} "
                               f"(a node file has {', '.join(SCHEMA.names)})")
    for c in names:
        if c in ("key", "value", "pnode", "txn") and not pa.types.is_string(table.schema.field(c).type):
            raise CorruptNodeError(f"node file {where}: column {c} is {table.schema.field(c).type}, expected utf8")
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    n = len(keys)
    pnodes = table.column("pnode").to_pylist() if "pnode" in names else [None] * n
    txns = table.column("txn").to_pylist() if "txn" in names else [None] * n
    node = Node()
    i = 0
    while i < n and not (keys[i] is None and values[i] is None):
        if keys[i] is None or values[i] is None:
            raise CorruptNodeError(f"node file {where}: system row {i} has a NULL key or value")
        node.system[keys[i]] = values[i]
        i += 1
    if i == n:
        # Java layout: no separator row. Known system keys came first; the rest are keys.
        return _java_layout(keys, values, where)
    # Key table.
    start = i
    end = start + order if order is not None else _table_end(keys, txns, start)
    if end > n:
        raise CorruptNodeError(f"node file {where}: key table needs {end - start} rows, file has {n - start}")
    first_child = pnodes[start]
    children: list[str] = [first_child] if first_child is not None else []
    for r in range(start + 1, end):
        k = keys[r]
        if k is None:
            if values[r] is not None or pnodes[r] is not None:
                raise CorruptNodeError(f"node file {where}: key table row {r - start} has a value but no key")
            continue
        if values[r] is None:
            raise CorruptNodeError(f"node file {where}: key {k!r} in the key table has no value")
        if node.keys and k <= node.keys[-1]:
            raise CorruptNodeError(f"node file {where}: key table is not sorted at row {r - start}")
        node.keys.append(k)
        node.values.append(values[r])
        pnode = pnodes[r]
        if children:
            if pnode is None:
                raise CorruptNodeError(f"node file {where}: internal node key {k!r} has no child pointer")
            children.append(pnode)
        elif pnode is not None:  # read as a leaf, this subtree would silently vanish
            raise CorruptNodeError(f"node file {where}: key {k!r} has a child pointer but row 0 has none")
    node.children = children
    for r in range(end, n):
        key, txn = keys[r], txns[r]
        if key is None or txn is None:
            raise CorruptNodeError(f"node file {where}: write-buffer row {r} lacks a key or txn")
        node.buffer.append(Message(key, values[r], txn))
    declared = node.system.get(SYS_N_KEYS)
    if declared is not None and declared.isdigit() and int(declared) != len(node.keys):
        raise CorruptNodeError(f"node file {where}: n_keys says {declared}, key table holds {len(node.keys)}")
    return node


def _table_end(keys: list, txns: list, start: int) -> int:
    r = start + 1
    while r < len(keys) and txns[r] is None:
        r += 1
    return r


_JAVA_SYSTEM_KEYS = {"created_at_millis", "lakehouse_def", "n_keys", "previous_root", "rollback_from_root"}


def _java_layout(keys: list, values: list, where: str) -> Node:
    node = Node()
    for k, v in zip(keys, values, strict=True):
        if k in _JAVA_SYSTEM_KEYS:
            node.system[k] = v
        else:
            if node.keys and k <= node.keys[-1]:
                raise CorruptNodeError(f"node file {where}: Java-layout keys are not sorted at {k!r}")
            node.keys.append(k)
            node.values.append(v)
    return node
