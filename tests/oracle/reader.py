"""The oracle's reader (see the package doc). Everything here follows the spec's words:

* **Roots** are ``_`` + the version as 64 bits, least significant bit first, + ``.arrow``
  (storage-layout.md; the names come from `tests.format.oracle`, itself written from the spec).
* **Node files** are Arrow IPC *files* with utf8 columns ``key, value, pnode, txn`` (missing
  ``pnode``/``txn`` read as NULL). Rows before the first row whose key and value are both NULL
  are system rows; then come exactly ``order`` key-table rows (row 0: key NULL, ``pnode`` = the
  leftmost child; rows 1..k: sorted key, value, right child); every row after them is a
  write-buffer message (``txn`` set; value NULL = delete). Later messages override earlier
  ones, and a node's messages override everything below it (B-epsilon merge-on-read).
* **Pointers** (``pnode``, values, ``lakehouse_def``) are paths relative to the root the node
  belongs to, or full URIs (exports point into their source that way).
* **What a root reaches**: the root file, its ``lakehouse_def`` file, every child node file,
  and every value (the object definition files), in the key table and in the buffer messages
  alike: a delete-shadowed set message still names a file the node file references.
  ``previous_root`` and ``rollback_from_root`` name other versions' roots; they are history,
  not content, and are not followed (a version's content is its own tree).
* **Which roots must stay readable** (our documented extension of the lakehouse definition,
  FORMAT.md §4 and §7, fields 100-105): every version from ``oldest_retained_version`` to the
  latest, the root of every ``exported_snapshots`` entry, and every ``exported_snapshot_pins``
  version. Every export is read here, pinned or not: `live_files` is what no job may delete,
  checked independently of which exports the jobs walk (`tests.oracle.expect.live_entries`
  walks only pinned ones; a self-contained export reaches no file of the source, so the two
  agree exactly when that holds). And the running root of every live distributed transaction
  (§7 step 3): a hash-prefixed node file in root layout, whose pointers are relative to the
  lakehouse root, named by the latest state file ``txn-<id>[.<n>].binpb`` of a transaction that
  is open or committing and not past ``expire_at`` (plus a clock-skew margin): it reaches every
  definition and node the transaction staged, however old those files are.
* **Definitions** are decoded by the oracle's own protobuf wire reader (`tests.oracle.defs`).
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.ipc as ipc

from tests.format.oracle import root_name, root_version
from tests.oracle.defs import DefinitionError, LakehouseDef, TransactionDef, lakehouse_def, transaction_def

ROOT_FILE = re.compile(r"^_[01]{64}\.arrow$")
#: Files the format owns (storage-layout.md): roots, lakehouse definitions, hash-prefixed files.
OWNED = re.compile(r"^(_[01]{64}\.arrow|_lakehouse_def_.+\.binpb|[01]{4}/[01]{4}/[01]{4}/[01]{8}-.+\.(arrow|binpb))$")


_F = TypeVar("_F", bound=Callable[..., Any])


class OracleError(AssertionError):
    """The oracle found the lakehouse unreadable: a test failure, never a library error."""


# ---- files ---------------------------------------------------------------------------------------
class LocalFiles:
    """Plain local files; URIs are ``file:///abs/path`` or absolute paths.

    Inside one oracle call (`Oracle.reading`) a directory is listed once and a file read once:
    the call sees the lakehouse as it was when it first looked, as `BotoFiles` does with its
    one LIST per call. A property check re-reads every retained version's tree after every
    step, and each version's tree shares most of its node files with the next. Outside a call
    (and in the next call) every read and listing goes to the disk again."""

    def __init__(self) -> None:
        self._in_call = False
        self._reads: dict[str, bytes] = {}
        self._lists: dict[str, set[str]] = {}

    def begin_call(self) -> None:
        self._in_call = True

    def end_call(self) -> None:
        self._in_call = False
        self._reads.clear()
        self._lists.clear()

    @staticmethod
    def path(uri: str) -> str:
        return uri[len("file://"):] if uri.startswith("file://") else uri

    def read(self, uri: str) -> bytes:
        path = self.path(uri)
        hit = self._reads.get(path)
        if hit is not None:
            return hit
        with open(path, "rb") as f:
            data = f.read()
        if self._in_call:
            self._reads[path] = data
        return data

    def exists(self, uri: str) -> bool:
        path = self.path(uri)
        return path in self._reads or os.path.isfile(path)

    def list(self, root: str) -> set[str]:
        base = self.path(root).rstrip("/")
        hit = self._lists.get(base)
        if hit is not None:
            return set(hit)
        out = set()
        for d, _, files in os.walk(base):
            for name in files:
                out.add(os.path.relpath(os.path.join(d, name), base).replace(os.sep, "/"))
        if self._in_call:
            self._lists[base] = set(out)
        return out


class BotoFiles:
    """S3 through a boto3 client (the library itself uses s3fs).

    Inside one oracle call (`Oracle.reading`), reads under `root` are answered against one
    LIST of the root taken when the call first needs it: a key the listing lacks is missing
    (no GET), and a key whose listed ETag is that of bytes this reader already fetched is not
    fetched again (a check re-reads every retained version's tree, about 700 GETs per S3
    case of the kill tests, nearly all of immutable files it read a moment before). A file
    deleted, or rewritten with other bytes, since the last call is seen as such: the listing
    is new per call and the ETag is the content's. Outside a call every read is a GET."""

    def __init__(self, client: Any):
        self.client = client
        self.root: str | None = None  # the oracle's lakehouse root (set by `Oracle`)
        self._in_call = False
        self._listing: dict[str, str] | None = None  # key -> ETag, of the current call
        self._fetched: dict[str, tuple[str, bytes]] = {}  # key -> (ETag, bytes)

    @staticmethod
    def _split(uri: str) -> tuple[str, str]:
        assert uri.startswith("s3://"), uri
        bucket, _, key = uri[5:].partition("/")
        return bucket, key

    def begin_call(self) -> None:
        self._in_call, self._listing = True, None

    def end_call(self) -> None:
        self._in_call, self._listing = False, None

    def objects(self, root: str) -> Iterator[dict[str, Any]]:
        """Every object under `root` (``s3://bucket/prefix``) as LIST returns it (Key, ETag,
        LastModified, ...)."""
        bucket, prefix = self._split(root.rstrip("/") + "/")
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            yield from page.get("Contents", [])

    def _listed(self) -> dict[str, str] | None:
        if not self._in_call or self.root is None:
            return None
        if self._listing is None:
            self._listing = {obj["Key"]: obj["ETag"] for obj in self.objects(self.root)}
        return self._listing

    def _get(self, uri: str) -> tuple[str, bytes]:
        bucket, key = self._split(uri)
        try:
            obj = self.client.get_object(Bucket=bucket, Key=key)
        except self.client.exceptions.NoSuchKey:
            raise FileNotFoundError(uri) from None
        return obj["ETag"], obj["Body"].read()

    def read(self, uri: str) -> bytes:
        listed = self._listed() if self.root is not None and uri.startswith(self.root + "/") else None
        if listed is None:
            return self._get(uri)[1]
        key = self._split(uri)[1]
        etag = listed.get(key)
        if etag is None:
            raise FileNotFoundError(uri)
        hit = self._fetched.get(key)
        if hit is not None and hit[0] == etag:
            return hit[1]
        got = self._get(uri)
        self._fetched[key] = got
        return got[1]

    def exists(self, uri: str) -> bool:
        try:
            self.read(uri)
            return True
        except FileNotFoundError:
            return False

    def list(self, root: str) -> set[str]:
        prefix = self._split(root.rstrip("/") + "/")[1]
        listed = self._listed() if self.root is not None and root.rstrip("/") == self.root else None
        keys = listed if listed is not None else (obj["Key"] for obj in self.objects(root))
        return {k[len(prefix):] for k in keys}


