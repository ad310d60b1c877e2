"""Transactions: SNAPSHOT / SERIALIZABLE isolation, conflict rebase, TTL.

A transaction pins the latest root at begin; every read goes to that root (overlaid with
the transaction's own writes) and is recorded in a read set (point keys and scanned
prefixes). Writes are staged as messages. Commit writes the changed nodes copy-on-write and
exclusively creates root v+1. When another writer won v+1, the change sets of v+1..w are
read from their roots and checked against this transaction's write set (SNAPSHOT) or read
and write sets (SERIALIZABLE); if nothing conflicts, the same messages are re-applied on
root w and the commit is retried at w+1, with bounded retries and jittered backoff.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from trinitylake import seams
from trinitylake.errors import (
    AlreadyExistsError,
    ObjectNotFoundError,
    TransactionClosedError,
    TransactionConflictError,
    TransactionExpiredError,
    TrinityLakeError,
    ValidationError,
)
from trinitylake.format import definitions, keys, tree
from trinitylake.format.node import Message, serialize
from trinitylake.format.paths import namespace_def_path, root_name, table_def_path, view_def_path
from trinitylake.lakehouse.changes import ChangeSet
from trinitylake.lakehouse.changes import now_ms as _now_ms
from trinitylake.lakehouse.ports import NodeSource
from trinitylake.lakehouse.roots import RootRef, check_new_pins, root_system_rows
from trinitylake.lakehouse.view import VIEW_METADATA_LOCATION, VIEW_PREVIOUS_METADATA_LOCATION, LakehouseView
from trinitylake.values import format_timestamp

if TYPE_CHECKING:
    from google.protobuf.message import Message as ProtoMessage

    from trinitylake.lakehouse.audit import Auditor
    from trinitylake.lakehouse.context import AuditContext

MAX_COMMIT_ATTEMPTS = 32
log = logging.getLogger(__name__)


def _crash_point(name: str) -> None:
    """A point of a commit where a crash-safety test may kill the process (`trinitylake.seams`)."""
    seams.crash_point(name)


class TransactionHost(NodeSource, Protocol):
    """What a transaction needs of its lakehouse (`Lakehouse` is one): the latest version and
    its roots, the writes of a commit, the auditor and the caller's command for its rows."""

    @property
    def auditor(self) -> Auditor: ...

    @property
    def context(self) -> AuditContext: ...

    def latest_version(self) -> int: ...

    def load_root(self, version: int) -> RootRef: ...

    def change_set(self, version: int, ref: RootRef | None = None) -> ChangeSet: ...

    def tree_params(self, d: definitions.LakehouseDef) -> tree.TreeParams: ...

    def write_nodes(self, pending: dict[str, bytes]) -> None: ...

    def write_definition(self, d: definitions.LakehouseDef) -> str: ...

    def write_hint(self, version: int) -> None: ...

    def remember_root(self, version: int, data: bytes) -> None: ...

    def describe_changes_safely(self, version: int) -> list[str]: ...


