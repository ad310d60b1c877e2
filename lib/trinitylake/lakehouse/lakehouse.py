"""The lakehouse: creation, version discovery, time travel, rollback and change sets."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import UTC, datetime
from typing import Concatenate, ParamSpec

from trinitylake.control import VersionInfo
from trinitylake.errors import (
    AlreadyExistsError,
    ControlTableError,
    CorruptNodeError,
    LakehouseNotFoundError,
    SnapshotNotFoundError,
    StorageNotADirectoryError,
    TransactionConflictError,
    UnsupportedVersionError,
    ValidationError,
    VersionNotFoundError,
)
from trinitylake.format import definitions, keys, tree
from trinitylake.format.node import Message, Node, deserialize, serialize
from trinitylake.format.paths import HINT_FILE, is_root_name, lakehouse_def_name, parse_hint, root_name, root_version
from trinitylake.json_data import JsonObject
from trinitylake.lakehouse import history
from trinitylake.lakehouse.audit import Auditor
from trinitylake.lakehouse.changes import ChangeSet
from trinitylake.lakehouse.changes import now_ms as _now_ms
from trinitylake.lakehouse.context import API, AuditContext
from trinitylake.lakehouse.history import fmt_ms
from trinitylake.lakehouse.roots import RootRef, check_retained, root_system_rows
from trinitylake.lakehouse.transaction import Transaction
from trinitylake.lakehouse.view import LakehouseView
from trinitylake.storage import Storage, is_absolute, parse_uri

_P = ParamSpec("_P")

log = logging.getLogger(__name__)


#: Definition files whose bytes a handle keeps (`Lakehouse.def_file`): about 1 KB each.
MAX_KEPT_DEF_FILES = 4096

class Lakehouse:
    """A TrinityLake lakehouse under one root URI.

    Example:
        >>> lh = Lakehouse.create("memory://doc-example", audit=False)
        >>> lh.create_namespace("sales")
        1
        >>> lh.view().list_namespaces()
        ['sales']
    """

    def __init__(self, storage: Storage, *, control_uri: str | None = None, audit: bool = True,
                 context: AuditContext = API):
        self.storage = storage
        self.uri = storage.root
        self._stores: dict[str, tree.NodeStore] = {}
        self._defs: dict[str, definitions.LakehouseDef] = {}
        self._roots: dict[int, RootRef] = {}  # root files are immutable: cache what was read
        #: The newest version this handle committed (`remember_root`): where `latest_version`
        #: looks first.
        self._wrote: int | None = None
        #: Definition files' bytes by URI: each is created once under a new name and never
        #: changed, so what this handle wrote or read is kept (the catalog server's next group
        #: reads no definition it wrote itself; on an object store, a round trip each).
        self._def_files: dict[str, bytes] = {}
        self._foreign: dict[str, Storage] = {}
        self.auditor = Auditor(self, control_uri or (self.uri + "/_control"), enabled=audit)
        #: The command and arguments this handle's audit rows name (fixed: see AuditContext).
        self.context = context
        #: The latest version found by `open` (None: not opened that way).
        self.opened_version: int | None = None
        #: Where `write_hint` writes the hint when set, instead of in the committing thread (a
        #: long-lived writer that never begins from the hint: the catalog server's group
        #: commit, whose writers then need not wait for it). None: written at once.
        self.hint_executor: Executor | None = None

    # ---- creation and opening -----------------------------------------------------------
    @classmethod
    def create(
        cls,
        uri: str,
        *,
        storage_options: dict | None = None,
        control_uri: str | None = None,
        audit: bool = True,
        context: AuditContext = API,
        order: int = definitions.DEFAULT_ORDER,
        node_max_bytes: int = definitions.DEFAULT_NODE_MAX_BYTES,
        namespace_max: int = definitions.DEFAULT_NAME_MAX,
        table_max: int = definitions.DEFAULT_NAME_MAX,
        view_max: int = definitions.DEFAULT_NAME_MAX,
        txn_ttl_millis: int = definitions.DEFAULT_TXN_TTL_MILLIS,
        isolation: str = "snapshot",
        properties: dict[str, str] | None = None,
    ) -> Lakehouse:
        """Create a new lakehouse: definition file, root v0, hint. Refuses an existing one."""
        if order < 3:
            raise ValidationError(f"order must be at least 3, got {order}")
        if node_max_bytes < 1024:
            raise ValidationError(f"node_max_bytes must be at least 1024, got {node_max_bytes}")
        for what, n in (("namespace", namespace_max), ("table", table_max), ("view", view_max)):
            if not 1 <= n <= 1024:
                raise ValidationError(f"{what} name max size must be in [1, 1024] bytes, got {n}")
        if txn_ttl_millis < 1000:
            raise ValidationError(f"txn_ttl_millis must be at least 1000, got {txn_ttl_millis}")
        storage = Storage(uri, storage_options)
        lh = cls(storage, control_uri=control_uri, audit=audit, context=context)
        if lh._any_root_exists():
            raise AlreadyExistsError(f"a lakehouse already exists at {storage.root}")
        d = definitions.new_lakehouse_def(order, node_max_bytes, namespace_max, table_max, view_max, txn_ttl_millis, isolation)
        d.properties.update(properties or {})
        started = datetime.now(UTC)
        txn_id = str(uuid.uuid4())
        try:
            seq = lh.auditor.allocate_seq(txn_id, create=True)
        except ControlTableError as e:
            _refuse_file_root(storage, "cannot create a lakehouse at", e)
            raise
        def_path = lakehouse_def_name()
        storage.create_exclusive(def_path, definitions.dumps(d))
        root = Node(system=root_system_rows(created_at_millis=_now_ms(), lakehouse_def=def_path, txn_id=txn_id, txn_seq=seq))
        try:
            storage.create_exclusive(root_name(0), serialize(root, d.order))
        except FileExistsError:
            storage.delete([def_path])
            raise AlreadyExistsError(f"a lakehouse was created concurrently at {storage.root}") from None
        lh.write_hint(0)
        lh.auditor.committed(seq, txn_id, "init", {"order": order, "node_max_bytes": node_max_bytes}, started, None, 0,
                             ["create lakehouse"], isolation=isolation, attempts=1)
        return lh

    @classmethod
    def open(cls, uri: str, *, storage_options: dict | None = None, control_uri: str | None = None, audit: bool = True,
             context: AuditContext = API) -> Lakehouse:
        """Open an existing lakehouse (any root file present, not only v0); `context` names the
        command its audit rows record (default: the library's own operations)."""
        lh = cls(Storage(uri, storage_options), control_uri=control_uri, audit=audit, context=context)
        try:
            #: The latest version when it was opened (raises LakehouseNotFoundError): a job that
            #: opens it and starts at once takes it as its version before (one discovery, not two).
            lh.opened_version = lh.latest_version()
        except StorageNotADirectoryError as e:
            _refuse_file_root(lh.storage, "no lakehouse at", e)
            raise
        return lh

    # ---- storage helpers --------------------------------------------------------------
    def node_store(self, base: Storage) -> tree.NodeStore:
        st = self._stores.get(base.root)
        if st is None:

            def resolve(p: str, b: Storage = base) -> tuple[Storage, str]:
                return self.resolve(p, b)

            st = tree.NodeStore(base, order=0, resolve=resolve)
            self._stores[base.root] = st
        return st

    def resolve(self, path: str, base: Storage | None = None) -> tuple[Storage, str]:
        """Storage and path for a stored pointer: relative to `base`, or an absolute URI."""
        base = base or self.storage
        if not is_absolute(path):
            return base, path
        p = parse_uri(path)
        if base.reaches(p):
            return base, p.uri
        st = self._foreign.get(p.store_uri)
        if st is None:
            st = self._foreign[p.store_uri] = self.storage.for_store_of(p)
        return st, p.uri

    def _any_root_exists(self) -> bool:
        if self.storage.exists(root_name(0)) or self.storage.exists(HINT_FILE):
            return True
        return bool(self.listed_versions())

    def listed_versions(self) -> list[int]:
        """Versions whose root files a listing of the lakehouse root shows, ascending."""
        _, files = self.storage.list_dirs("")
        return sorted(root_version(f.path) for f in files if is_root_name(f.path))

    def write_hint(self, version: int) -> None:
        """Record `version` as the latest in the hint file (best effort: a failure is logged)."""
        if self.hint_executor is not None:
            self.hint_executor.submit(self._write_hint_now, version)
        else:
            self._write_hint_now(version)

    def _write_hint_now(self, version: int) -> None:
        try:
            self.storage.write(HINT_FILE, str(version).encode())
        except Exception as e:  # noqa: BLE001 - the hint is best effort by design
            log.warning("could not update %s: %s", HINT_FILE, e)

    # ---- versions -------------------------------------------------------------------------
    def latest_version(self) -> int:
        """Latest version: hint, then probing upward; falls back to listing root files when
        the hint is missing, garbage or stale and version 0 was expired."""
        wrote = self._wrote
        if wrote is not None:
            # The version this handle committed last, and the next one, probed together: when
            # the first exists and the next does not, it is still the latest (expiry keeps every
            # version from the oldest retained on, so a missing next one was never written). The
            # catalog server's next group begins in one round trip instead of two (the hint).
            here, above = self.storage.exists_many([root_name(wrote), root_name(wrote + 1)])
            if here and not above:
                return wrote
        start: int | None = None
        try:
            start = parse_hint(self.storage.read(HINT_FILE))
        except FileNotFoundError:
            start = None
        # The hinted root and the next one probed together (one round trip on an object store,
        # where each probe waits its latency), then the following ones two at a time.
        found = self.storage.exists_many([root_name(start), root_name(start + 1)]) if start is not None else [False]
        if not found[0]:
            if self.storage.exists(root_name(0)):
                start = 0
            else:
                listed = self.listed_versions()
                if not listed:
                    raise LakehouseNotFoundError(f"no lakehouse at {self.uri} (no root node file found)")
                start = listed[-1]
            found = [True, self.storage.exists(root_name(start + 1))]
        v = start if start is not None else 0
        more = found[1]  # root v + 1 exists
        while more:
            v += 1
            nxt, more = self.storage.exists_many([root_name(v + 1), root_name(v + 2)])
            if not nxt:
                break
            v += 1
        return v

    def oldest_version(self) -> int:
        listed = self.listed_versions()
        if not listed:
            raise LakehouseNotFoundError(f"no lakehouse at {self.uri} (no root node file found)")
        return listed[0]

    def load_root(self, version: int) -> RootRef:
        """Root of `version`. Raises VersionNotFoundError naming the available range."""
        if version < 0:
            raise VersionNotFoundError(f"version {version} is negative")
        cached = self._roots.get(version)
        if cached is not None:
            return cached
        path = root_name(version)
        try:
            data = self.storage.read(path)
        except FileNotFoundError:
            latest = self.latest_version()
            if version > latest:
                raise VersionNotFoundError(f"version {version} does not exist yet; the latest version is {latest}") from None
            raise VersionNotFoundError(
                f"version {version} is expired or missing; the oldest available version is {self.oldest_version()}"
                f" and the latest is {latest}"
            ) from None
        ref = self._root_from_bytes(version, path, data, self.storage)
        if len(self._roots) > 256:  # bounded: a single-node root can be large
            self._roots.clear()
        self._roots[version] = ref
        return ref

    def def_file(self, uri: str) -> bytes | None:
        """The bytes of definition file `uri` when this handle wrote or read it."""
        return self._def_files.get(uri)

    def keep_def_file(self, uri: str, data: bytes) -> None:
        """Keep definition file `uri`'s bytes (it never changes once created)."""
        if len(self._def_files) >= MAX_KEPT_DEF_FILES:  # bounded, as the roots
            self._def_files.clear()
        self._def_files[uri] = data

    def remember_root(self, version: int, data: bytes) -> None:
        """Keep the root of `version` that this handle has just written (its bytes, `data`), so
        reading it back (the next transaction's begin, the audit's change description) reads no
        file. A root file never changes once created."""
        self._wrote = max(version, self._wrote or 0)
        if version in self._roots:
            return
        path = root_name(version)
        try:
            ref = self._root_from_bytes(version, path, data, self.storage)
        except Exception as e:  # noqa: BLE001 - only saves a read: the version is committed either way
            log.debug("root of version %s not kept: %s", version, e)
            return
        if len(self._roots) > 256:
            self._roots.clear()
        self._roots[version] = ref

    def _root_from_bytes(self, version: int, path: str, data: bytes, base: Storage) -> RootRef:
        node = deserialize(data, None, base.uri(path))
        def_path = node.system.get(keys.SYS_LAKEHOUSE_DEF)
        if not def_path:
            raise CorruptNodeError(f"root node file {base.uri(path)} has no lakehouse_def system row")
        return RootRef(version, path, node, self.load_def(def_path, base), def_path, base)

    def load_def(self, def_path: str, base: Storage | None = None) -> definitions.LakehouseDef:
        storage, p = self.resolve(def_path, base)
        cache_key = storage.uri(p)
        d = self._defs.get(cache_key)
        if d is None:
            try:
                data = storage.read(p)
            except FileNotFoundError:
                raise CorruptNodeError(f"lakehouse definition {cache_key} is missing") from None
            d = definitions.loads(definitions.LakehouseDef, data, cache_key)
            if d.major_version not in definitions.SUPPORTED_MAJOR_VERSIONS:
                raise UnsupportedVersionError(
                    f"lakehouse definition {cache_key} has format major version {d.major_version}; "
                    f"this library supports {list(definitions.SUPPORTED_MAJOR_VERSIONS)}"
                )
            self._defs[cache_key] = d
        return d

    def definition(self) -> definitions.LakehouseDef:
        return self.load_root(self.latest_version()).lakehouse_def

    def root_at(self, version: int | None = None, as_of: datetime | int | None = None, snapshot: str | None = None) -> RootRef:
        """Resolve time travel: a version number, a timestamp, an exported snapshot, or latest."""
        given = sum(x is not None for x in (version, as_of, snapshot))
        if given > 1:
            raise ValidationError("give at most one of version, as_of and snapshot")
        if snapshot is not None:
            return self.snapshot_root(snapshot)
        if as_of is not None:
            return self.root_as_of(as_of)
        return self.load_root(self.latest_version() if version is None else version)

    def root_as_of(self, as_of: datetime | int) -> RootRef:
        """Newest root with ``created_at_millis <= T``, walking previous_root from the latest."""
        t = as_of if isinstance(as_of, int) else int(as_of.timestamp() * 1000)
        ref = self.load_root(self.latest_version())
        while ref.created_at_millis > t:
            prev = ref.previous_root
            if prev is None:
                raise VersionNotFoundError(f"no version was created at or before {fmt_ms(t)}; version 0 was created at {fmt_ms(ref.created_at_millis)}")
            try:
                ref = self.load_root(root_version(prev))
            except VersionNotFoundError:
                raise VersionNotFoundError(
                    f"the version current at {fmt_ms(t)} is expired; the oldest available version is {ref.version}"
                    f" (created {fmt_ms(ref.created_at_millis)})"
                ) from None
        return ref

    def snapshot_root(self, name: str) -> RootRef:
        d = self.definition()
        loc = d.exported_snapshots.get(name)
        if loc is None:
            known = ", ".join(sorted(d.exported_snapshots)) or "none"
            raise SnapshotNotFoundError(f"no exported snapshot named {name!r} (known: {known})")
        base = self.storage.for_uri(loc.rsplit("/", 1)[0])
        fname = loc.rsplit("/", 1)[1]
        try:
            data = base.read(fname)
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"exported snapshot {name!r}: root file {loc} is missing") from None
        return self._root_from_bytes(root_version(fname), fname, data, base)

    def view(self, version: int | None = None, as_of: datetime | int | None = None, snapshot: str | None = None) -> LakehouseView:
        return LakehouseView(self, self.root_at(version, as_of, snapshot))

    # ---- history (lakehouse.history) -----------------------------------------------------
    def versions(self) -> list[JsonObject]:
        """Every available version, oldest first, with its commit facts: `history.versions`."""
        return history.versions(self)

    def version_info(self, version: int) -> VersionInfo:
        """What the tree says about one version, for the control table: `history.version_info`."""
        return history.version_info(self, version)

    def version_infos(self) -> list[VersionInfo]:
        """`version_info` of every available version: `history.version_infos`."""
        return history.version_infos(self)

    def change_set(self, version: int, ref: RootRef | None = None) -> ChangeSet:
        """Keys written by the transaction that produced `version`: `history.change_set`."""
        return history.change_set(self, version, ref)

    def diff(self, a: RootRef, b: RootRef) -> dict[str, str | None]:
        """Keys whose value differs from version a to version b: `history.diff`."""
        return history.diff(self, a, b)

    def describe_changes(self, version: int) -> list[str]:
        """Human-readable changes of a version: `history.describe_changes`."""
        return history.describe_changes(self, version)

    def describe_changes_safely(self, version: int) -> list[str]:
        """`describe_changes`, or nothing (logged) when they cannot be described."""
        return history.describe_changes_safely(self, version)

    # ---- transactions -----------------------------------------------------------------------
    def begin(self, isolation: str | None = None, txn_id: str | None = None, ttl_millis: int | None = None) -> Transaction:

        return Transaction(self, isolation=isolation, txn_id=txn_id, ttl_millis=ttl_millis)

    def _single(self, fn: Callable[Concatenate[Transaction, _P], None], *args: _P.args, **kwargs: _P.kwargs) -> int | None:
        txn = self.begin()
        fn(txn, *args, **kwargs)
        return txn.commit()

    def create_namespace(self, ns: str, properties: dict[str, str] | None = None) -> int | None:

        return self._single(Transaction.create_namespace, ns, properties)

    def drop_namespace(self, ns: str, cascade: bool = False) -> int | None:

        return self._single(Transaction.drop_namespace, ns, cascade=cascade)

    def create_table(self, ns: str, table: str, *, metadata_location: str | None = None, table_type: str | None = None,
                     properties: dict[str, str] | None = None, format_properties: dict[str, str] | None = None
                     ) -> int | None:

        return self._single(Transaction.create_table, ns, table, metadata_location=metadata_location,
                            table_type=table_type, properties=properties, format_properties=format_properties)

    def drop_table(self, ns: str, table: str) -> int | None:

        return self._single(Transaction.drop_table, ns, table)

    def create_view(self, ns: str, view: str, *, metadata_location: str, properties: dict[str, str] | None = None
                    ) -> int | None:

        return self._single(Transaction.create_view, ns, view, metadata_location=metadata_location,
                            properties=properties)

    def drop_view(self, ns: str, view: str) -> int | None:

        return self._single(Transaction.drop_view, ns, view)

    # ---- rollback --------------------------------------------------------------------------
    def rollback(self, to: int) -> int:
        """Roll forward: commit v+1 whose content equals version `to`.

        ``previous_root`` = root v (the chain stays linear), ``rollback_from_root`` = root v,
        and the lakehouse definition of v is kept, so settings and exports are not rolled back.
        The change set of the new version is written as messages tagged with the rollback's
        transaction id, so conflict checks and `show` see what it changed.
        """
        started = datetime.now(UTC)
        latest = self.latest_version()
        cur = self.load_root(latest)
        # The floor is read from root `latest` and the new root is created exclusively as
        # latest+1, so an expiration that commits a higher floor meanwhile makes this rollback
        # fail as a conflict; its re-run then sees the floor and is refused. Checked before the
        # target is read: an expired root may still exist (expire deletes roots last).
        check_retained(cur.lakehouse_def, to, f"rollback to version {to}")
        target = self.load_root(to)
        if to >= latest:
            raise ValidationError(f"can only roll back to an older version; {to} is not older than the latest {latest}")
        txn_id = str(uuid.uuid4())
        diff = self.diff(cur, target)
        seq = self.auditor.allocate_seq(txn_id)
        store = self.node_store(self.storage)
        writer = tree.TreeWriter(store, self.tree_params(cur.lakehouse_def))
        msgs = [Message(k, v, txn_id) for k, v in diff.items()]
        new_root = writer.commit(target.node, msgs, keep_txn=txn_id)
        new_root.system = root_system_rows(
            created_at_millis=_now_ms(),
            lakehouse_def=cur.def_path,
            previous_root=root_name(latest),
            rollback_from_root=root_name(latest),
            rollback_to_root=root_name(to),
            txn_id=txn_id,
            txn_seq=seq,
        )
        try:
            self.write_nodes(writer.pending)
            self.storage.create_exclusive(root_name(latest + 1), serialize(new_root, cur.lakehouse_def.order))
        except FileExistsError:
            self.auditor.failed(seq, txn_id, "rollback", {"to": to}, started, latest, "CommitConflictError",
                                f"version {latest + 1} was committed concurrently")
            raise TransactionConflictError(
                f"rollback to {to}: version {latest + 1} was committed concurrently; re-run the rollback"
            ) from None
        self.write_hint(latest + 1)
        self.auditor.committed(seq, txn_id, "rollback", {"to": to}, started, latest, latest + 1,
                               self.describe_changes_safely(latest + 1) if self.auditor.enabled else [], attempts=1)
        return latest + 1

    # ---- shared commit helpers ----------------------------------------------------------
    @staticmethod
    def tree_params(d: definitions.LakehouseDef) -> tree.TreeParams:
        prop = d.properties.get("tlake.buffer.max-messages")
        return tree.TreeParams(order=d.order, max_bytes=d.node_file_max_size_bytes,
                               buffer_max_messages=int(prop) if prop else d.order)

    def write_nodes(self, pending: dict[str, bytes]) -> None:
        """Write a commit's new node files (before its root): `Storage.write_many`."""
        self.storage.write_many(pending)

    def write_definition(self, d: definitions.LakehouseDef) -> str:
        path = lakehouse_def_name()
        self.storage.create_exclusive(path, definitions.dumps(d))
        return path


def _refuse_file_root(storage: Storage, what: str, cause: BaseException) -> None:
    """Raise a one-line StorageNotADirectoryError when the lakehouse location is a file, the
    usual cause of `cause` (a typo'd --lakehouse): the path then says what to fix. Probed only
    on this failure path, so opening a lakehouse costs no extra request."""
    try:
        is_file = storage.exists("")
    except Exception:  # noqa: BLE001 - the probe only words the error; `cause` is raised anyway
        return
    if is_file:
        raise StorageNotADirectoryError(f"{what} {storage.root.rstrip('/')}: it is a file, not a folder") from cause

