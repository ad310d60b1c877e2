"""Reachability: what one node file references, how pointers become comparable keys, how files
are read and sized by key.

Engine-agnostic. The walk (`trinitylake.treewalk.walker`, the library's one walker) reads node
files in batches with `trinitylake.treewalk.node_batch` (Arrow arrays, many files a call), on
the driver and inside executors' ``mapInArrow``; :func:`expand_node` here reads one file the same
way (the benchmarks' per-file baseline, and what the batch reader's rows and errors are tested
against). Both follow the same rules, written down here once:

**Keys.** Every file is named by a *walk key*: its path relative to the lakehouse root when it
lies inside the root (``0110/0000/1011/01111000-node-….arrow``, ``_0100….arrow``), otherwise
its canonical absolute URI (files of exports, or anything else a pointer names). Scheme
aliases are folded (``s3a://`` = ``s3://``), so two spellings of one file get one key, and a
file outside the root can never be mistaken for one inside it (a relative key never has a
scheme).

**Bases.** A relative pointer inside a node file resolves against the root of the tree the
node file belongs to: the lakehouse root for every file inside the lakehouse root, the
export's root for files of an export. (A partial or minimal export references source node
files by absolute URI; those source nodes hold relative pointers, which resolve against the
source lakehouse.)

**What a node references** (:func:`node_references`): its children (``pnode``, kind
``node``), the values of its key table and the non-NULL values of its write-buffer messages
(kind ``definition``), and for a root its ``lakehouse_def`` system row (kind
``lakehouse_def``). ``previous_root`` and ``rollback_from_root`` are *not* references: an old
version stays alive only because it is retained, never because a newer root names it.

**Depth and first_version.** ``depth`` is the length of the shortest pointer path from any
walked root (roots are depth 0). ``first_version`` is the smallest version among the roots
that reach the file along such a shortest path: for a node, the smallest ``first_version`` of
its parents at ``depth - 1``. Both are computed level by level with every node read once.

The roots a walk starts from are chosen by `trinitylake.treewalk.walk_roots`; the table
pointer counts the walk job reports are `trinitylake.treewalk.table_pointers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from trinitylake.errors import (
    CorruptNodeError,
    InvalidURIError,
    TrinityLakeError,
)
from trinitylake.format.keys import SYS_LAKEHOUSE_DEF
from trinitylake.format.node import Node, deserialize
from trinitylake.storage import Storage
from trinitylake.storage.uri import is_absolute, is_plain_relative, join_uri, parse_uri

KIND_ROOT = "root"
KIND_NODE = "node"
KIND_DEFINITION = "definition"
KIND_LAKEHOUSE_DEF = "lakehouse_def"
KINDS = (KIND_ROOT, KIND_NODE, KIND_DEFINITION, KIND_LAKEHOUSE_DEF)

# Roles of the rows `expand_node` emits (and the batch reader, `node_batch`).
ROLE_SELF = "self"  # the node file that was read (path, kind, size)
ROLE_CHILD = "child"  # a child node to read at depth + 1
ROLE_LEAF = "leaf"  # a definition or lakehouse definition (never read by the walk)
ROLE_MISSING = "missing"  # the node file does not exist
ROLE_ERROR = "error"  # the node file exists but cannot be read as a node


# ---- what one node references ------------------------------------------------------------
def node_references(node: Node, *, is_root: bool, where: str = "node") -> list[tuple[str, str]]:
    """Stored pointers of `node` with their kind, each pointer once, in file order.

    Raises:
        CorruptNodeError: a root without a ``lakehouse_def`` system row.
    """
    refs: dict[str, str] = {}
    for c in node.children:
        refs.setdefault(c, KIND_NODE)
    for v in node.values:
        refs.setdefault(v, KIND_DEFINITION)
    for m in node.buffer:
        if m.value is not None:
            refs.setdefault(m.value, KIND_DEFINITION)
    if is_root:
        ld = node.system.get(SYS_LAKEHOUSE_DEF)
        if not ld:
            raise CorruptNodeError(f"root node file {where} has no lakehouse_def system row")
        refs.setdefault(ld, KIND_LAKEHOUSE_DEF)
    return list(refs.items())


# ---- keys --------------------------------------------------------------------------------
def clean_relative(pointer: str) -> str:
    """Normalized relative path (duplicate slashes and ``.`` removed); ``..`` is refused."""
    if ".." in pointer.split("/"):
        raise InvalidURIError(f"pointer {pointer!r} contains '..'")
    return join_uri("", pointer).lstrip("/")


@dataclass(frozen=True)
class Locator:
    """Maps stored pointers to walk keys and back (see the module docstring).

    Picklable and cheap: executors build keys with it.
    """

    root: str  # canonical URI of the lakehouse root, no trailing slash

    @classmethod
    def for_root(cls, root_uri: str) -> Locator:
        return cls(parse_uri(root_uri).uri.rstrip("/") or parse_uri(root_uri).uri)

    @property
    def prefix(self) -> str:
        return self.root if self.root.endswith("/") else self.root + "/"

    def key_of_uri(self, uri: str) -> str:
        """Walk key of an absolute URI (relative when inside the root)."""
        full = parse_uri(uri).uri
        return full[len(self.prefix) :] if full.startswith(self.prefix) else full

    def key(self, pointer: str, base: str) -> str:
        """Walk key of a stored `pointer` found in a file of the tree rooted at `base`."""
        if base == self.root and is_plain_relative(pointer):
            return pointer
        if is_absolute(pointer):
            return self.key_of_uri(pointer)
        if base == self.root:
            rel = clean_relative(pointer)
            if not rel:
                raise InvalidURIError(f"empty pointer {pointer!r}")
            return rel
        return self.key_of_uri(join_uri(base, clean_relative(pointer)))

    def uri(self, key: str) -> str:
        """Absolute URI of a walk key."""
        return key if is_absolute(key) else join_uri(self.root, key)

    def is_inside(self, key: str) -> bool:
        return not is_absolute(key)

    def base_for(self, key: str, parent_base: str) -> str:
        """Base that relative pointers inside the file `key` resolve against."""
        return self.root if not is_absolute(key) else parent_base

    def root_entry(self, version: int, pointer: str) -> tuple[str, str]:
        """(key, base) of a walked root: a source version's root file name, or the full URI
        of an export's root file (whose directory is the export's root)."""
        if is_absolute(pointer):
            uri = parse_uri(pointer).uri
            key = self.key_of_uri(uri)
            if not is_absolute(key):
                return key, self.root
            return key, uri.rsplit("/", 1)[0]
        return clean_relative(pointer), self.root


class Reader:
    """Reads files by walk key: inside the lakehouse through its `Storage`, elsewhere through a
    storage per scheme and authority (sharing the options when the scheme matches).

    Picklable (storages rebuild their filesystems lazily), so Spark ships it to executors.
    """

    def __init__(self, root_uri: str, options: dict[str, Any] | None = None):
        self.storage = Storage(root_uri, options)
        self.locator = Locator.for_root(self.storage.root)

    def _storage_for(self, key: str) -> tuple[Storage, str]:
        return self.storage.storage_of(key)  # the storage's one URI-to-storage cache

    def read(self, key: str) -> bytes:
        st, p = self._storage_for(key)
        return st.read(p)

    def read_many(self, keys: Sequence[str], pool: ThreadPoolExecutor | None = None,
                  max_bytes: int | None = None) -> list[bytes | BaseException]:
        """The bytes of each key, or its error (FileNotFoundError when missing): the keys of
        each store as one batch (`Storage.read_many`: on S3 many requests in flight). With
        `max_bytes`, keys all inside the lakehouse may be read only up to the file whose
        bytes reach it (a shorter list)."""
        if all(":" not in k and k[:1] != "/" for k in keys):  # relative keys: all in the lakehouse
            return self.storage.read_many(keys, pool, max_bytes)
        groups: dict[int, tuple[Storage, list[int], list[str]]] = {}
        for i, k in enumerate(keys):
            st, p = self._storage_for(k)
            g = groups.get(id(st))
            if g is None:
                g = groups[id(st)] = (st, [], [])
            g[1].append(i)
            g[2].append(p)
        if len(groups) == 1:
            st, _idx, paths = next(iter(groups.values()))
            return st.read_many(paths, pool, max_bytes)
        out: list[bytes | BaseException] = [b""] * len(keys)
        for st, idx, paths in groups.values():
            for i, r in zip(idx, st.read_many(paths, pool), strict=True):
                out[i] = r
        return out

    def size(self, key: str) -> int:
        """Size in bytes, or -1 when the file is missing."""
        st, p = self._storage_for(key)
        try:
            return st.info(p).size
        except FileNotFoundError:
            return -1

    def exists(self, key: str) -> bool:
        st, p = self._storage_for(key)
        return st.exists(p)


# ---- one level of the walk, as executors run it -------------------------------------------
# A frontier row: (key, base, first_version, depth, is_root).
FrontierRow = tuple[str, str, int, int, bool]
# An output row: (role, key, kind, size, depth, first_version, base, error).
OutRow = tuple[str, str, str, int, int, int, "str | None", "str | None"]


def expand_node(reader: Reader, row: Sequence[Any]) -> tuple[list[OutRow], int]:
    """Read one node file and return its rows (see the ROLE_* constants) and 1 if it was read.

    The walk reads many files a call with `trinitylake.treewalk.node_batch`, which emits
    the same rows and errors."""
    key, base, fv, depth, is_root = row[0], row[1], int(row[2]), int(row[3]), bool(row[4])
    kind = KIND_ROOT if is_root else KIND_NODE
    try:
        data = reader.read(key)
    except FileNotFoundError as e:
        return [(ROLE_MISSING, key, kind, -1, depth, fv, base, str(e))], 0
    except Exception as e:  # noqa: BLE001 - reported as a row, the driver raises with context
        return [(ROLE_ERROR, key, kind, -1, depth, fv, base, f"{type(e).__name__}: {e}")], 0
    where = reader.locator.uri(key)
    try:
        node = deserialize(data, None, where)
        refs = node_references(node, is_root=is_root, where=where)
    except TrinityLakeError as e:
        return [(ROLE_ERROR, key, kind, len(data), depth, fv, base, f"{type(e).__name__}: {e}")], 1
    out: list[OutRow] = [(ROLE_SELF, key, kind, len(data), depth, fv, base, None)]
    loc = reader.locator
    for ptr, rkind in refs:
        try:
            ck = loc.key(ptr, base)
        except TrinityLakeError as e:
            out.append((ROLE_ERROR, key, kind, len(data), depth, fv, base, f"bad pointer {ptr!r} in {where}: {e}"))
            continue
        if rkind == KIND_NODE:
            out.append((ROLE_CHILD, ck, KIND_NODE, -1, depth + 1, fv, loc.base_for(ck, base), None))
        else:
            out.append((ROLE_LEAF, ck, rkind, -1, depth + 1, fv, None, None))
    return out, 1


def sizes_of(reader: Reader, keys: Sequence[str], io_threads: int = 8, *, listing: bool = True) -> list[int]:
    """Sizes of files by key (-1 for missing ones).

    Keys all inside the lakehouse are sized by its storage in one batch (`Storage.sizes`:
    local files by ``stat`` in large chunks); with a key outside the root among them, every
    key by one request through its storage (`Reader.size`), `io_threads` at a time. On a store
    with latency: from listings only, never a HEAD per file (`listed_sizes`; its docstring
    states the request model); `listing=False` asks for one request per key instead (HEADs;
    the jobs no longer use it there)."""
    st = reader.storage
    if listing and st.remote:
        return listed_sizes(reader, keys, io_threads)
    threads = io_threads > 1 and len(keys) > 1
    if not any(is_absolute(k) for k in keys):
        if not threads or not st.reads_on_threads:
            return st.sizes(keys)
        with ThreadPoolExecutor(max_workers=min(io_threads, len(keys))) as pool:
            return st.sizes(keys, pool)
    if not threads:
        return [reader.size(k) for k in keys]
    with ThreadPoolExecutor(max_workers=min(io_threads, len(keys))) as pool:
        return list(pool.map(reader.size, keys, chunksize=64))


#: Fewest hashed keys worth listing whole top-level hash folders (or the whole root) for;
#: fewer are sized from the listings of their own folders (see `listed_sizes`).
LIST_SIZES_MIN_KEYS = 16
#: Below this many keys the whole root is listed in one stream of pages (see `listed_sizes`).
LIST_ONE_STREAM_KEYS = 2000
#: Listing of a whole folder tree (recursive) vs. of one folder's own files (delimited).
_RECURSIVE, _FOLDER = "recursive", "folder"


def size_folder(key: str) -> str:
    """The folder a key's file is listed with when it is sized by its folder: the key up to its
    last ``/`` (a relative folder, ``""`` for the lakehouse root, or the URI of a folder of
    another tree). A plain string operation, so a Spark column computes the same
    (``regexp_extract(path, '^(.*)/[^/]*$', 1)``)."""
    return key.rsplit("/", 1)[0] if "/" in key else ""


def _is_hashed(key: str) -> bool:
    """A relative key below one of the 16 top-level hash folders (``bbbb/``)."""
    return len(key) > 5 and key[4] == "/" and all(c in "01" for c in key[:4])


def folder_sizes(reader: Reader, folder: str, stores: object = None) -> dict[str, int]:
    """Walk key -> size of every file directly in `folder` (a `size_folder` value): one
    delimited listing, ``ceil(files / 1000)`` LIST requests on an object store. A relative
    folder is listed through the lakehouse's storage; a folder elsewhere through a storage at
    the top of its store (its bucket, sharing the options when the scheme matches, as
    `Reader` reads there), cached by the lakehouse's storage (`Storage.for_store_of`; `stores`
    is no longer used)."""
    if not is_absolute(folder):
        return {f.path: f.size for f in reader.storage.list_dirs(folder)[1]}
    p = parse_uri(folder + "/" if folder.endswith("://") else folder)  # "file://" of "file:///x"
    st = reader.storage.for_store_of(p)  # the storage's one URI-to-storage cache
    key_of = reader.locator.key_of_uri
    return {key_of(join_uri(p.store_uri, f.path)): f.size for f in st.list_dirs(p.path.strip("/"))[1]}


def listed_sizes(reader: Reader, keys: Sequence[str], io_threads: int = 8) -> list[int]:
    """Sizes of `keys` on an object store from listings, without a HEAD per file (on local
    disk too, though `sizes_of` stats there). A key no listing shows is
    missing (-1): S3 listings are strongly consistent.

    **Request model** (a LIST answers up to 1,000 files, a HEAD one; both cost one round trip):

    * hashed keys (relative, below a top-level hash folder ``bbbb/``), at least
      `LIST_SIZES_MIN_KEYS` of them: with fewer than `LIST_ONE_STREAM_KEYS` keys in all, one
      recursive listing of the whole root (``ceil(files / 1000)`` LISTs in one stream, which also
      sizes every other relative key); otherwise one recursive listing per top-level hash
      folder that holds a key (at most 16 streams at once, ``ceil(folder's files / 1000)`` each);
    * every other key (a few hashed ones, the lakehouse definitions at the root, relative keys
      outside the hash folders, and absolute keys: a partial export's own files, definitions
      reached through absolute URIs, on any store) is grouped with the keys of its folder
      (`size_folder`), and each folder is listed once, delimited (`folder_sizes`):
      ``ceil(folder's files / 1000)`` LISTs for all its keys.

    A folder holding k of the keys costs ``ceil(n / 1000)`` LISTs for its n files instead of k
    HEADs, so listing never sends more requests unless a folder holds over 1,000 files per key
    sized in it. The format keeps folders small: a hash leaf folder ``bbbb/bbbb/bbbb/`` holds
    1/4096 of a tree's hashed files (one page up to 4M of them), which is why a few hashed keys
    are sized by their leaf folders rather than by listing whole top-level folders. The root,
    listed for its lakehouse definitions, holds two files per version. The folders are listed
    `io_threads` at a time."""
    st = reader.storage
    if not keys:
        return []
    hashed: list[int] = []
    others: list[int] = []
    for i, k in enumerate(keys):
        (hashed if _is_hashed(k) else others).append(i)
    jobs: dict[tuple[str, str], list[int]] = {}
    if len(hashed) >= LIST_SIZES_MIN_KEYS:
        if len(keys) < LIST_ONE_STREAM_KEYS:
            # A small lakehouse: one recursive listing of the root, a few pages in a row, costs
            # fewer requests than a LIST per hash folder at once; it shows every relative key.
            rel = [i for i in others if not is_absolute(keys[i])]
            jobs[(_RECURSIVE, "")] = hashed + rel
            others = [i for i in others if is_absolute(keys[i])]
        else:
            for i in hashed:
                jobs.setdefault((_RECURSIVE, keys[i][:4]), []).append(i)
    else:
        others = hashed + others
    for i in others:
        jobs.setdefault((_FOLDER, size_folder(keys[i])), []).append(i)
    def list_one(job: tuple[str, str]) -> dict[str, int]:
        how, folder = job
        if how == _RECURSIVE:
            return {f.path: f.size for f in st.list(folder)}
        return folder_sizes(reader, folder)

    out = [-1] * len(keys)
    order = sorted(jobs)
    with ThreadPoolExecutor(max_workers=max(1, min(io_threads, len(order)))) as pool:
        for job, sizes in zip(order, pool.map(list_one, order), strict=True):
            for i in jobs[job]:
                out[i] = sizes.get(keys[i], -1)
    return out


def describe_failures(rows: Sequence[Sequence[Any]], total: int) -> str:
    """One message for failed node reads: (key, first_version, error) rows, `total` of them."""
    parts = [f"{r[0]} (reached from version {r[1]}): {r[2]}" for r in rows]
    more = f" and {total - len(rows)} more" if total > len(rows) else ""
    return "; ".join(parts) + more
