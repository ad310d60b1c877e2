"""Distributed transactions: begin in one process, stage from several, commit from another.

As in the Java reference (``TrinityLake.saveDistTransaction``/``loadDistTransaction``), a
distributed transaction is a TransactionDef (schema 4) at the hash-prefixed
``txn-<id>.binpb`` plus a saved *running root*: a ``node-<uuid>.arrow`` in root layout (system
rows ``lakehouse_def``, ``previous_root`` = the beginning root) whose write buffer holds the
transaction's messages, tagged with its id, on top of the beginning root's tree.

Where we differ from Java, for safety:

* **No overwrite.** Java overwrites ``txn-<id>.binpb`` on every change (its code has a TODO to
  version it); two processes staging at once would lose one's changes. We keep a *state
  chain*: state 0 is ``txn-<id>.binpb`` (what Java reads), state n is ``txn-<id>.<n>.binpb``,
  each created exclusively. A stager reads the latest state n, writes its definition files and
  a new running root, then exclusively creates state n+1; when another process won n+1, it
  deletes its own attempt's files, reloads and re-applies its operation (so a duplicate create
  is refused as AlreadyExistsError, as in one process).
* **Sealing.** Commit and abort first create the next state as ``committing``/``aborted``: a
  stager that read an older state then loses the race and is refused, so nothing is staged
  into a transaction after its commit began (no lost update).
* **Read sets.** SERIALIZABLE needs every stager's reads: they are stored in the state
  (extension fields 103-105) and checked at commit like a local transaction's.
* **TTL as a lease.** A transaction's TTL is at most the lakehouse's ``txn_ttl_millis``. Java
  fixes ``expire_at = began_at + TTL``; a transaction fed by many processes (Spark or Airflow
  tasks) would then need all of them to finish within one TTL. Here every stage renews
  ``expire_at = now + TTL`` *and re-pins the transaction on the latest version* (checking the
  versions in between like a commit's rebase), so at any moment the transaction is exactly a
  local transaction that began at its last stage: the retention rule (a version is expired
  only when its successor is older than the TTL) and the commit rules hold unchanged. Past
  ``expire_at`` a transaction can neither stage nor commit, and that is final.

A small marker ``_txn/<id>`` (JSON: latest state number, began/expire times) lists the
transactions for ``tlake txn list`` and maintenance, and is the probe hint for the latest
state (like ``_latest_hint.txt`` for versions: it may be stale, readers probe upward).

Maintenance: the latest state file and running root are written at the last stage, so the
orphan job's age floor (at least the TTL) keeps them while the lease runs; definitions staged
earlier may be older than the floor, so `live_running_roots` gives the walks (expire, orphans)
the running roots of live transactions, which reach every staged definition and new node.
After ``expire_at`` (plus a margin) nothing reaches them, and the orphan job collects them.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trinitylake.errors import (
    AlreadyExistsError,
    CorruptDefinitionError,
    ObjectNotFoundError,
    TransactionClosedError,
    TransactionConflictError,
    TransactionExpiredError,
    ValidationError,
)
from trinitylake.format import definitions, tree
from trinitylake.format.node import Message, Node, deserialize, serialize
from trinitylake.format.paths import new_node_path, root_name, root_version, txn_def_path
from trinitylake.json_data import JsonObject
from trinitylake.lakehouse.roots import RootRef, root_system_rows
from trinitylake.lakehouse.transaction import Transaction
from trinitylake.values import format_timestamp

if TYPE_CHECKING:
    from trinitylake.lakehouse.lakehouse import Lakehouse
    from trinitylake.lakehouse.transaction import Transaction

log = logging.getLogger(__name__)

MARKER_DIR = "_txn"
OPEN, COMMITTING, COMMITTED, ABORTED = "open", "committing", "committed", "aborted"
MAX_STAGE_ATTEMPTS = 64
# How far back a caller may date its request (`requested_at_millis`): a CLI process stamps the
# time it was started, so its own start-up (seconds on a busy machine) does not count against
# a short lease. Version expiration's clock-skew margin (10 min by default) and the margin the
# orphan job keeps after expire_at (`live_running_roots`) are both larger.
MAX_REQUEST_LAG_MS = 60_000
# expire_at is set by one host's clock and checked by another's (Spark executors, Airflow
# workers): a stage or commit is refused from expire_at + this tolerance on. Maintenance keeps
# far more: expiration's clock-skew margin, and `KEEP_AFTER_EXPIRY_MS` for running roots.
CLOCK_TOLERANCE_MS = 1_750
KEEP_AFTER_EXPIRY_MS = 10 * 60_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def marker_path(txn_id: str) -> str:
    txn_def_path(txn_id)  # validates the id
    return f"{MARKER_DIR}/{txn_id}"


@dataclass
class _State:
    number: int
    d: definitions.TransactionDef

    @property
    def status(self) -> str:
        return self.d.state or OPEN


class DistributedTransaction:
    """Handle on one distributed transaction; cheap to create, every call reloads its state.

    Example:
        >>> from trinitylake.lakehouse import Lakehouse
        >>> lh = Lakehouse.create("memory://dtxn-doc", audit=False)
        >>> t = DistributedTransaction.begin(lh)
        >>> DistributedTransaction.load(lh, t.id).stage(lambda x: x.create_namespace("a"))
        1
        >>> DistributedTransaction.load(lh, t.id).commit()
        1
    """

    def __init__(self, lakehouse: Lakehouse, txn_id: str):
        self.lakehouse = lakehouse
        self.id = txn_id
        txn_def_path(txn_id)  # validates the id

    # ---- begin and load -------------------------------------------------------------------
    @classmethod
    def begin(cls, lakehouse: Lakehouse, isolation: str | None = None, txn_id: str | None = None,
              ttl_millis: int | None = None) -> DistributedTransaction:
        """Pin the latest version, save an empty running root and create state 0.

        Raises:
            ValidationError: a bad id or a TTL above the lakehouse's ``txn_ttl_millis``.
            AlreadyExistsError: a distributed transaction with this id exists.
        """

        lh = lakehouse
        txn_id = txn_id or str(uuid.uuid4())
        self = cls(lh, txn_id)
        base = lh.load_root(lh.latest_version())
        d = base.lakehouse_def
        limit = int(d.txn_ttl_millis or definitions.DEFAULT_TXN_TTL_MILLIS)
        if ttl_millis is not None and not 0 < ttl_millis <= limit:
            raise ValidationError(f"transaction ttl must be in (0, {limit}] ms (the lakehouse's txn_ttl_millis), got {ttl_millis}")
        level = definitions.isolation_level(isolation) if isolation is not None else d.txn_isolation_level
        running = self._save_running_root(base, base.node, [])
        began = _now_ms()  # the lease starts when the state is saved, as a stage renews it
        state = definitions.TransactionDef(id=txn_id, isolation_level=level, beginning_root_node_file_path=root_name(base.version),
                                 running_root_node_file_path=running, began_at_millis=began,
                                 expire_at_millis=began + (ttl_millis or limit), state=OPEN,
                                 ttl_millis=ttl_millis or limit)
        try:
            lh.storage.create_exclusive(txn_def_path(txn_id), definitions.dumps(state))
        except FileExistsError:
            lh.storage.delete([running])
            raise AlreadyExistsError(f"distributed transaction {txn_id} already exists in {lh.uri}") from None
        self._write_marker(_State(0, state))
        return self

    @classmethod
    def load(cls, lakehouse: Lakehouse, txn_id: str) -> DistributedTransaction:
        """Handle on an existing transaction (any process).

        Raises:
            ObjectNotFoundError: no such transaction.
        """
        self = cls(lakehouse, txn_id)
        self.state()
        return self

    def state(self) -> _State:
        """The latest state: from the marker's hint, probing upward (the hint may be stale)."""
        st = self.lakehouse.storage
        hint = 0
        try:
            hint = int(json.loads(st.read(marker_path(self.id))).get("state", 0))
        except (FileNotFoundError, ValueError, TypeError, AttributeError):
            hint = 0
        # Older states may already be collected by the orphan job (a lease-renewed transaction
        # can outlive the age floor); the hint names a recent one.
        n = hint if hint > 0 and st.exists(txn_def_path(self.id, hint)) else 0
        while st.exists(txn_def_path(self.id, n + 1)):
            n += 1
        return _State(n, self._read_state(n))

    def _read_state(self, n: int) -> definitions.TransactionDef:
        path = txn_def_path(self.id, n)
        try:
            data = self.lakehouse.storage.read(path)
        except FileNotFoundError:
            raise ObjectNotFoundError(f"distributed transaction {self.id} does not exist in {self.lakehouse.uri} "
                                      f"(no {path})") from None
        d = definitions.loads(definitions.TransactionDef, data, self.lakehouse.storage.uri(path))
        if d.id != self.id:
            raise CorruptDefinitionError(f"transaction definition {path} holds id {d.id!r}, expected {self.id!r}")
        return d

    def info(self) -> JsonObject:
        s = self.state()
        now = _now_ms()
        return {"id": self.id, "state": s.status, "state_number": s.number,
                "isolation": definitions.isolation_name(s.d.isolation_level),
                "begin_version": root_version(s.d.beginning_root_node_file_path),
                "running_root": s.d.running_root_node_file_path, "began_at_millis": s.d.began_at_millis,
                "expire_at_millis": s.d.expire_at_millis, "expired": now >= s.d.expire_at_millis + CLOCK_TOLERANCE_MS,
                "committed_version": s.d.committed_version if s.status == COMMITTED else None,
                "staged": self._staged_count(s)}

    def _staged_count(self, s: _State) -> int | None:
        try:
            return len(self._messages(self._running(s)))
        except ObjectNotFoundError:  # aborted (its running roots deleted), or collected
            return None

    # ---- reading the running root ---------------------------------------------------------
    def _beginning(self, s: _State) -> RootRef:
        return self.lakehouse.load_root(root_version(s.d.beginning_root_node_file_path))

    def _running(self, s: _State) -> RootRef:
        lh = self.lakehouse
        path = s.d.running_root_node_file_path
        try:
            data = lh.storage.read(path)
        except FileNotFoundError:
            raise ObjectNotFoundError(f"running root {lh.storage.uri(path)} of distributed transaction {self.id} "
                                      "is missing (aborted, or collected after it expired)") from None
        node = deserialize(data, None, lh.storage.uri(path))
        base = self._beginning(s)
        return RootRef(base.version, path, node, base.lakehouse_def, base.def_path, lh.storage)

    def _messages(self, running: RootRef) -> list[Message]:
        return [m for m in running.node.buffer if m.txn == self.id]

    def view(self) -> Transaction:
        """Read-only view of the transaction's state (reads see what was staged)."""
        return self._transaction(self._checked_open(self.state()), self._running)

    def _transaction(self, s: _State, root_of: Callable[[_State], RootRef]) -> Transaction:

        t = Transaction(self.lakehouse, isolation=definitions.isolation_name(s.d.isolation_level), txn_id=self.id, root=root_of(s))
        t.began_at_millis = int(s.d.began_at_millis)
        t.expire_at_millis = int(s.d.expire_at_millis)
        t.begin_version = root_version(s.d.beginning_root_node_file_path)
        return t

    def _checked_open(self, s: _State, for_what: str = "stage", at_ms: int | None = None) -> _State:
        if s.status == COMMITTED:
            raise TransactionClosedError(f"distributed transaction {self.id} is already committed as version {s.d.committed_version}")
        if s.status == ABORTED:
            raise TransactionClosedError(f"distributed transaction {self.id} was aborted")
        if s.status == COMMITTING and for_what != "commit":
            raise TransactionClosedError(f"distributed transaction {self.id} is being committed (state {s.number}); "
                                         f"it can no longer {for_what}")
        expired = (at_ms if at_ms is not None else _now_ms()) >= s.d.expire_at_millis + CLOCK_TOLERANCE_MS
        if expired and for_what != "abort":  # an expired transaction may still be aborted (cleanup)
            raise TransactionExpiredError(f"distributed transaction {self.id} expired at {format_timestamp(s.d.expire_at_millis)} "
                                          f"(began at version {root_version(s.d.beginning_root_node_file_path)}); "
                                          f"it can no longer {for_what}")
        return s

    # ---- staging --------------------------------------------------------------------------
    def stage(self, op: Callable[[Transaction], object], requested_at_millis: int | None = None) -> int:
        """Apply `op` (e.g. ``lambda t: t.create_table("ns", "t")``) and save it as the next
        state; returns the new state number. Safe to call from many processes at once.

        Every stage renews the lease (``expire_at = now + ttl``) and re-pins the transaction on
        the latest version, after checking the versions committed since its last pin against
        its writes (and, SERIALIZABLE, its reads) exactly as a commit's rebase does. So the
        transaction is always pinned on a version at most one TTL old, the invariant that keeps
        version expiration from deleting what a live transaction reads.

        `requested_at_millis` (default now; at most `MAX_REQUEST_LAG_MS` back) is when the
        caller asked: the lease is checked against it.

        Raises:
            TransactionExpiredError, TransactionClosedError: the transaction cannot stage.
            TransactionConflictError: a concurrent commit conflicts (the transaction is then
                aborted), or too many concurrent stagers won the race in a row.
        """
        lh = self.lakehouse
        at = _request_time(requested_at_millis)
        backoff = 0.005
        for _attempt in range(MAX_STAGE_ATTEMPTS):
            s = self._checked_open(self.state(), at_ms=at)
            running = self._running(s)

            def root_of(_s: _State, r: RootRef = running) -> RootRef:
                return r

            t = self._transaction(s, root_of)
            try:
                op(t)  # writes definition files as it stages, like a local transaction
            except BaseException:
                _delete_quietly(lh, t.staged_files, "a refused staging operation")
                raise
            if not t.writes:
                return s.number
            written = list(t.staged_files)
            try:
                pinned = self._transaction(s, self._beginning)
                for m in self._messages(running) + [Message(k, v, self.id) for k, v in t.writes.items()]:
                    pinned.writes.pop(m.key, None)  # keeps the order of the last write per key
                    pinned.writes[m.key] = m.value
                pinned.read_keys = set(s.d.read_keys) | t.read_keys
                pinned.read_prefixes = set(s.d.read_prefixes) | t.read_prefixes
                pinned.dropped_namespace_keys = set(s.d.dropped_namespace_keys) | t.dropped_namespace_keys
                base = pinned.root
                if lh.latest_version() != base.version:
                    try:
                        base = pinned.rebase(base.version)
                    except TransactionConflictError as e:
                        _delete_quietly(lh, written, "a staging attempt that conflicts")
                        self.abort()
                        raise TransactionConflictError(f"{e}; the transaction is aborted") from None
                msgs = [Message(k, v, self.id) for k, v in pinned.writes.items()]
                new_running = self._save_running_root(base, base.node, msgs, written)
                nxt = definitions.TransactionDef()
                nxt.CopyFrom(s.d)
                nxt.beginning_root_node_file_path = root_name(base.version)
                nxt.running_root_node_file_path = new_running
                nxt.state_number = s.number + 1
                nxt.read_keys[:] = sorted(pinned.read_keys)
                nxt.read_prefixes[:] = sorted(pinned.read_prefixes)
                nxt.dropped_namespace_keys[:] = sorted(pinned.dropped_namespace_keys)
                self._checked_open(s, at_ms=at)
                nxt.expire_at_millis = _now_ms() + self._ttl(s)
                lh.storage.create_exclusive(txn_def_path(self.id, s.number + 1), definitions.dumps(nxt))
            except FileExistsError:
                _delete_quietly(lh, written, "a staging attempt that lost the race")
                time.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 0.25)
                continue
            except BaseException:
                _delete_quietly(lh, written, "a failed staging attempt")
                raise
            self._write_marker(_State(s.number + 1, nxt))
            return s.number + 1
        raise TransactionConflictError(f"distributed transaction {self.id}: {MAX_STAGE_ATTEMPTS} staging attempts lost "
                                       "the race to concurrent stagers; retry")

    @staticmethod
    def _ttl(s: _State) -> int:
        return int(s.d.ttl_millis or (s.d.expire_at_millis - s.d.began_at_millis))

    def _save_running_root(self, base: RootRef, node: Node, msgs: list[Message], written: list[str] | None = None) -> str:
        """Write a running root (and any node a flush needs) holding `msgs` on top of `node`;
        appends every path written to `written`."""
        lh = self.lakehouse
        d = base.lakehouse_def
        writer = tree.TreeWriter(lh.node_store(lh.storage), lh.tree_params(d))
        new_root = writer.commit(node, msgs, keep_txn=self.id)
        new_root.system = root_system_rows(created_at_millis=_now_ms(), lakehouse_def=base.def_path,
                                           previous_root=root_name(base.version), txn_id=self.id)
        path = new_node_path()
        out = written if written is not None else []
        out.extend(writer.pending)
        lh.write_nodes(writer.pending)
        out.append(path)
        lh.storage.create_exclusive(path, serialize(new_root, d.order))
        return path

    # ---- commit and abort -----------------------------------------------------------------
    def _seal(self, status: str, at_ms: int | None = None) -> _State:
        """Create the next state as `status`, so no stager can add to the transaction after it.
        Returns the sealed state. A transaction already ``committing`` is returned as it is
        (a commit retried after a crash resumes it; committing twice is refused at rebase)."""
        for _attempt in range(MAX_STAGE_ATTEMPTS):
            s = self._checked_open(self.state(), "commit" if status == COMMITTING else "abort", at_ms)
            if s.status == COMMITTING:
                if status == COMMITTING:
                    return s
                raise TransactionClosedError(f"distributed transaction {self.id} is being committed; it can no longer abort")
            nxt = definitions.TransactionDef()
            nxt.CopyFrom(s.d)
            nxt.state = status
            nxt.state_number = s.number + 1
            try:
                self.lakehouse.storage.create_exclusive(txn_def_path(self.id, s.number + 1), definitions.dumps(nxt))
            except FileExistsError:
                time.sleep(0.005 * (0.5 + random.random()))
                continue
            self._write_marker(_State(s.number + 1, nxt))
            return _State(s.number + 1, nxt)
        raise TransactionConflictError(f"distributed transaction {self.id}: could not {status} it ({MAX_STAGE_ATTEMPTS} "
                                       "attempts lost the race to concurrent stagers)")

    def commit(self, command: str | None = None, requested_at_millis: int | None = None) -> int | None:
        """Commit the staged changes as one new version (None when nothing was staged), with
        the same rebase and isolation rules as a local transaction.

        Raises:
            TransactionExpiredError: past ``expire_at``.
            TransactionConflictError: concurrent commits conflict under the isolation level.
            TransactionClosedError: already committed or aborted.
        """
        at = _request_time(requested_at_millis)
        s = self._seal(COMMITTING, at)
        running = self._running(s)
        t = self._transaction(s, self._beginning)
        for m in self._messages(running):
            t.writes.pop(m.key, None)  # keeps the order of the last write per key
            t.writes[m.key] = m.value
        t.read_keys = set(s.d.read_keys)
        t.read_prefixes = set(s.d.read_prefixes)
        t.dropped_namespace_keys = set(s.d.dropped_namespace_keys)
        t.ops = [f"distributed transaction {self.id}: {len(t.writes)} staged changes"]
        # The commit was asked for at `at`, before expire_at: its attempts may run past it, as a
        # local commit's last attempt may (both within the clock-skew margin).
        t.expire_at_millis = int(s.d.expire_at_millis) + CLOCK_TOLERANCE_MS + max(0, _now_ms() - at)
        try:
            version = t.commit(command=command or f"txn commit {self.id}", arguments={"txn": self.id, "state": s.number})
        except (TransactionConflictError, TransactionExpiredError) as e:
            self._finish(s, ABORTED, None)
            left = self._cleanup(s)
            raise type(e)(f"{e}; the transaction is aborted{left}") from None
        except TransactionClosedError:
            # Another process's commit of this transaction won: record it if it is in a version.
            lh = self.lakehouse
            for v in range(t.begin_version + 1, lh.latest_version() + 1):
                if lh.load_root(v).txn_id == self.id:
                    self._finish(s, COMMITTED, v)
                    break
            raise
        self._finish(s, COMMITTED, version)
        return version

    def abort(self) -> list[str]:
        """Abort: no stager or committer can use the transaction any more; its staged
        definition files and running roots are deleted. Returns what could not be deleted
        (left for the orphan job).

        Raises:
            TransactionClosedError: already committed, or being committed.
        """
        s = self._seal(ABORTED)
        failed = self._delete_staged(s)
        self._drop_marker()
        return failed

    def _finish(self, s: _State, status: str, version: int | None) -> None:
        nxt = definitions.TransactionDef()
        nxt.CopyFrom(s.d)
        nxt.state = status
        nxt.state_number = s.number + 1
        if version is not None:
            nxt.committed_version = version
        try:
            self.lakehouse.storage.create_exclusive(txn_def_path(self.id, s.number + 1), definitions.dumps(nxt))
        except FileExistsError:
            log.warning("distributed transaction %s: state %d was written concurrently (a second commit?)", self.id, s.number + 1)
        self._drop_marker()

    def _cleanup(self, s: _State) -> str:
        failed = self._delete_staged(s)
        return f"; files left for the orphan job: {', '.join(failed)}" if failed else ""

    def _delete_staged(self, s: _State) -> list[str]:
        """Delete the staged definition files and the running roots of states 0..s: nothing
        committed references them (the transaction is sealed as aborted)."""
        lh = self.lakehouse
        paths: list[str] = []
        try:
            running = self._running(s)
            beginning = self._beginning(s)
            store = lh.node_store(lh.storage)
            # Staged values are fresh definition files; the check against the beginning tree
            # only guards against ever deleting a file a committed version references.
            paths += sorted({m.value for m in self._messages(running)
                             if m.value is not None and tree.get(store, beginning.node, m.key) != m.value})
        except ObjectNotFoundError:
            pass
        for n in range(s.number + 1):
            try:
                paths.append(self._read_state(n).running_root_node_file_path)
            except ObjectNotFoundError:
                continue
        return _delete_quietly(lh, sorted(set(paths)), f"distributed transaction {self.id}")

    # ---- the marker -----------------------------------------------------------------------
    def _write_marker(self, s: _State) -> None:
        body = {"id": self.id, "state": s.number, "began_at_millis": s.d.began_at_millis,
                "expire_at_millis": s.d.expire_at_millis}
        try:
            self.lakehouse.storage.write(marker_path(self.id), json.dumps(body).encode())
        except OSError as e:  # only a hint: listing and probing still work from state 0
            log.warning("could not update %s: %s", marker_path(self.id), e)

    def _drop_marker(self) -> None:
        _delete_quietly(self.lakehouse, [marker_path(self.id)], "the transaction marker")


