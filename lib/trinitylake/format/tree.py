"""The B-epsilon search tree: merge-on-read lookups and scans, copy-on-write commits.

Reads: a key is looked up from the root down; at each node the write buffer is scanned
newest-first, then the key table, then the search descends through the child pointer. The
first hit on the way down is the newest value.

Writes (`TreeWriter.commit`): a transaction's messages go to the root's write buffer. When the
root (or any internal node) grows past ``buffer_max_messages`` messages or
``node_file_max_size_bytes``, its older messages are flushed one level down: messages for
keys held in the node's own key table are applied in place, the rest are appended to the
child's buffer (or applied to a leaf's key table), recursively. Nodes that exceed ``order - 1``
keys or the byte limit split, pushing separator keys (with their values: internal nodes hold
key/value pairs, as in a B-tree) up. The committing transaction's own messages are never
flushed from the root, so concurrent committers can read its change set there.

Every changed node is a new immutable ``node-<uuid>.arrow`` under a hash prefix; unchanged
subtrees are shared with the previous version by pointer.
"""

from __future__ import annotations

import bisect
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, overload

from trinitylake.errors import CorruptNodeError
from trinitylake.format.keys import SYS_CREATED_AT
from trinitylake.format.node import Message, Node, deserialize, serialize
from trinitylake.format.paths import new_node_path, owning_root
from trinitylake.storage.uri import is_absolute, join_uri

if TYPE_CHECKING:
    from trinitylake.storage.storage import Storage


class NodeLoader(Protocol):
    """What a read needs: a node by its stored pointer (a `NodeStore`, or a `TreeWriter`
    that also sees its own staged nodes)."""

    def load(self, path: str) -> Node: ...


class NodeStore:
    """Loads immutable node files through a bounded cache and stages new ones for a commit.

    `resolve(path)` maps a stored pointer (relative path or absolute URI) to
    ``(storage, path)``; by default everything is read from `storage`.
    """

    def __init__(
        self,
        storage: Storage,
        order: int,
        cache_size: int = 4096,
        resolve: Callable[[str], tuple[Storage, str]] | None = None,
    ):
        self.storage = storage
        self.order = order
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Node] = OrderedDict()
        self._resolve = resolve
        self.reads = 0  # node files read from storage (benchmarks and tests look at it)

    def load(self, path: str) -> Node:
        node = self._cache.get(path)
        if node is not None:
            self._cache.move_to_end(path)
            return node
        storage, p = self._resolve(path) if self._resolve else (self.storage, path)
        try:
            data = storage.read(p)
        except FileNotFoundError:
            # A pointer to a missing node is a broken tree, not an absent key: say so, typed.
            raise CorruptNodeError(f"node file {storage.uri(p)} is missing: the tree being read references it "
                                   "(deleted, or its version was expired while being read)") from None
        self.reads += 1
        node = deserialize(data, None, storage.uri(p))
        if is_absolute(path):
            node = rebase_pointers(node, owning_root(path))
        self.put(path, node)
        return node

    def put(self, path: str, node: Node) -> None:
        self._cache[path] = node
        self._cache.move_to_end(path)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)


def rebase_pointers(node: Node, base: str | None) -> Node:
    """`node` with its relative pointers made absolute against `base` (None: unchanged).

    A node reached through an absolute URI (the source nodes below a partial or minimal
    export's cut) belongs to another tree, whose relative pointers resolve against that tree's
    root, not against the root of the tree being read.
    """
    if base is None:
        return node
    root: str = base

    @overload
    def fix(p: str) -> str: ...
    @overload
    def fix(p: str | None) -> str | None: ...
    def fix(p: str | None) -> str | None:
        return p if p is None or is_absolute(p) else join_uri(root, p)

    out = node.copy()
    out.children = [fix(c) for c in node.children]
    out.values = [fix(v) for v in node.values]
    out.buffer = [Message(m.key, fix(m.value), m.txn) for m in node.buffer]
    return out


# ---- reads -------------------------------------------------------------------------------
def get(store: NodeLoader, root: Node, key: str) -> str | None:
    """Value of `key` in the tree under `root`, or None."""
    node = root
    while True:
        if len(node.buffer) > 16:
            idx = node.buffer_index()
            if key in idx:
                return idx[key]
        else:
            for m in reversed(node.buffer):
                if m.key == key:
                    return m.value
        i = bisect.bisect_left(node.keys, key)
        if i < len(node.keys) and node.keys[i] == key:
            return node.values[i]
        if node.is_leaf:
            return None
        node = store.load(node.children[i])