class Transaction(LakehouseView):
    """A unit of work that commits as one new version, or not at all."""

    lakehouse: TransactionHost

    def __init__(self, lakehouse: TransactionHost, isolation: str | None = None, txn_id: str | None = None,
                 ttl_millis: int | None = None, root: RootRef | None = None):
        # A control location that cannot take audit rows is refused before anything is
        # written (definition files are written as operations are staged).
        lakehouse.auditor.ensure()
        # `root`: a distributed transaction stages on its running root, and commits on the
        # root it began at (see `trinitylake.lakehouse.distributed`).
        root = root or lakehouse.load_root(lakehouse.latest_version())
        super().__init__(lakehouse, root)
        d = root.lakehouse_def
        self.id = txn_id or str(uuid.uuid4())
        self.isolation = definitions.isolation_name(definitions.isolation_level(isolation) if isolation is not None else d.txn_isolation_level)
        limit = d.txn_ttl_millis or definitions.DEFAULT_TXN_TTL_MILLIS
        if ttl_millis is not None and not 0 < ttl_millis <= limit:
            raise ValidationError(f"transaction ttl must be in (0, {limit}] ms (the lakehouse's txn_ttl_millis), got {ttl_millis}")
        self.began_at_millis = _now_ms()
        self.expire_at_millis = self.began_at_millis + (ttl_millis or limit)
        self.started = datetime.now(UTC)
        self.begin_version = root.version
        self.read_keys: set[str] = set()
        self.read_prefixes: set[str] = set()
        self.writes: dict[str, str | None] = {}
        self.dropped_namespace_keys: set[str] = set()  # even when re-created later in this txn
        self.def_mutations: list[Callable[[definitions.LakehouseDef], None]] = []
        self.ops: list[str] = []
        self.staged_files: list[str] = []  # definition files this object wrote (cleanup on failure)
        self.attempts = 0
        self.closed = False
        self.committed_version: int | None = None

    # ---- reads with tracking -------------------------------------------------------------
    def get_key(self, key: str) -> str | None:
        if key in self.writes:
            return self.writes[key]
        self.read_keys.add(key)
        return super().get_key(key)

    def _scan(self, prefix: str) -> list[tuple[str, str]]:
        self.read_prefixes.add(prefix)
        merged = dict(super()._scan(prefix))
        for k, v in self.writes.items():
            if k.startswith(prefix):
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
        return sorted(merged.items())

    # ---- writes ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise TransactionClosedError(f"transaction {self.id} is already closed")

    def _write_def(self, path: str, msg: ProtoMessage) -> str:
        data = definitions.dumps(msg)
        self.lakehouse.storage.create_exclusive(path, data)
        return self._staged_def(path, data)

    def _staged_def(self, path: str, data: bytes) -> str:
        """A definition file this transaction has just created: removed if it does not commit,
        and kept by the handle (it never changes)."""
        self.staged_files.append(path)
        self.lakehouse.keep_def_file(self.lakehouse.storage.uri(path), data)
        return path

    def create_namespace(self, ns: str, properties: dict[str, str] | None = None) -> None:
        self._check_open()
        key = self._ns_key(ns)
        if self.get_key(key) is not None:
            raise AlreadyExistsError(f"namespace {ns!r} already exists")
        d = definitions.NamespaceDef(id=str(uuid.uuid4()), properties=properties or {})
        self.writes[key] = self._write_def(namespace_def_path(ns), d)
        self.ops.append(f"create namespace {ns}")

    def alter_namespace(self, ns: str, set_properties: dict[str, str] | None = None, remove: list[str] | None = None) -> None:
        self._check_open()
        d = self.load_namespace(ns)
        for k in remove or []:
            d.properties.pop(k, None)
        d.properties.update(set_properties or {})
        self.writes[self._ns_key(ns)] = self._write_def(namespace_def_path(ns), d)
        self.ops.append(f"alter namespace {ns}")

    def drop_namespace(self, ns: str, cascade: bool = False) -> None:
        self._check_open()
        key = self._ns_key(ns)
        if self.get_key(key) is None:
            raise ObjectNotFoundError(f"namespace {ns!r} does not exist")
        members = self._scan_members(ns) + self._scan_members(ns, views=True)
        if members and not cascade:
            names = ", ".join(self.codec.describe(k) for k, _ in members[:5])
            raise ValidationError(f"namespace {ns!r} is not empty ({len(members)} objects: {names}); use cascade")
        for k, _ in members:
            self.writes[k] = None
        self.writes[key] = None
        self.dropped_namespace_keys.add(key)
        self.ops.append(f"drop namespace {ns}")

    def create_table(
        self,
        ns: str,
        table: str,
        *,
        metadata_location: str | None = None,
        table_type: str | None = None,
        properties: dict[str, str] | None = None,
        format_properties: dict[str, str] | None = None,
    ) -> None:
        self._check_open()
        tkey = self._table_key(ns, table)
        if self.get_key(self._ns_key(ns)) is None:
            raise ObjectNotFoundError(f"namespace {ns!r} does not exist (creating table {ns}.{table})")
        if self.get_key(tkey) is not None:
            raise AlreadyExistsError(f"table {ns}.{table} already exists")
        if self.view_exists(ns, table):
            raise AlreadyExistsError(f"View with same name already exists: {ns}.{table}")
        ttype = (table_type or ("external" if metadata_location else "managed")).upper()
        if ttype not in definitions.TABLE_TYPES:
            raise ValidationError(f"table type must be managed, external or federated, got {table_type!r}")
        fmt = dict(format_properties or {})
        if metadata_location:
            fmt["metadata_location"] = metadata_location
        if ttype == "EXTERNAL" and not fmt.get("metadata_location"):
            raise ValidationError(f"external Iceberg table {ns}.{table} needs a metadata_location")
        d = definitions.TableDef(id=str(uuid.uuid4()), table_type=ttype, table_format="ICEBERG",
                       format_properties=fmt, properties=properties or {})
        self.writes[tkey] = self._write_def(table_def_path(ns, table), d)
        self.ops.append(f"create table {ns}.{table}")

    def alter_table(
        self,
        ns: str,
        table: str,
        *,
        set_properties: dict[str, str] | None = None,
        remove: list[str] | None = None,
        metadata_location: str | None = None,
    ) -> None:
        self._check_open()
        d = self._altered_table(ns, table, set_properties, remove, metadata_location)
        self.writes[self._table_key(ns, table)] = self._write_def(table_def_path(ns, table), d)
        self.ops.append(f"alter table {ns}.{table}")

    def _altered_table(self, ns: str, table: str, set_properties: dict[str, str] | None, remove: list[str] | None,
                       metadata_location: str | None) -> definitions.TableDef:
        """The table's definition with the change applied (the previous metadata location kept)."""
        d = self.load_table(ns, table)
        for k in remove or []:
            d.properties.pop(k, None)
        d.properties.update(set_properties or {})
        if metadata_location:
            prev = d.format_properties.get("metadata_location")
            if prev:
                d.format_properties["previous_metadata_location"] = prev
            d.format_properties["metadata_location"] = metadata_location
        return d

    def alter_tables(self, locations: list[tuple[str, str, str]]) -> None:
        """`alter_table(ns, table, metadata_location=location)` of each ``(ns, table,
        location)``, their definition files written in flight together (on an object store, one
        round trip for a group commit's tables instead of one each)."""
        self._check_open()
        made = []
        for ns, table, location in locations:
            d = self._altered_table(ns, table, None, None, location)
            made.append((ns, table, table_def_path(ns, table), definitions.dumps(d)))
        results = self.lakehouse.storage.create_exclusive_many([(path, data) for _, _, path, data in made])
        errors = [r for r in results if isinstance(r, BaseException)]
        for (ns, table, path, data), r in zip(made, results, strict=True):
            if isinstance(r, BaseException):
                continue
            self._staged_def(path, data)
            if not errors:
                self.writes[self._table_key(ns, table)] = path
                self.ops.append(f"alter table {ns}.{table}")
        if errors:
            raise errors[0]

    def drop_table(self, ns: str, table: str) -> None:
        self._check_open()
        key = self._table_key(ns, table)
        if self.get_key(key) is None:
            if self.get_key(self._ns_key(ns)) is None:
                raise ObjectNotFoundError(f"namespace {ns!r} does not exist (dropping table {ns}.{table})")
            raise ObjectNotFoundError(f"table {ns}.{table} does not exist")
        self.writes[key] = None
        self.ops.append(f"drop table {ns}.{table}")

    # ---- views: a ViewDef whose properties name the Iceberg view metadata file -------------
    def create_view(self, ns: str, view: str, *, metadata_location: str, properties: dict[str, str] | None = None) -> None:
        """Add view `ns.view` pointing at its metadata file (`VIEW_METADATA_LOCATION`).

        Raises:
            ObjectNotFoundError: the namespace does not exist.
            AlreadyExistsError: a view or a table of that name exists.
        """
        self._check_open()
        if not metadata_location:
            raise ValidationError(f"view {ns}.{view} needs a metadata_location")
        vkey = self._view_key(ns, view)
        if self.get_key(self._ns_key(ns)) is None:
            raise ObjectNotFoundError(f"namespace {ns!r} does not exist (creating view {ns}.{view})")
        if self.get_key(vkey) is not None:
            raise AlreadyExistsError(f"view {ns}.{view} already exists")
        if self.table_exists(ns, view):
            raise AlreadyExistsError(f"Table with same name already exists: {ns}.{view}")
        props = dict(properties or {})
        props[VIEW_METADATA_LOCATION] = metadata_location
        d = definitions.ViewDef(id=str(uuid.uuid4()), properties=props)
        self.writes[vkey] = self._write_def(view_def_path(ns, view), d)
        self.ops.append(f"create view {ns}.{view}")

    def alter_view(self, ns: str, view: str, *, metadata_location: str | None = None,
                   set_properties: dict[str, str] | None = None, remove: list[str] | None = None) -> None:
        """Repoint view `ns.view` at a new metadata file (the old one becomes
        `VIEW_PREVIOUS_METADATA_LOCATION`) and/or change its definition's properties."""
        self._check_open()
        d = self.load_view(ns, view)
        for k in remove or []:
            d.properties.pop(k, None)
        d.properties.update(set_properties or {})
        if metadata_location:
            prev = d.properties.get(VIEW_METADATA_LOCATION)
            if prev:
                d.properties[VIEW_PREVIOUS_METADATA_LOCATION] = prev
            d.properties[VIEW_METADATA_LOCATION] = metadata_location
        self.writes[self._view_key(ns, view)] = self._write_def(view_def_path(ns, view), d)
        self.ops.append(f"alter view {ns}.{view}")

    def drop_view(self, ns: str, view: str) -> None:
        self._check_open()
        key = self._view_key(ns, view)
        if self.get_key(key) is None:
            if self.get_key(self._ns_key(ns)) is None:
                raise ObjectNotFoundError(f"namespace {ns!r} does not exist (dropping view {ns}.{view})")
            raise ObjectNotFoundError(f"view {ns}.{view} does not exist")
        self.writes[key] = None
        self.ops.append(f"drop view {ns}.{view}")

    def rename_view(self, ns: str, view: str, to_ns: str, to_view: str) -> None:
        """Move view `ns.view` to `to_ns.to_view` (another namespace too), keeping its
        definition (its id and metadata file).

        Raises:
            ObjectNotFoundError: the source view or the target namespace does not exist.
            AlreadyExistsError: a view or a table of the target name exists.
        """
        self._check_open()
        src = self._view_path(ns, view)
        if self.get_key(self._ns_key(to_ns)) is None:
            raise ObjectNotFoundError(f"namespace {to_ns!r} does not exist (renaming view {ns}.{view})")
        dst = self._view_key(to_ns, to_view)
        if self.get_key(dst) is not None:
            raise AlreadyExistsError(f"view {to_ns}.{to_view} already exists")
        if self.table_exists(to_ns, to_view):
            raise AlreadyExistsError(f"Table with same name already exists: {to_ns}.{to_view}")
        self.writes[self._view_key(ns, view)] = None
        self.writes[dst] = src
        self.ops.append(f"rename view {ns}.{view} to {to_ns}.{to_view}")

    def mutate_definition(self, fn: Callable[[definitions.LakehouseDef], None], description: str) -> None:
        """Change the lakehouse definition at commit. `fn` is re-applied to the latest
        definition on every attempt, so concurrent definition changes (an export and an
        expiration, say) both survive; `fn` raises to refuse (e.g. an export name clash)."""
        self._check_open()
        self.def_mutations.append(fn)
        self.ops.append(description)

    # ---- commit -----------------------------------------------------------------------------
    def rollback(self) -> None:
        """Abandon the transaction: nothing is committed, and the definition files it staged
        are deleted (what cannot be deleted is collected by the orphan job)."""
        self.closed = True
        self._discard(self.staged_files)

    def _discard(self, paths: list[str]) -> list[str]:
        """Delete files of this transaction that no root references; returns those left."""
        if not paths:
            return []
        try:
            failed = [p for p, _ in self.lakehouse.storage.delete(paths)]
        except OSError as e:
            log.warning("transaction %s: could not delete its unreferenced files (%s)", self.id, e)
            return list(paths)
        if failed:
            log.warning("transaction %s: could not delete %s; the orphan job collects them", self.id, failed)
        return failed

    def commit(self, command: str | None = None, arguments: dict | None = None, metrics: dict | None = None) -> int | None:
        """Commit as one new version and return it (None for a read-only transaction).

        Raises:
            TransactionConflictError: concurrent commits conflict under the isolation level.
            TransactionExpiredError: the transaction is past its expire_at.
        """
        self._check_open()
        if not self.writes and not self.def_mutations:
            self.closed = True
            return None
        lh = self.lakehouse
        context = lh.context
        command = command or (context.command if context.command != "api" else "; ".join(self.ops))
        arguments = arguments if arguments is not None else (dict(context.arguments) or {"ops": self.ops})
        msgs = [Message(k, v, self.id) for k, v in self.writes.items()]
        base = self.root
        store = lh.node_store(lh.storage)
        seq: int | None = None
        backoff = 0.005
        attempt_files: list[str] = []  # this attempt's nodes and definition: unreferenced until its root exists
        ambiguous = False  # the root create failed in a way that does not say whether it took effect
        try:
            while True:
                self.attempts += 1
                if _now_ms() >= self.expire_at_millis:
                    raise TransactionExpiredError(
                        f"transaction {self.id} expired at {format_timestamp(self.expire_at_millis)} "
                        f"(began at version {self.begin_version}); it can no longer commit"
                    )
                # The txn_seq is allocated after the base root was read, so it is larger than
                # the base's: txn_seq order equals version order along the chain.
                seq = lh.auditor.allocate_seq(self.id)
                def_path = base.def_path
                d = base.lakehouse_def
                if self.def_mutations:
                    d = definitions.LakehouseDef()
                    d.CopyFrom(base.lakehouse_def)
                    for fn in self.def_mutations:
                        fn(d)
                    check_new_pins(base.lakehouse_def, d)  # re-checked on every rebase
                    def_path = lh.write_definition(d)
                    attempt_files = [def_path]
                writer = tree.TreeWriter(store, lh.tree_params(d))
                new_root = writer.commit(base.node, msgs, keep_txn=self.id)
                new_root.system = root_system_rows(
                    created_at_millis=_now_ms(),
                    lakehouse_def=def_path,
                    previous_root=root_name(base.version),
                    txn_id=self.id,
                    txn_seq=seq,
                )
                root_bytes = serialize(new_root, d.order)
                attempt_files += list(writer.pending)
                try:
                    _crash_point("before_nodes")
                    lh.write_nodes(writer.pending)
                    _crash_point("before_root")
                    ambiguous = True
                    lh.storage.create_exclusive(root_name(base.version + 1), root_bytes)
                    ambiguous = False
                    _crash_point("after_root")
                except FileExistsError:
                    ambiguous = False
                    # Another writer's root: nothing references this attempt's files.
                    self._discard(attempt_files)
                    attempt_files = []
                    base = self.rebase(base.version)
                    if self.attempts >= MAX_COMMIT_ATTEMPTS:
                        raise TransactionConflictError(
                            f"transaction {self.id} gave up after {self.attempts} attempts; latest version is {base.version}"
                        ) from None
                    time.sleep(backoff * (0.5 + random.random()))
                    backoff = min(backoff * 2, 0.5)
                    continue
                break
        except (TransactionConflictError, TransactionExpiredError) as e:
            self.closed = True
            left = self._discard(attempt_files + self.staged_files)
            if left:
                e = type(e)(f"{e}; files left for the orphan job: {', '.join(left)}")
            # The last attempt's txn_seq (None when the first attempt expired before taking
            # one: failed() then takes one), so the seq this commit took has its row.
            lh.auditor.failed(seq, self.id, command, arguments, self.started, self.begin_version, type(e).__name__, str(e),
                              isolation=self.isolation, attempts=self.attempts)
            raise e from None
        except BaseException as e:
            if seq is not None and not ambiguous and isinstance(e, Exception):
                # A command that took a txn_seq and failed before its root (e.g. `export drop`
                # of an unknown name) leaves a failed row at that seq: every seq has a row.
                self.closed = True
                lh.auditor.failed(seq, self.id, command, arguments, self.started, self.begin_version,
                                  type(e).__name__, str(e), isolation=self.isolation, attempts=self.attempts)
            if ambiguous:
                # The root may exist (a timeout after the write took effect): keep every file
                # it could reference; if it does not exist, the orphan job collects them.
                files = attempt_files + self.staged_files
                msg = (f"commit of transaction {self.id} failed while creating {root_name(base.version + 1)}; "
                       f"if that version is not this transaction's, the orphan job collects its files: {', '.join(files)}")
                log.warning(msg)
                if isinstance(e, TrinityLakeError) and len(e.args) == 1 and isinstance(e.args[0], str):
                    e.args = (f"{e.args[0]}; {msg}",)  # the CLI prints str(e): say it there
                else:
                    e.add_note(msg)
            else:
                self._discard(attempt_files + self.staged_files)
            raise
        self.closed = True
        version = base.version + 1
        self.committed_version = version
        lh.remember_root(version, root_bytes)  # this process's next begin and describe_changes read no file
        lh.write_hint(version)
        _crash_point("after_hint")
        lh.auditor.committed(seq, self.id, command, arguments, self.started, base.version, version,
                             lh.describe_changes_safely(version) if lh.auditor.enabled else [],
                             isolation=self.isolation, attempts=self.attempts, metrics=metrics)
        return version

    def rebase(self, failed_base: int) -> RootRef:
        """Check versions failed_base+1..latest against our sets; return the new base root."""
        lh = self.lakehouse
        latest = lh.latest_version()
        for u in range(failed_base + 1, latest + 1):
            cs = lh.change_set(u)
            if cs.txn_id == self.id:
                # A distributed transaction whose commit was run twice (a retry after a crash,
                # or two processes): its writes are already in version u.
                raise TransactionClosedError(f"transaction {self.id} is already committed as version {u}")
            reason = self._conflict(cs)
            if reason:
                raise TransactionConflictError(
                    f"transaction {self.id} ({self.isolation}) conflicts with version {u} (txn {cs.txn_id}): {reason}"
                )
        return lh.load_root(latest)

    def _ns_name(self, key: str) -> str | None:
        """Namespace name of an object key (None when it cannot be decoded)."""
        try:
            return self.codec.decode(key)[1][0]
        except ValidationError:
            return None

    def _conflict(self, cs: ChangeSet) -> str | None:
        changed = cs.keys
        for k in self.writes:
            if k in changed:
                return f"both wrote {self.codec.describe(k)}"
        # A namespace create/drop conflicts with changes to objects inside it, both ways. An
        # alter (the key existed in our snapshot and still exists) is neither: it only takes
        # part through the write-write rule and, under SERIALIZABLE, the read set.
        def created_or_dropped(k: str, v: str | None) -> bool:
            return v is None or LakehouseView.get_key(self, k) is None  # untracked read of our base

        # Namespaces are compared by name: a key's namespace part has no fixed character width
        # (padding counts UTF-8 bytes, or UTF-16 units in Java-written keys).
        changed_ns = {self._ns_name(k) for k, v in changed.items() if k.startswith(keys.NS_PREFIX) and created_or_dropped(k, v)}
        my_ns = {
            self._ns_name(k)
            for k, v in self.writes.items()
            if k.startswith(keys.NS_PREFIX) and (k in self.dropped_namespace_keys or created_or_dropped(k, v))
        }
        changed_ns.discard(None)
        my_ns.discard(None)
        for k in self.writes:
            if k[:4] in (keys.TABLE_PREFIX, keys.VIEW_PREFIX) and self._ns_name(k) in changed_ns:
                return f"namespace {self._ns_name(k)!r} was created or dropped concurrently"
        for k in changed:
            if k[:4] in (keys.TABLE_PREFIX, keys.VIEW_PREFIX) and self._ns_name(k) in my_ns:
                return f"{self.codec.describe(k)} changed inside namespace {self._ns_name(k)!r} that this transaction creates or drops"
        clash = self._name_clash(changed)
        if clash:
            return clash
        if self.isolation == "serializable":
            for k in changed:
                if k in self.read_keys:
                    return f"read {self.codec.describe(k)}, which was changed concurrently"
                for p in self.read_prefixes:
                    if k.startswith(p):
                        return f"scanned a range that now includes a change to {self.codec.describe(k)}"
        return None

    def _name_clash(self, changed: dict[str, str | None]) -> str | None:
        """A table and a view of one name created by two transactions at once: both checked
        that the other kind was absent in their own snapshot."""
        def created(pairs: dict[str, str | None]) -> dict[tuple[str, tuple[str, ...]], str]:
            out = {}
            for k, v in pairs.items():
                if v is not None and k[:4] in (keys.TABLE_PREFIX, keys.VIEW_PREFIX):
                    try:
                        kind, names = self.codec.decode(k)
                    except ValidationError:
                        continue
                    out[(kind, tuple(names))] = k
            return out

        mine, theirs = created(self.writes), created(changed)
        for (kind, names), k in mine.items():
            other = "view" if kind == "table" else "table"
            if (other, names) in theirs:
                return f"{self.codec.describe(k)} and {self.codec.describe(theirs[(other, names)])} were created concurrently"
        return None