def _request_time(requested_at_millis: int | None) -> int:
    now = _now_ms()
    if requested_at_millis is None:
        return now
    return min(now, max(int(requested_at_millis), now - MAX_REQUEST_LAG_MS))


def _delete_quietly(lh: Lakehouse, paths: list[str], what: str) -> list[str]:
    """Delete `paths`; returns those that could not be deleted (the orphan job collects them)."""
    if not paths:
        return []
    try:
        failed = lh.storage.delete(paths)
    except OSError as e:
        log.warning("could not delete files of %s (%s); the orphan job collects them", what, e)
        return list(paths)
    return [p for p, _ in failed]


def _markers(lakehouse: Lakehouse) -> list[tuple[str, str]]:
    """(marker path, transaction id) of every distributed transaction marker."""
    try:
        _, files = lakehouse.storage.list_dirs(MARKER_DIR)
    except FileNotFoundError:
        return []
    return [(f.path, f.path.rstrip("/").rsplit("/", 1)[-1]) for f in files]


def list_transactions(lakehouse: Lakehouse, *, include_closed: bool = False) -> list[JsonObject]:
    """Distributed transactions with a marker: live ones (open or committing, not expired), or
    all when `include_closed`. Markers of committed or aborted transactions, and of expired
    ones maintenance no longer keeps (`KEEP_AFTER_EXPIRY_MS`), are removed."""
    out = []
    now = _now_ms()
    for marker, txn_id in _markers(lakehouse):
        try:
            info = DistributedTransaction(lakehouse, txn_id).info()
        except (ValidationError, ObjectNotFoundError, CorruptDefinitionError) as e:
            log.warning("skipping transaction marker %s: %s", marker, e)
            continue
        live = info["state"] in (OPEN, COMMITTING) and not info["expired"]
        # Markers of closed transactions, or of ones maintenance no longer keeps, are dropped.
        if info["state"] in (COMMITTED, ABORTED) or now > info["expire_at_millis"] + KEEP_AFTER_EXPIRY_MS:
            _delete_quietly(lakehouse, [marker], "a finished transaction's marker")
        if live or include_closed:
            out.append(info)
    return sorted(out, key=lambda i: (i["began_at_millis"], i["id"]))


def live_running_roots(lakehouse: Lakehouse, margin_ms: int = KEEP_AFTER_EXPIRY_MS) -> list[tuple[int, str]]:
    """(beginning version, running root path) of every distributed transaction that may still
    commit: open or committing, and not past ``expire_at + margin_ms``. Maintenance walks them
    so that what they stage is reachable."""
    out = []
    now = _now_ms()
    for _, txn_id in _markers(lakehouse):
        try:
            s = DistributedTransaction(lakehouse, txn_id).state()
        except (ValidationError, ObjectNotFoundError, CorruptDefinitionError):
            continue
        if s.status in (OPEN, COMMITTING) and now < s.d.expire_at_millis + margin_ms:
            out.append((root_version(s.d.beginning_root_node_file_path), s.d.running_root_node_file_path))
    return out