def iter_items(
    store: NodeLoader,
    node: Node,
    lo: str | None = None,
    hi: str | None = None,
    reverse: bool = False,
    overrides: dict[str, str | None] | None = None,
    *,
    enter: Callable[[str, dict[str, str | None]], bool] | None = None,
) -> Iterator[tuple[str, str]]:
    """Live ``(key, value)`` pairs with ``lo <= key < hi`` in key order (or reversed).

    `overrides` are messages from ancestors' buffers, newer than anything in this subtree.
    Only children whose key interval meets ``[lo, hi)`` are read, and iteration is lazy, so
    a bounded scan or a max/min lookup reads O(height) nodes. `enter`, when given, is asked
    before a child is read, with its pointer and the messages pushed down into it; a child it
    refuses is skipped with its whole subtree (a caller that walked that subtree already, with
    the same messages, for another root sharing it).
    """

    def in_range(k: str) -> bool:
        return (lo is None or k >= lo) and (hi is None or k < hi)

    ov: dict[str, str | None] = {m.key: m.value for m in node.buffer if in_range(m.key)}
    if overrides:
        ov.update(overrides)
    if node.is_leaf:
        merged: dict[str, str | None] = {k: v for k, v in zip(node.keys, node.values, strict=True) if in_range(k)}
        merged.update(ov)
        for k in sorted(merged, reverse=reverse):
            v = merged[k]
            if v is not None:
                yield k, v
        return
    n = len(node.keys)
    ov_keys = sorted(ov)
    order = range(n, -1, -1) if reverse else range(n + 1)
    for j in order:
        # child j covers (keys[j-1], keys[j]); key j (if any) follows it in ascending order
        left = node.keys[j - 1] if j > 0 else None
        right = node.keys[j] if j < n else None
        parts: list = []
        if (right is None or lo is None or right > lo) and (left is None or hi is None or left < hi):
            a = bisect.bisect_right(ov_keys, left) if left is not None else 0
            b = bisect.bisect_left(ov_keys, right) if right is not None else len(ov_keys)
            child_ov = {k: ov[k] for k in ov_keys[a:b]}
            c_lo = lo if left is None or (lo is not None and lo > left) else left
            c_hi = hi if right is None or (hi is not None and hi < right) else right
            parts.append(("child", j, c_lo, c_hi, child_ov))
        if right is not None and in_range(right):
            parts.append(("key", j))
        if reverse:
            parts.reverse()
        for p in parts:
            if p[0] == "child":
                child = node.children[p[1]]
                if enter is None or enter(child, p[4]):
                    yield from iter_items(store, store.load(child), p[2], p[3], reverse, p[4], enter=enter)
            else:
                k = node.keys[p[1]]
                v = ov[k] if k in ov else node.values[p[1]]
                if v is not None:
                    yield k, v


def scan_prefix(store: NodeLoader, root: Node, prefix: str) -> list[tuple[str, str]]:
    """All live pairs whose key starts with `prefix`, in key order."""
    return list(iter_items(store, root, prefix, prefix_end(prefix)))


def prefix_end(prefix: str) -> str | None:
    """Smallest string greater than every string starting with `prefix`."""
    # A trailing U+10FFFF (the largest code point) cannot be incremented: drop it and carry.
    prefix = prefix.rstrip("\U0010ffff")
    if not prefix:
        return None
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def reachable_children(node: Node) -> list[str]:
    return list(node.children)


# ---- writes ------------------------------------------------------------------------------
@dataclass
class TreeParams:
    order: int = 128
    max_bytes: int = 1 << 20
    buffer_max_messages: int = 128