def files_for(uri: str, s3_client: Any = None) -> LocalFiles | BotoFiles:
    if uri.startswith("s3://"):
        if s3_client is None:
            raise ValueError("an s3:// lakehouse needs the boto3 client of the test server")
        return BotoFiles(s3_client)
    return LocalFiles()


def in_one_call(fn: _F) -> _F:
    """`fn(oracle, ...)` reads inside `Oracle.reading` (one listing for all its reads)."""
    @functools.wraps(fn)
    def wrapper(o: Oracle, *args: Any, **kwargs: Any) -> Any:
        with o.reading():
            return fn(o, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


# ---- node files ----------------------------------------------------------------------------------
@dataclass
class NodeFile:
    system: dict[str, str]
    entries: list[tuple[str, str]]  # key table: (key, value)
    children: list[str]  # pnode pointers of the key table, leftmost first
    messages: list[tuple[str, str | None]]  # write buffer, oldest first


def _table(data: bytes, where: str) -> pa.Table:
    try:
        return ipc.open_file(pa.BufferReader(data)).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise OracleError(f"{where} is not an Arrow IPC file: {e}") from e


# Parsed node files, by their bytes: a check parses the same immutable node file once per
# retained version that shares it. Keyed by content (with `where`, for the error messages), so
# a file rewritten with other bytes is parsed again. Callers only read what these return.
@functools.lru_cache(maxsize=8192)
def system_rows(data: bytes, where: str) -> dict[str, str]:
    """The rows before the first NULL/NULL row (all rows' key/value in the Java layout)."""
    t = _table(data, where)
    out = {}
    for k, v in zip(t.column("key").to_pylist(), t.column("value").to_pylist(), strict=True):
        if k is None and v is None:
            break
        out[k] = v
    return out


@functools.lru_cache(maxsize=8192)
def parse_node(data: bytes, order: int, where: str) -> NodeFile:
    table = _table(data, where)
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    n = table.num_rows
    key, value = cols["key"], cols["value"]
    pnode = cols.get("pnode", [None] * n)
    txn = cols.get("txn", [None] * n)
    sep = next((i for i in range(n) if key[i] is None and value[i] is None), None)
    if sep is None:  # the Java single-node layout: every non-system row is the key table
        system = {}
        entries = []
        for k, v in zip(key, value, strict=True):
            if k in ("created_at_millis", "lakehouse_def", "n_keys", "previous_root", "rollback_from_root"):
                system[k] = v
            else:
                entries.append((k, v))
        return NodeFile(system, entries, [], [])
    system = {key[i]: value[i] for i in range(sep)}
    end = sep + order
    if end > n:
        raise OracleError(f"{where}: key table needs {order} rows, the file has {n - sep} after the system rows")
    entries, children = [], []
    for i in range(sep, end):
        if pnode[i] is not None:
            children.append(pnode[i])
        if i > sep and key[i] is not None:
            entries.append((key[i], value[i]))
    messages = []
    for i in range(end, n):
        if key[i] is None or txn[i] is None:
            raise OracleError(f"{where}: buffer row {i} lacks a key or a txn")
        messages.append((key[i], value[i]))
    return NodeFile(system, entries, children, messages)


# Parsed lakehouse definitions, by their bytes (as the node files above): every root a check
# reads names one, most of them the same few files (the maintenance state machine parsed about
# 45 per check, a sixth of its time). A file rewritten with other bytes is parsed again; one
# that does not decode raises at every read (errors are not cached). Callers only read them.
@functools.lru_cache(maxsize=1024)
def parse_lakehouse_def(data: bytes, where: str) -> LakehouseDef:
    return lakehouse_def(data, where)


HASHED_SUFFIX = re.compile(r"/[01]{4}/[01]{4}/[01]{4}/[01]{8}-[^/]+$")


def base_of(pointer: str, base: str) -> str:
    """The root that the pointers inside the file at `pointer` are relative to: `base` for a
    relative pointer; for a full URI, the lakehouse root it lies under (every non-root file
    sits at ``<root>/<hash-prefixed name>``, storage-layout.md)."""
    if "://" not in pointer and not pointer.startswith("/"):
        return base
    m = HASHED_SUFFIX.search(pointer)
    if m is None:
        raise OracleError(f"full URI {pointer} is not a hash-prefixed file under a lakehouse root")
    return pointer[: m.start()]


def root_base(uri: str) -> str:
    """The root that the pointers inside the root node file at `uri` are relative to: its
    folder for a version's root (``<root>/_<bits>.arrow``) or an export's; the lakehouse root
    for a distributed transaction's running root, a hash-prefixed node file in root layout."""
    m = HASHED_SUFFIX.search(uri)
    return uri[: m.start()] if m is not None else uri.rsplit("/", 1)[0]


# ---- distributed transactions ----------------------------------------------------------------------
#: A TransactionDef state file (relative path): ``txn-<id>.binpb`` is state 0 (the Java reference's
#: name), ``txn-<id>.<n>.binpb`` state n (our extension: one file per state, never overwritten);
#: ids are 1-128 of ``A-Za-z0-9_-`` not starting with ``_``/``-``, so never contain a dot.
TXN_FILE = re.compile(r"^[01]{4}/[01]{4}/[01]{4}/[01]{8}-txn-([A-Za-z0-9][A-Za-z0-9_-]{0,127})(?:\.([0-9]+))?\.binpb$")
#: States in which a transaction may still commit (an empty state is open, as Java writes it).
TXN_LIVE_STATES = ("", "open", "committing")
#: How long past ``expire_at`` a transaction's running root stays live: the expiry is stamped by
#: one host's clock and checked by another's, so maintenance keeps the staged files a clock-skew
#: margin longer (FORMAT.md §7's margin; the library documents the same 10 minutes). Inside the
#: TTL nothing of a live transaction may ever be deleted, whatever the margin.
TXN_KEEP_AFTER_EXPIRY_MS = 10 * 60_000


@dataclass(frozen=True)
class Txn:
    """The latest state of one distributed transaction, as its state files say."""

    id: str
    state_number: int
    d: TransactionDef
    running_root: str  # full URI
    begin_version: int

    def live(self, now_ms: int, keep_after_expiry_ms: int = TXN_KEEP_AFTER_EXPIRY_MS) -> bool:
        return self.d.state in TXN_LIVE_STATES and now_ms < self.d.expire_at_millis + keep_after_expiry_ms


def now_ms() -> int:
    return int(time.time() * 1000)


# ---- the oracle ----------------------------------------------------------------------------------
@dataclass
class Snapshot:
    """What a user sees: per retained version, export and pinned version, every key with the
    bytes of the definition file it points to."""

    versions: dict[int, dict[str, bytes]] = field(default_factory=dict)
    exports: dict[str, dict[str, bytes]] = field(default_factory=dict)
    #: Live distributed transactions: id -> what their running root holds (staged included).
    txns: dict[str, dict[str, bytes]] = field(default_factory=dict)

    def diff(self, other: Snapshot) -> list[str]:
        """What `other` lost or changed of this snapshot (versions/exports/transactions it
        still lists)."""
        out = []
        for label, mine, theirs in (("version", self.versions, other.versions), ("export", self.exports, other.exports),
                                    ("transaction", self.txns, other.txns)):
            for name, keys in mine.items():
                if name not in theirs:
                    out.append(f"{label} {name} is gone")
                elif theirs[name] != keys:
                    changed = sorted(k for k in keys.keys() | theirs[name].keys() if keys.get(k) != theirs[name].get(k))
                    out.append(f"{label} {name}: keys differ: {changed[:3]}")
        return out


class Oracle:
    """Independent reads of one lakehouse (local files, or S3 through `s3_client`)."""

    def __init__(self, uri: str, s3_client: Any = None):
        self.root = uri.rstrip("/")
        self.files = files_for(uri, s3_client)
        if isinstance(self.files, BotoFiles):
            self.files.root = self.root  # reads under the root answer against a listing per call
        self.s3_client = s3_client
        self._depth = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        """One oracle call: what it reads is the lakehouse as one listing of it shows it (see
        `BotoFiles`); nested calls share the outermost one's listing."""
        if self._depth == 0:
            self.files.begin_call()
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.files.end_call()

    # -- pointers
    def resolve(self, pointer: str, base: str) -> str:
        return pointer if "://" in pointer or pointer.startswith("/") else f"{base}/{pointer}"

    def relative(self, uri: str) -> str | None:
        """`uri` relative to this lakehouse's root, or None when it lies elsewhere."""
        root = self.root
        if uri.startswith("/") and root.startswith("file://"):
            uri = "file://" + uri
        return uri[len(root) + 1:] if uri.startswith(root + "/") else None

    def _read(self, uri: str, what: str) -> bytes:
        files = self.files if uri.startswith(self.root) or "://" not in uri else files_for(uri, self.s3_client)
        try:
            return files.read(uri)
        except FileNotFoundError:
            raise OracleError(f"{what} {uri} is missing") from None

    @in_one_call
    def definition(self, uri: str) -> LakehouseDef:
        try:
            return parse_lakehouse_def(self._read(uri, "lakehouse definition"), uri)
        except DefinitionError as e:
            raise OracleError(str(e)) from None

    # -- versions
    @in_one_call
    def listed_versions(self) -> list[int]:
        return sorted(root_version(p) for p in self.files.list(self.root) if ROOT_FILE.match(p))

    @in_one_call
    def latest(self) -> tuple[int, LakehouseDef]:
        vs = self.listed_versions()
        if not vs:
            raise OracleError(f"no root file under {self.root}")
        root = self._root(f"{self.root}/{root_name(vs[-1])}")
        return vs[-1], self.definition(self.resolve(root[0].system["lakehouse_def"], self.root))

    def oldest_retained(self) -> int:
        """The oldest version the latest definition says is retained (as this reader decodes it)."""
        return int(self.latest()[1].oldest_retained_version)

    def _root(self, uri: str) -> tuple[NodeFile, str]:
        data = self._read(uri, "root node file")
        # The order lives in the definition the root points to: system rows first.
        system = system_rows(data, uri)
        base = root_base(uri)
        d = self.definition(self.resolve(system["lakehouse_def"], base))
        return parse_node(data, d.order, uri), base

    @in_one_call
    def live_roots(self) -> dict[str, str]:
        """label -> root URI of everything that must stay readable."""
        latest, d = self.latest()
        out = {f"v{v}": f"{self.root}/{root_name(v)}" for v in range(d.oldest_retained_version, latest + 1)}
        for name, uri in d.exported_snapshots.items():
            out[f"export:{name}"] = uri
        for name, v in d.exported_snapshot_pins.items():
            out[f"pin:{name}"] = f"{self.root}/{root_name(v)}"
        for t in self.live_transactions():
            out[f"txn:{t.id}"] = t.running_root
        return out

    @in_one_call
    def transactions(self) -> dict[str, Txn]:
        """Transaction id -> its latest state, from the listing of its state files (the
        listing is authoritative; the library's ``_txn/`` markers are not read)."""
        latest: dict[str, tuple[int, str]] = {}
        for p in self.files.list(self.root):
            m = TXN_FILE.match(p)
            if m is not None:
                n = int(m.group(2) or 0)
                if n >= latest.get(m.group(1), (-1, ""))[0]:
                    latest[m.group(1)] = (n, p)
        out = {}
        for txn_id, (n, p) in sorted(latest.items()):
            uri = f"{self.root}/{p}"
            try:
                d = transaction_def(self._read(uri, "transaction definition"), uri)
            except DefinitionError as e:
                raise OracleError(str(e)) from None
            if d.id != txn_id:
                raise OracleError(f"transaction definition {uri} holds id {d.id!r}")
            begin = d.beginning_root_node_file_path.rsplit("/", 1)[-1]
            out[txn_id] = Txn(txn_id, n, d, self.resolve(d.running_root_node_file_path, self.root),
                              root_version(begin))
        return out

    @in_one_call
    def live_transactions(self, at_ms: int | None = None) -> list[Txn]:
        """Transactions that may still commit at `at_ms` (default now): open or committing, and
        not past ``expire_at`` plus `TXN_KEEP_AFTER_EXPIRY_MS`. Their running roots reach every
        definition and node they staged: those files are live."""
        at = now_ms() if at_ms is None else at_ms
        return [t for t in self.transactions().values() if t.live(at)]

    # -- reachability
    @in_one_call
    def reach(self, roots: Iterable[str], *, tolerate_missing: bool = False) -> set[str]:
        """Every file URI the given root URIs reach."""
        seen: set[str] = set()
        for root_uri in roots:
            try:
                node, base = self._root(root_uri)
            except OracleError:
                if tolerate_missing:
                    continue
                raise
            d_uri = self.resolve(node.system["lakehouse_def"], base)
            order = self.definition(d_uri).order
            seen.update((root_uri, d_uri))
            stack = [(node, base)]
            while stack:
                n, b = stack.pop()
                for _, v in n.entries:
                    seen.add(self.resolve(v, b))
                for _, v in n.messages:
                    if v is not None:
                        seen.add(self.resolve(v, b))
                for c in n.children:
                    cu = self.resolve(c, b)
                    if cu in seen:
                        continue  # immutable files: a shared subtree is read once
                    seen.add(cu)
                    try:
                        data = self._read(cu, "node file")
                    except OracleError:
                        if tolerate_missing:
                            continue
                        raise
                    stack.append((parse_node(data, order, cu), base_of(c, b)))
        return seen

    @in_one_call
    def reach_relative(self, roots: Iterable[str], **kw: Any) -> set[str]:
        """`reach` as paths relative to this root (files elsewhere left out)."""
        return {r for u in self.reach(roots, **kw) if (r := self.relative(u)) is not None}

    @in_one_call
    def live_files(self) -> set[str]:
        return self.reach_relative(self.live_roots().values())

    @in_one_call
    def version_files(self, versions: Iterable[int]) -> set[str]:
        return self.reach_relative(f"{self.root}/{root_name(v)}" for v in versions)

    @in_one_call
    def owned_files(self) -> set[str]:
        return {p for p in self.files.list(self.root) if OWNED.match(p)}

    # -- user-visible contents
    @in_one_call
    def items(self, root_uri: str) -> dict[str, bytes]:
        """Every key of the tree at `root_uri` with the bytes of its definition file."""
        node, base = self._root(root_uri)
        order = self.definition(self.resolve(node.system["lakehouse_def"], base)).order

        def merged(n: NodeFile, b: str) -> dict[str, tuple[str, str]]:
            out: dict[str, tuple[str, str]] = {}
            for c in n.children:
                cu = self.resolve(c, b)
                out.update(merged(parse_node(self._read(cu, "node file"), order, cu), base_of(c, b)))
            out.update((k, (v, b)) for k, v in n.entries)
            for k, v in n.messages:  # newer than anything below, later rows newer still
                if v is None:
                    out.pop(k, None)
                else:
                    out[k] = (v, b)
            return out

        return {k: self._read(self.resolve(v, b), f"definition of key {k!r}")
                for k, (v, b) in sorted(merged(node, base).items())}

    @in_one_call
    def snapshot(self) -> Snapshot:
        latest, d = self.latest()
        s = Snapshot()
        for v in range(d.oldest_retained_version, latest + 1):
            s.versions[v] = self.items(f"{self.root}/{root_name(v)}")
        for name, uri in d.exported_snapshots.items():
            s.exports[name] = self.items(uri)
        for v in d.exported_snapshot_pins.values():
            s.versions.setdefault(v, self.items(f"{self.root}/{root_name(v)}"))
        for t in self.live_transactions():
            s.txns[t.id] = self.items(t.running_root)
        return s

    @in_one_call
    def problems(self, before: Snapshot | None = None) -> list[str]:
        """Everything wrong now: live roots that do not read, live files missing, and what a
        snapshot taken `before` lost (only what is still live is compared)."""
        return self.check(before)[0]

    @in_one_call
    def check(self, before: Snapshot | None = None) -> tuple[list[str], Snapshot | None]:
        """`problems(before)`, with the snapshot of now it compared against (None when the
        lakehouse did not read): the next step's `before`, without reading it all again."""
        out = []
        try:
            now = self.snapshot()
            self.live_files()
        except OracleError as e:
            return [str(e)], None
        if before is not None:
            still = Snapshot({v: k for v, k in before.versions.items() if v in now.versions},
                             {n: k for n, k in before.exports.items() if n in now.exports},
                             {n: k for n, k in before.txns.items() if n in now.txns})
            out += still.diff(now)
        return out, now


# ---- the shape the Spark job tests compare with ---------------------------------------------------
@dataclass
class OracleReach:
    """What the oracle says a set of roots reaches, keyed like the tests' expectations: paths
    relative to the lakehouse root, full URIs for files elsewhere; `rows` maps each to its kind
    (root, node, definition, lakehouse_def: by the spec's file names)."""

    rows: dict[str, str]

    def paths(self, kind: str | None = None) -> set[str]:
        return {k for k, v in self.rows.items() if kind is None or v == kind}


def _kind(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    if ROOT_FILE.match(name):
        return "root"
    if name.startswith("_lakehouse_def_"):
        return "lakehouse_def"
    return "node" if name.endswith(".arrow") else "definition"


def boto_client_for(options: dict | None) -> Any:
    """A boto3 client for the lakehouse's S3 endpoint (the oracle reads S3 without s3fs)."""
    import boto3

    o = options or {}
    return boto3.client("s3", endpoint_url=o.get("endpoint_url"), aws_access_key_id=o.get("key"),
                        aws_secret_access_key=o.get("secret"), region_name="us-east-1")


def oracle_reach(lh: Any, versions: Iterable[int], extra_roots: Iterable[tuple[int, str]] = ()) -> OracleReach:
    """The oracle's reach of `versions` of `lh` (and of `extra_roots`: (version, root URI))."""
    uri = lh.uri
    client = boto_client_for(lh.storage.options) if uri.startswith("s3://") else None
    o = Oracle(uri, s3_client=client)
    roots = [f"{o.root}/{root_name(v)}" for v in versions] + [u for _, u in extra_roots]
    rows = {}
    for u in o.reach(roots):
        rel = o.relative(u)
        rows[rel if rel is not None else u] = _kind(u)
    for u in roots:  # a distributed transaction's running root is a root, whatever its name
        rel = o.relative(u)
        rows[rel if rel is not None else u] = "root"
    return OracleReach(rows)
