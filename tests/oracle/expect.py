"""Expected values for the job, crash, fault and stress tests, computed by the oracle alone.

Everything here is written from the spec (../shared/FORMAT.md §1-§4, §7) on top of the oracle's
reader (`tests.oracle.reader`: its node-file parser, its pointer rules, its file access) and shares
no code with the library's walk, retention or orphan rules:

* **Which roots are live** is the oracle's own choice (`live_entries`): every listed version from
  the latest definition's ``oldest_retained_version`` to the latest listed root, the root of every
  *pinned* ``exported_snapshots`` entry (its name also in ``exported_snapshot_pins``) that exists,
  and every ``exported_snapshot_pins`` version that is listed. An unpinned export is
  self-contained (§7: "a full export no longer depends on the source"): it is not walked and not
  even probed (`self_contained_exports`). The oracle's reader still reads every export for what
  must stay readable (`Oracle.live_files`, `Oracle.problems`), so a job that deleted a source file
  a self-contained export needed would fail those checks. The latest version is the highest
  listed root (§7.5: listing is authoritative). Then the running root of every live distributed
  transaction (§7 step 3; `txn_entries`): open or committing by its latest listed state file, and
  within its ``expire_at`` plus a clock-skew margin. Its first_version is the version it began
  at (re-pinned by every stage).
* **What a set of roots reaches, with depth and first_version** (`walk`): breadth first, level
  by level. A file's depth is the length of its shortest pointer path from any of the roots
  (roots are depth 0); its first_version is the smallest version among the roots that reach it
  along such a shortest path. A file named as a child (``pnode``) anywhere is a node file, read
  and followed, even where another node names it as a value. Node files are read once; leaves (definitions, the lakehouse
  definition) are only sized.
* **Which files are orphans** (`orphans`): files whose names the format owns (§7, the oracle's own
  pattern), older than the cutoff, that no live root reaches.
* **What a version holds** (`tables`, `namespaces`): the merged keys of its tree, decoded by the
  key encoding of §3 (schema prefix, names right-padded with spaces to the definition's byte
  widths).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.format.oracle import root_name, root_version
from tests.oracle.defs import transaction_def
from tests.oracle.reader import (
    OWNED,
    ROOT_FILE,
    TXN_FILE,
    BotoFiles,
    NodeFile,
    Oracle,
    OracleError,
    base_of,
    boto_client_for,
    in_one_call,
    parse_node,
    root_base,
    system_rows,
)

NS_PREFIX = "B==="
TABLE_PREFIX = "C==="


def oracle_for(uri: str, options: dict | None = None) -> Oracle:
    """The oracle of the lakehouse at `uri` (S3 through boto3 with `options`' endpoint and keys)."""
    client = boto_client_for(options) if uri.startswith("s3://") else None
    return Oracle(uri, s3_client=client)


def oracle_of(lh: Any) -> Oracle:
    """The oracle of a library `Lakehouse` object: only its URI and storage options are taken."""
    return oracle_for(lh.uri, lh.storage.options)


# ---- versions and live roots -----------------------------------------------------------------------
@in_one_call
def latest_version(o: Oracle) -> int:
    vs = o.listed_versions()
    if not vs:
        raise OracleError(f"no root file under {o.root}")
    return vs[-1]


@in_one_call
def definition_of(o: Oracle, version: int) -> Any:
    """The lakehouse definition the root of `version` points to."""
    node, base = o._root(f"{o.root}/{root_name(version)}")
    return o.definition(o.resolve(node.system["lakehouse_def"], base))


@in_one_call
def floor(o: Oracle) -> int:
    """The committed ``oldest_retained_version`` of the latest version's definition."""
    return int(o.latest()[1].oldest_retained_version)


@in_one_call
def kept_versions(o: Oracle) -> list[int]:
    """Listed versions from the committed floor to the latest."""
    latest, d = o.latest()
    return [v for v in o.listed_versions() if d.oldest_retained_version <= v <= latest]


@in_one_call
def live_entries(o: Oracle, at_ms: int | None = None) -> list[tuple[int, str]]:
    """(version, root URI) of every live root, by the oracle's own rules (see the module doc)."""
    latest, d = o.latest()
    listed = set(o.listed_versions())
    out = [(v, f"{o.root}/{root_name(v)}") for v in sorted(listed) if d.oldest_retained_version <= v <= latest]
    walked = {v for v, _ in out}
    for _, v in sorted(d.exported_snapshot_pins.items()):
        if v in listed and v not in walked:
            out.append((int(v), f"{o.root}/{root_name(v)}"))
            walked.add(v)
    for name, uri in sorted(d.exported_snapshots.items()):
        if name in d.exported_snapshot_pins and exists(o, uri):
            out.append((root_version(uri.rsplit("/", 1)[-1]), uri))
    out += txn_entries(o, at_ms)
    return out


@in_one_call
def txn_entries(o: Oracle, at_ms: int | None = None) -> list[tuple[int, str]]:
    """(beginning version, running root URI) of every live distributed transaction at `at_ms`
    (default now; `Oracle.live_transactions`): what they staged is reachable only from there."""
    return [(t.begin_version, t.running_root) for t in o.live_transactions(at_ms)]


@in_one_call
def export_roots(o: Oracle) -> dict[str, str]:
    """Export name -> root URI of every walked export: recorded, pinned, and its root exists."""
    d = o.latest()[1]
    return {n: u for n, u in sorted(d.exported_snapshots.items()) if n in d.exported_snapshot_pins and exists(o, u)}


@in_one_call
def self_contained_exports(o: Oracle) -> dict[str, str]:
    """Export name -> root URI of every recorded export without a pin: not walked (nothing of
    it is read here either)."""
    d = o.latest()[1]
    return {n: u for n, u in sorted(d.exported_snapshots.items()) if n not in d.exported_snapshot_pins}


@in_one_call
def txn_files(o: Oracle, txn_id: str) -> set[str]:
    """Every state file of the distributed transaction `txn_id` that is listed, with the running
    root each names (relative paths): what a finished transaction leaves for the orphan job."""
    out = set()
    for p in o.files.list(o.root):
        m = TXN_FILE.match(p)
        if m is not None and m.group(1) == txn_id:
            d = transaction_def(o._read(f"{o.root}/{p}", "transaction definition"), p)
            out |= {p, d.running_root_node_file_path}
    return out


# ---- files -----------------------------------------------------------------------------------------
def _files_for(o: Oracle, uri: str) -> Any:
    if "://" not in uri or uri.startswith(o.root):
        return o.files
    from tests.oracle.reader import files_for

    return files_for(uri, o.s3_client)


def exists(o: Oracle, uri: str) -> bool:
    return _files_for(o, uri).exists(uri)


def size(o: Oracle, uri: str) -> int:
    """The size of the file at `uri`, -1 when it is missing."""
    files = _files_for(o, uri)
    if isinstance(files, BotoFiles):
        bucket, key = files._split(uri)
        try:
            return int(files.client.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except Exception:  # noqa: BLE001 - a 404 in botocore's words
            return -1
    try:
        return os.path.getsize(files.path(uri))
    except FileNotFoundError:
        return -1


def listing(o: Oracle) -> dict[str, float]:
    """Every file under the root (relative path) -> modification time in seconds."""
    if isinstance(o.files, BotoFiles):
        prefix = o.files._split(o.root + "/")[1]
        return {obj["Key"][len(prefix):]: obj["LastModified"].timestamp() for obj in o.files.objects(o.root)}
    base = o.files.path(o.root)
    return {p: os.path.getmtime(os.path.join(base, p)) for p in o.files.list(o.root)}


@in_one_call
def owned(o: Oracle) -> set[str]:
    """Files under the root whose names the format owns (FORMAT.md §7, the oracle's pattern)."""
    return o.owned_files()


def is_owned(path: str) -> bool:
    return OWNED.match(path) is not None


# ---- the walk --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    kind: str  # root, node, definition, lakehouse_def
    size: int  # -1: missing (or not sized)
    depth: int
    first_version: int


@dataclass
class Walk:
    """Keys are paths relative to the lakehouse root, full URIs for files elsewhere."""

    rows: dict[str, Row] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    node_reads: int = 0

    def paths(self, kind: str | None = None) -> set[str]:
        return {k for k, r in self.rows.items() if kind is None or r.kind == kind}

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows.values():
            out[r.kind] = out.get(r.kind, 0) + 1
        return out

    def tuples(self) -> list[tuple[str, str, int, int, int]]:
        """Sorted (path, kind, size, depth, first_version), the walk listing's columns."""
        return sorted((k, r.kind, r.size, r.depth, r.first_version) for k, r in self.rows.items())


@in_one_call
def walk(o: Oracle, entries: Iterable[tuple[int, str]], *, sizes: bool = True, exclude: Iterable[str] = (),
         tolerate_missing: bool = True) -> Walk:
    """What the roots `entries` ((version, root URI)) reach, level by level (see the module doc).

    `exclude`: keys already known (immutable files): not read, not listed, not followed.
    A missing file gets size -1 and is listed in `missing` (an OracleError instead when
    `tolerate_missing` is false); a corrupt node file is always an OracleError.
    """
    skip = set(exclude)
    out = Walk()

    def key(uri: str) -> str:
        rel = o.relative(uri)
        return rel if rel is not None else uri

    # frontier: key -> (uri, base, first_version, order or None for a root)
    frontier: dict[str, tuple[str, str, int, int | None]] = {}
    for v, uri in entries:
        k = key(uri)
        if k in skip:
            continue
        prev = frontier.get(k)
        if prev is None or v < prev[2]:
            frontier[k] = (uri, root_base(uri), int(v), None)
    depth = 0
    # Definitions and lakehouse definitions, by the level that first names them: key -> (uri,
    # kind, first_version, depth). Placed after the last level: a file some node names as a
    # child is a node file (it is read and followed), whatever else names it as a value.
    met: dict[str, tuple[str, str, int, int]] = {}
    while frontier:
        leaves: dict[str, tuple[str, str, int]] = {}  # key -> (uri, kind, first_version)
        nxt: dict[str, tuple[str, str, int, int | None]] = {}
        for k in sorted(frontier):
            uri, base, fv, order = frontier[k]
            is_root = order is None
            kind = "root" if is_root else "node"
            try:
                data = o._read(uri, "root node file" if is_root else "node file")
            except OracleError:
                if not tolerate_missing:
                    raise
                out.rows[k] = Row(kind, -1, depth, fv)
                out.missing.append(k)
                continue
            out.node_reads += 1
            out.rows[k] = Row(kind, len(data) if sizes else -1, depth, fv)
            if is_root:
                system = system_rows(data, uri)
                if "lakehouse_def" not in system:
                    raise OracleError(f"root node file {uri} has no lakehouse_def system row")
                d_uri = o.resolve(system["lakehouse_def"], base)
                order = int(o.definition(d_uri).order)
                _leaf(leaves, key(d_uri), d_uri, "lakehouse_def", fv)
            node: NodeFile = parse_node(data, order, uri)
            for _, v in node.entries:
                if v is not None:
                    u = o.resolve(v, base)
                    _leaf(leaves, key(u), u, "definition", fv)
            for _, v in node.messages:
                if v is not None:
                    u = o.resolve(v, base)
                    _leaf(leaves, key(u), u, "definition", fv)
            for c in node.children:
                u = o.resolve(c, base)
                ck = key(u)
                prev = nxt.get(ck)
                if prev is None or fv < prev[2]:
                    nxt[ck] = (u, base_of(c, base), fv, order)
        depth += 1
        for k, (uri, kind, fv) in leaves.items():
            if k not in met and k not in skip:
                met[k] = (uri, kind, fv, depth)
        frontier = {k: e for k, e in nxt.items() if k not in out.rows and k not in skip}
    for k, (uri, kind, fv, d) in sorted(met.items()):
        if k in out.rows:
            continue
        s = size(o, uri) if sizes or not tolerate_missing else 0
        if s < 0:
            if not tolerate_missing:
                raise OracleError(f"{kind} {uri} is missing")
            out.missing.append(k)
        out.rows[k] = Row(kind, s if sizes else -1, d, fv)
    return out


def _leaf(leaves: dict[str, tuple[str, str, int]], k: str, uri: str, kind: str, fv: int) -> None:
    prev = leaves.get(k)
    if prev is None or fv < prev[2]:
        leaves[k] = (uri, kind, fv)


@in_one_call
def live_walk(o: Oracle, **kw: Any) -> Walk:
    """The walk of every live root (`live_entries`)."""
    return walk(o, live_entries(o), **kw)


@in_one_call
def version_files(o: Oracle, versions: Iterable[int]) -> set[str]:
    """Every file (relative path, or URI elsewhere) that the given versions' roots reach."""
    return walk(o, [(v, f"{o.root}/{root_name(v)}") for v in versions], sizes=False).paths()


# ---- what a job must delete --------------------------------------------------------------------------
@in_one_call
def orphans(o: Oracle, cutoff_s: float) -> set[str]:
    """Format-owned files modified before `cutoff_s` (epoch seconds) that no live root reaches."""
    live = live_walk(o, sizes=False).paths()
    return {p for p, t in listing(o).items() if is_owned(p) and 0 < t < cutoff_s and p not in live}


@in_one_call
def unreferenced(o: Oracle) -> set[str]:
    """Format-owned files that no live root reaches, whatever their age."""
    return owned(o) - live_walk(o, sizes=False).paths()


@in_one_call
def expired_files(o: Oracle, expiring: Iterable[int]) -> set[str]:
    """What expiring `expiring` must delete: the files those versions reach (their roots
    included) that no other live root reaches."""
    gone = set(expiring)
    keep = [(v, u) for v, u in live_entries(o) if not (u == f"{o.root}/{root_name(v)}" and v in gone)]
    return version_files(o, gone) - walk(o, keep, sizes=False).paths()


# ---- contents ----------------------------------------------------------------------------------------
@in_one_call
def merged_keys(o: Oracle, root_uri: str, cache: dict[str, NodeFile] | None = None) -> dict[str, str]:
    """Every key of the tree at `root_uri` -> the URI of the definition it points to (B-epsilon
    merge-on-read: a node's buffer overrides its key table and everything below it). `cache`
    keeps parsed node files by URI (they are immutable)."""
    data = o._read(root_uri, "root node file")
    system = system_rows(data, root_uri)
    base = root_base(root_uri)
    order = int(o.definition(o.resolve(system["lakehouse_def"], base)).order)

    def load(uri: str) -> NodeFile:
        if cache is not None and uri in cache:
            return cache[uri]
        n = parse_node(o._read(uri, "node file"), order, uri)
        if cache is not None:
            cache[uri] = n
        return n

    def merged(n: NodeFile, b: str, lo: bytes | None = None, hi: bytes | None = None) -> dict[str, str]:
        # FORMAT.md §2: a B-tree: the key table is sorted, child j holds only keys between the
        # separators around it, and a node's messages lie in its own range.
        keys = [k.encode("utf-8") for k, _ in n.entries]
        # A bound may appear below it: deleting a separator replaces it with its in-order
        # neighbour and sends a delete for that neighbour into the child, where the old copy (in
        # the key table) and the delete (in the buffer) wait until a flush. The parent's entry
        # is the live one: it is applied after the child's merge below, as a top-down read
        # finds it first. Anything beyond a bound, or keys out of order, is corrupt.
        if any(a >= c for a, c in zip(keys, keys[1:], strict=False)) or (
                keys and ((lo is not None and keys[0] < lo) or (hi is not None and keys[-1] > hi))):
            raise OracleError(f"a node of {root_uri} has keys out of order or out of its range")
        for k, _ in n.messages:
            kb = k.encode("utf-8")
            if (lo is not None and kb < lo) or (hi is not None and kb > hi):
                raise OracleError(f"a node of {root_uri} buffers a key outside its range")
        if n.children and len(n.children) != len(keys) + 1:
            raise OracleError(f"a node of {root_uri} has {len(keys)} keys and {len(n.children)} children")
        out: dict[str, str] = {}
        for j, c in enumerate(n.children):
            out.update(merged(load(o.resolve(c, b)), base_of(c, b), keys[j - 1] if j else lo,
                              keys[j] if j < len(keys) else hi))
        out.update((k, o.resolve(v, b)) for k, v in n.entries)
        for k, v in n.messages:
            if v is None:
                out.pop(k, None)
            else:
                out[k] = o.resolve(v, b)
        return out

    return merged(parse_node(data, order, root_uri), base)


def _widths(o: Oracle, root_uri: str) -> tuple[int, int]:
    system = system_rows(o._read(root_uri, "root node file"), root_uri)
    d = o.definition(o.resolve(system["lakehouse_def"], root_base(root_uri)))
    return int(d.namespace_name_max_size_bytes or 100), int(d.table_name_max_size_bytes or 100)


def _unpad(b: bytes, where: str) -> str:
    name = b.rstrip(b" ")
    if not name:
        raise OracleError(f"empty name in key {where!r}")
    if any(c <= 0x20 or c == 0x7F for c in name):  # FORMAT.md §3: no 0x00-0x1F, space or DEL
        raise OracleError(f"key {where!r} holds a name with a control character, space or DEL")
    return name.decode("utf-8")


def decode(key: str, ns_max: int, t_max: int) -> tuple[str, str | None] | None:
    """(namespace, table) of a table key, (namespace, None) of a namespace key, None otherwise."""
    b = key.encode("utf-8")
    if key.startswith(NS_PREFIX):
        return _unpad(b[4:4 + ns_max], key), None
    if key.startswith(TABLE_PREFIX):
        return _unpad(b[4:4 + ns_max], key), _unpad(b[4 + ns_max:4 + ns_max + t_max], key)
    return None


@in_one_call
def tables(o: Oracle, version: int, cache: dict[str, NodeFile] | None = None) -> frozenset[str]:
    """``ns.table`` of every table version `version` holds."""
    uri = f"{o.root}/{root_name(version)}"
    ns_max, t_max = _widths(o, uri)
    out = set()
    for k in merged_keys(o, uri, cache):
        d = decode(k, ns_max, t_max)
        if d is not None and d[1] is not None:
            out.add(f"{d[0]}.{d[1]}")
    return frozenset(out)


@in_one_call
def contents(o: Oracle, root_uri: str) -> dict[str, bytes]:
    """What a reader sees at `root_uri`: every key with the bytes of its definition file."""
    return {k: o._read(u, f"definition of key {k!r}") for k, u in sorted(merged_keys(o, root_uri).items())}


def version_contents(uri: str, version: int | None = None, options: dict | None = None) -> dict[str, bytes]:
    """`contents` of `version` (default: the latest listed) of the lakehouse at `uri`."""
    o = oracle_for(uri, options)
    v = latest_version(o) if version is None else version
    return contents(o, f"{o.root}/{root_name(v)}")


def export_contents(uri: str, name: str, options: dict | None = None) -> dict[str, bytes]:
    """`contents` of the export `name` recorded in the lakehouse at `uri` (its root, read
    through its full URI pointers)."""
    o = oracle_for(uri, options)
    loc = o.latest()[1].exported_snapshots[name]
    return contents(o, loc)


@in_one_call
def root_files(o: Oracle) -> list[str]:
    return sorted(p for p in o.files.list(o.root) if ROOT_FILE.match(p))


__all__ = [
    "Row", "Walk", "contents", "decode", "export_contents", "export_roots", "expired_files", "floor", "is_owned",
    "latest_version", "listing", "live_entries", "live_walk", "merged_keys", "oracle_for", "oracle_of", "orphans",
    "owned", "kept_versions", "root_files", "self_contained_exports", "size", "tables", "unreferenced",
    "txn_entries", "txn_files", "version_contents", "version_files", "walk",
]