class TreeWriter:
    """Applies one transaction's messages to a root, copy-on-write.

    New non-root nodes are staged in `pending` (path -> bytes); the caller writes them before
    it creates the new root file, so a reader that sees the root finds every node.
    """

    def __init__(self, store: NodeStore, params: TreeParams):
        self.store = store
        self.p = params
        self.pending: dict[str, bytes] = {}
        self.staged: dict[str, Node] = {}  # path -> node of `pending`, readable before it is written
        self.now_millis = int(time.time() * 1000)

    # -- public
    def commit(self, root: Node, messages: list[Message], keep_txn: str) -> Node:
        """New root node (system rows left to the caller) holding `messages` on top of `root`."""
        root = root.copy()
        root.buffer.extend(messages)
        # A root read in the Java layout may hold any number of keys in one node (Java keeps a
        # single unbounded root): the first commit on it splits it into a proper tree.
        if not self._needs_flush(root) and not self._oversized_table(root):
            return root
        kept = [m for m in root.buffer if m.txn == keep_txn]
        root.buffer = [m for m in root.buffer if m.txn != keep_txn]
        if not root.buffer and not self._oversized_table(root):
            root.buffer = kept
            return root
        system = dict(root.system)
        nodes, seps = self._flush_and_split(root)
        while len(nodes) > 1:
            # The root split: grow the tree by one level.
            top = Node(keys=[k for k, _ in seps], values=[v for _, v in seps], children=[self._write(n) for n in nodes])
            nodes, seps = self._split(top)
        new_root = nodes[0]
        new_root.system = system
        new_root.buffer = kept
        return new_root

    # -- internals
    def _needs_flush(self, node: Node) -> bool:
        return len(node.buffer) > self.p.buffer_max_messages or node.estimated_size() > self.p.max_bytes

    def _oversized_table(self, node: Node) -> bool:
        return len(node.keys) > self.p.order - 1

    def _write(self, node: Node) -> str:
        path = new_node_path()
        node.system = {SYS_CREATED_AT: str(self.now_millis)}
        self.pending[path] = serialize(node, self.p.order)
        self.staged[path] = node
        return path

    def load(self, path: str) -> Node:
        """A node of this commit (staged, not yet written) or of the base tree. The staging is
        per writer: two commits running in threads over one NodeStore must not see, or clear,
        each other's unwritten nodes."""
        node = self.staged.get(path)
        return node if node is not None else self.store.load(path)

    def _load_copy(self, path: str) -> Node:
        return self.load(path).copy()

    def _apply(self, node: Node, msgs: list[Message]) -> tuple[list[Node], list[tuple[str, str]]]:
        """Hand `msgs` (newer than everything in `node`'s subtree) down to `node`."""
        if node.is_leaf:
            node.buffer.extend(msgs)
            return self._flush_and_split(node)
        node.buffer.extend(msgs)
        if not self._needs_flush(node):
            return [node], []
        return self._flush_and_split(node)

    def _flush_and_split(self, node: Node) -> tuple[list[Node], list[tuple[str, str]]]:
        self._flush(node)
        return self._split(node)

    def _flush(self, node: Node) -> None:
        latest: dict[str, Message] = {}
        for m in node.buffer:
            latest[m.key] = m
        node.buffer = []
        if node.is_leaf:
            for k in sorted(latest):
                m = latest[k]
                i = bisect.bisect_left(node.keys, k)
                hit = i < len(node.keys) and node.keys[i] == k
                if m.value is None:
                    if hit:
                        del node.keys[i]
                        del node.values[i]
                elif hit:
                    node.values[i] = m.value
                else:
                    node.keys.insert(i, k)
                    node.values.insert(i, m.value)
            return
        groups: dict[int, list[Message]] = {}
        internal_deletes: list[Message] = []
        for k in sorted(latest):
            m = latest[k]
            i = bisect.bisect_left(node.keys, k)
            if i < len(node.keys) and node.keys[i] == k:
                if m.value is None:
                    internal_deletes.append(m)
                else:
                    node.values[i] = m.value
            else:
                groups.setdefault(i, []).append(m)
        # Highest child first, so separators inserted at i do not shift the lower indexes.
        for i in sorted(groups, reverse=True):
            new_nodes, seps = self._apply(self._load_copy(node.children[i]), groups[i])
            self._replace_child(node, i, new_nodes, seps)
        for m in internal_deletes:
            self._delete_internal(node, m)

    def _replace_child(self, node: Node, i: int, new_nodes: list[Node], seps: list[tuple[str, str]]) -> None:
        node.children[i : i + 1] = [self._write(n) for n in new_nodes]
        node.keys[i:i] = [k for k, _ in seps]
        node.values[i:i] = [v for _, v in seps]

    def _delete_internal(self, node: Node, m: Message) -> None:
        """Delete a key held in an internal node's key table (B-tree style: replace it with
        its in-order predecessor or successor, then delete that one below)."""
        i = node.keys.index(m.key)
        left = self.load(node.children[i])
        pred = next(iter_items(self, left, reverse=True), None)
        if pred is not None:
            node.keys[i], node.values[i] = pred
            new_nodes, seps = self._apply(left.copy(), [Message(pred[0], None, m.txn)])
            self._replace_child(node, i, new_nodes, seps)
            return
        right = self.load(node.children[i + 1])
        succ = next(iter_items(self, right), None)
        if succ is not None:
            node.keys[i], node.values[i] = succ
            new_nodes, seps = self._apply(right.copy(), [Message(succ[0], None, m.txn)])
            self._replace_child(node, i + 1, new_nodes, seps)
            return
        # Both neighbouring subtrees hold no live key: collapse them into one empty leaf.
        del node.keys[i]
        del node.values[i]
        node.children[i : i + 2] = [self._write(Node())]

    def _split(self, node: Node) -> tuple[list[Node], list[tuple[str, str]]]:
        n = len(node.keys)
        too_many = n > self.p.order - 1
        too_big = n >= 3 and node.estimated_size() > self.p.max_bytes
        if not (too_many or too_big):
            return [node], []
        assert not node.buffer or node.is_leaf, "internal nodes split only after a full flush"
        m = max(2, -(-(n + 1) // self.p.order))
        if too_big:
            m = max(m, -(-node.estimated_size() // max(1, int(self.p.max_bytes * 0.75))))
        m = min(m, (n + 1) // 2)
        usable = n - (m - 1)
        sizes = [usable // m + (1 if j < usable % m else 0) for j in range(m)]
        parts: list[Node] = []
        seps: list[tuple[str, str]] = []
        pos = 0
        for j, size in enumerate(sizes):
            part = Node(keys=node.keys[pos : pos + size], values=node.values[pos : pos + size])
            if node.children:
                part.children = node.children[pos : pos + size + 1]
            parts.append(part)
            pos += size
            if j < m - 1:
                seps.append((node.keys[pos], node.values[pos]))
                pos += 1
        return parts, seps
