"""Group commit: the table commits that arrive while a lakehouse version is being written go
together into the next one.

The lakehouse's root is the one point every writer of every table passes through; a database
meets the same one-log bottleneck with group commit, and so does the server
(`GroupCommitter.commit`, used by ``POST .../tables/{table}``):

* A commit joins the queue. When no group is being written, the first waiting commit's thread
  leads: it takes every queued commit, in arrival order, into one lakehouse transaction. The
  others wait, and the commits arriving meanwhile form the next group.
* Each commit's requirements are checked in order against the state it will be applied to:
  the table as the transaction reads it, plus the group's earlier commits to the same table.
  A commit whose requirements fail (or whose updates are refused) is answered alone with its
  own error (409 ``CommitFailedException``) and the group goes on without it.
* Nothing is answered before its version exists: every answer waits for the group's root, and
  for the group's audit rows. The lead passes on as soon as the root exists, so the next
  group's root is written while this group's rows are appended. What only serves later
  readers and writers (the versions' audited markers, the check for unaudited versions
  below them, a due checkpoint of the control table) follows the answers (`AuditBatch`).
* The audit keeps one row per client commit: the transaction's own ``committed`` row names the
  group's first commit; every other commit gets a ``committed`` row of its own (its own
  txn_seq, the same transaction id) naming the version it landed in.
* Several servers on one lakehouse: a root race lost to another process is rebased by the
  lakehouse transaction (other tables' commits are no conflict); when the other process
  changed a table of this group, the group is rebuilt from scratch over the new latest version
  and tried again, so each commit is checked against what it now applies to, and a client
  never sees another group's conflict as its own unless its own requirements fail.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.table import CommitTableResponse, StagedTable, Table

from trinitylake.errors import TransactionConflictError, TransactionExpiredError, UnknownOutcomeError
from trinitylake.iceberg.metadata_cache import remember, trusting
from trinitylake.iceberg.multi_table import check_creates, commit_response
from trinitylake.rest_catalog.audit_batch import AuditBatch, moving

if TYPE_CHECKING:
    from pyiceberg.table.update import TableRequirement, TableUpdate

    from trinitylake.control import AuditRecord
    from trinitylake.iceberg import TrinityLakeCatalog
    from trinitylake.lakehouse import Transaction
    from trinitylake.lakehouse.audit import Auditor

log = logging.getLogger(__name__)

#: How many times a group is rebuilt after losing to another process's commit of its tables.
MAX_REGROUPS = 8
#: The most commits one group takes (the rest wait for the next).
MAX_GROUP = 256
#: The longest a lead waits for the next commits of the writers active meanwhile (`_gather`).
GATHER_MAX_S = 0.06
#: A table whose last commit arrived this long ago no longer counts as an active writer.
ACTIVE_S = 0.2


@dataclass
class _Commit:
    catalog: TrinityLakeCatalog
    key: tuple[str, str]
    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]
    done: bool = False  # answered: its version exists and its audit row is appended
    settled: bool = False  # its outcome known (response or error)
    taken: bool = False  # in a group being written
    response: CommitTableResponse | None = None
    error: BaseException | None = None
    version: int | None = None
    started: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def what(self) -> str:
        return f"commit table {self.key[0]}.{self.key[1]}"


class GroupCommitter:
    """One per server process: see the module doc."""

    def __init__(self, max_group: int = MAX_GROUP, leader_catalog: Callable[[], TrinityLakeCatalog] | None = None):
        self._cond = threading.Condition()
        #: Makes the catalog every group is written through (None: the lead's own request's).
        #: One lead at a time uses it, so its lakehouse handle's caches stay warm from group to
        #: group: the root this process wrote last is the next group's base without a read,
        #: and the control table is checked once.
        self._make_leader = leader_catalog
        self._leader: TrinityLakeCatalog | None = None
        self._queue: list[_Commit] = []
        self._leading = False
        self.max_group = max_group
        self.audit = AuditBatch()
        #: Where the next group's transaction begins while its lead gathers, and its txn_seqs
        #: are taken while its metadata and definition files are written (one lead at a time).
        self._io = ThreadPoolExecutor(1, thread_name_prefix="group-io")
        #: Where the lakehouse's hint (after each root) and the txn_seq hint are written, off the
        #: group's path.
        self._hints = ThreadPoolExecutor(1, thread_name_prefix="group-hint")
        #: Where a group's metadata files are written while its lead writes the definitions.
        self._files = ThreadPoolExecutor(1, thread_name_prefix="group-files")
        self.gather_max_s = GATHER_MAX_S
        self._gathering = False
        self._inside: dict[tuple[str, str], int] = {}  # table -> its commits inside `commit`
        self._recent: dict[tuple[str, str], float] = {}  # table -> when its last commit arrived or was answered
        self._answered: dict[tuple[str, str], float] = {}  # table -> when its last commit was answered
        self._return_s = 0.0  # moving average of the time from an answer to that writer's next commit
        #: Groups written and commits in them (for tests and the benchmark).
        self.groups = 0
        self.commits = 0

    def commit(self, catalog: TrinityLakeCatalog, key: tuple[str, str], requirements: tuple[TableRequirement, ...],
               updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        """Commit `updates` to table `key` as `TrinityLakeCatalog.commit_changes` does, in the next
        group; returns once the version holding it exists (or raises this commit's own error)."""
        mine = _Commit(catalog, key, tuple(requirements), tuple(updates))
        with self._cond:
            self._queue.append(mine)
            self._inside[key] = self._inside.get(key, 0) + 1
            now = time.monotonic()
            self._recent[key] = now
            answered = self._answered.pop(key, None)
            if answered is not None and now - answered < ACTIVE_S:
                # how long a writer takes to come back with its next commit
                self._return_s = moving(self._return_s or None, now - answered)
            if self._gathering:
                self._cond.notify_all()
            while not mine.done and (self._leading or mine.taken):
                self._cond.wait()
            if not mine.done:
                self._leading = True
                # the transaction begins (a probe of the latest root) while the lead gathers
                beginning = self._io.submit(self._begin, mine.catalog)
                self._gather(time.monotonic())
                group, self._queue = self._queue[:self.max_group], self._queue[self.max_group:]
                for c in group:
                    c.taken = True
        try:
            if not mine.done:
                self._lead(mine.catalog, group, beginning)
        finally:
            with self._cond:
                if self._inside[key] > 1:
                    self._inside[key] -= 1
                else:
                    del self._inside[key]
                self._recent[key] = self._answered[key] = time.monotonic()
        if mine.error is not None:
            raise mine.error
        assert mine.response is not None
        return mine.response

    def _gather(self, now: float) -> None:
        """(Called by the lead, holding the lock.) Wait for the next commits of the writers
        answered in the last `ACTIVE_S` that are not back yet, for at most twice the time writers
        take to come back (and `gather_max_s`), as PostgreSQL's commit_delay does when
        commit_siblings are active. A lone writer never waits.

        A writer counts from its answer, not from its commit's arrival: on an object store a
        commit is inside for longer than `ACTIVE_S` (900 ms at 20 ms a round trip), and counted
        from arrival all 31 writers of the group just answered looked gone, so the first one
        back was written alone and the rest waited a whole root for it.

        Why: a group's root, hints, txn_seq markers and audit append cost the same whatever the
        group's size; with 8 writers on 2 cores, groups of 2.3 commits spent 12.8 ms of server CPU
        a commit, groups of 7 about half that (and 78 -> 105 commits/s)."""
        if self.gather_max_s <= 0:
            return
        for k in [k for k, t in self._recent.items() if now - t > ACTIVE_S and k not in self._inside]:
            del self._recent[k]
            self._answered.pop(k, None)
        deadline = now + min(self.gather_max_s, 2 * self._return_s)
        self._gathering = True
        try:
            while (len(self._queue) < self.max_group
                   and any(k not in self._inside for k in self._recent)):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        finally:
            self._gathering = False

    def _leader_catalog(self, fallback: TrinityLakeCatalog) -> TrinityLakeCatalog:
        """The catalog the lead writes through (called by the lead only)."""
        if self._make_leader is None:
            return fallback
        if self._leader is None:
            self._leader = self._make_leader()
            # its next group begins above the root it wrote last, never from the hint: the hint
            # is written after the answers' path, not on it (one round trip a group)
            self._leader.lakehouse.hint_executor = self._hints
        return self._leader

    def _begin(self, catalog: TrinityLakeCatalog) -> Transaction:
        return self._leader_catalog(catalog).begin_write("group commit")

    def _lead(self, catalog: TrinityLakeCatalog, group: list[_Commit], beginning: Future[Transaction] | None = None) -> None:
        """Write `group`, hand the lead on as soon as its root exists (the next group's root is
        written while this group's audit rows are appended), then answer the group."""
        append: Callable[[], None] | None = None
        taken = time.monotonic()
        self.audit.expect()  # this group's rows are on their way: an append starting now waits for them
        try:
            append = self._write(self._leader_catalog(catalog), group, beginning)
            self.audit.rooted(time.monotonic() - taken)
        except BaseException as e:  # noqa: BLE001 - every commit of the group gets an answer
            for c in group:
                if not c.settled:
                    c.error, c.settled = e, True
        finally:
            with self._cond:
                self._leading = False
                self.groups += 1
                self.commits += len(group)
                self._cond.notify_all()
        try:
            if append is not None:
                append()
            else:
                self.audit.cancel()
        finally:
            with self._cond:
                for c in group:
                    c.done = True
                self._cond.notify_all()

    # ---- one group ---------------------------------------------------------------------------
    def _write(self, catalog: TrinityLakeCatalog, group: list[_Commit],
               beginning: Future[Transaction] | None = None) -> Callable[[], None] | None:
        """Write `group` as one version (rebuilt after a lost race), settling every commit;
        returns what appends the group's audit rows (None: nothing to append). The first
        attempt's transaction is `beginning`'s, when given (begun while the lead gathered)."""
        for attempt in range(1, MAX_REGROUPS + 1):
            try:
                txn = beginning.result() if beginning is not None and attempt == 1 else catalog.begin_write("group commit")
                return self._attempt(catalog, group, txn)
            except (TransactionConflictError, TransactionExpiredError, _Rebuild) as e:
                if attempt == MAX_REGROUPS:
                    for c in group:
                        if not c.settled:
                            c.error = CommitFailedException(f"{c.what}: {e}")
                            c.settled = True
                    return None
                if not isinstance(e, _Rebuild):
                    log.info("group of %d commits lost to a concurrent commit (%s); rebuilding it", len(group), e)
        return None  # not reached: the last attempt returns

    def _attempt(self, catalog: TrinityLakeCatalog, group: list[_Commit], txn: Transaction) -> Callable[[], None] | None:
        tables: dict[tuple[str, str], Table | None] = {}
        pending: dict[tuple[str, str], str] = {}
        actions: dict[tuple[str, str], str] = {}  # alter or create, as `tlake show` names the change
        written: list[str] = []
        landed: list[tuple[_Commit, CommitTableResponse]] = []
        refused: list[tuple[_Commit, BaseException]] = []
        staged_of: list[tuple[_Commit, StagedTable]] = []  # written together after the loop
        seqs: Future[list[int]] | None = None
        try:
            for c in group:
                if c.settled:
                    continue
                try:
                    if c.key not in tables:
                        with trusting():  # built on, not served: no existence check of the file
                            tables[c.key] = catalog.table_in(txn, c.key[0], c.key[1])
                    current = tables[c.key]
                    if current is None:
                        check_creates(txn, c.key[0], c.key[1], c.requirements)
                    staged = catalog.stage_table_update(current, c.key, c.requirements, c.updates)
                    if current is not None and staged.metadata == current.metadata:
                        landed.append((c, commit_response(current.metadata, current.metadata_location)))
                        continue
                except Exception as e:  # noqa: BLE001 - this commit's own error, answered alone
                    refused.append((c, e))
                    continue
                staged_of.append((c, staged))
                tables[c.key] = Table(identifier=c.key, metadata=staged.metadata,
                                      metadata_location=staged.metadata_location, io=staged.io, catalog=catalog)
            seqs = self._take_seqs(catalog, txn.id, landed, staged_of)
            # The group's metadata files and its tables' new definition files in flight together
            # (on an object store one round trip for both, not one after the other): each
            # definition names the metadata file of its table's last commit in the group.
            last: dict[tuple[str, str], str] = {}
            for c, staged in staged_of:
                last[c.key] = staged.metadata_location
            alters = [(ns, t, loc) for (ns, t), loc in last.items() if txn.table_exists(ns, t)]
            files = self._files.submit(catalog.write_staged_each, [s for _, s in staged_of])
            try:
                txn.alter_tables(alters)  # their definition files in flight together
            except BaseException:
                written += _written(staged_of, files)
                raise
            results = files.result()
            written += [staged.metadata_location for (_, staged), err in zip(staged_of, results, strict=True)
                        if err is None]
            if any(err is not None for err in results):
                # A commit whose file failed is refused, and so are the group's later commits to
                # its table, which built on it; the definitions written beside them name files
                # no version will hold, so the rest of the group is built again without them.
                failed: dict[tuple[str, str], BaseException] = {}
                for (c, _), err in zip(staged_of, results, strict=True):
                    if c.key in failed:
                        refused.append((c, CommitFailedException(
                            f"{c.what}: an earlier commit to the table in its group failed: {failed[c.key]}")))
                    elif err is not None:
                        failed[c.key] = err
                        refused.append((c, err))
                for c, err in refused:
                    c.error, c.settled = err, True
                raise _Rebuild(f"{len(failed)} table(s) of the group could not have their metadata written")
            for c, staged in staged_of:
                remember(staged.metadata_location, staged.metadata)
                pending[c.key] = staged.metadata_location
                landed.append((c, commit_response(staged.metadata, staged.metadata_location)))
            for ns, t, _ in alters:
                actions[(ns, t)] = "alter"
            for (ns, t), location in pending.items():
                if (ns, t) not in actions:
                    actions[(ns, t)] = "create"
                    txn.create_table(ns, t, metadata_location=location, table_type="managed")
        except BaseException:
            if not txn.closed:
                txn.rollback()
            catalog.delete_unreferenced(written)
            if seqs is not None:
                wait([seqs])  # their numbers are gaps: nothing is written at them
            raise
        version: int | None = None
        append: Callable[[], None] | None = None
        if pending:
            first = next(c for c, r in landed if c.key in pending)
            others = [c for c, _ in landed if c is not first and c.key in pending]
            lh = catalog.lakehouse
            real = lh.auditor
            group_auditor = _GroupAuditor(real, self, others, len(landed), actions, seqs)
            lh.auditor = group_auditor  # type: ignore[assignment]
            try:
                version = txn.commit(command=f"{first.catalog.audit_command} {first.what}",
                                     arguments=self._arguments(first, len(landed)))
            except (TransactionConflictError, TransactionExpiredError):
                catalog.delete_unreferenced(written)
                raise
            except UnknownOutcomeError as e:
                for c, _ in landed:
                    c.error, c.settled = CommitStateUnknownException(f"{c.what}: {e}"), True
                for c, err in refused:
                    c.error, c.settled = err, True
                return None
            finally:
                lh.auditor = real
            append = group_auditor.append
        else:
            txn.rollback()
            if seqs is not None:
                wait([seqs])
        for c, resp in landed:
            c.response, c.version, c.settled = resp, version, True
        for c, err in refused:
            c.error, c.settled = err, True
        return append

    def _take_seqs(self, catalog: TrinityLakeCatalog, txn_id: str, landed: list[tuple[_Commit, CommitTableResponse]],
                   staged_of: list[tuple[_Commit, StagedTable]]) -> Future[list[int]] | None:
        """Start taking the txn_seqs of the group's audit rows, while its metadata and
        definition files are written (on an object store: the marker round trips off the root's
        path). One for each commit to a table that changes (the most rows `audit_rows` makes: a
        commit whose file then fails leaves its number a gap, as the allocator's losers do).
        Taken after the transaction's base root was read, as the transaction's own is."""
        auditor = catalog.lakehouse.auditor
        changing = {c.key for c, _ in staged_of}
        count = sum(1 for c, _ in landed if c.key in changing) + len(staged_of)
        if not count or not auditor.enabled:
            return None
        auditor.ensure()
        seq = auditor.control.seq
        seq.hint_executor = self._hints  # never read by this allocator: off the group's path
        return self._io.submit(seq.allocate_many, txn_id, count)

    @staticmethod
    def _arguments(c: _Commit, size: int) -> dict[str, str]:
        return {"catalog": c.catalog.name, "operation": c.what, **c.catalog.audit_arguments,
                "group_commits": str(size)}

    def audit_rows(self, auditor: Auditor, txn_id: str, version: int, others: list[_Commit], size: int,
                   actions: dict[tuple[str, str], str], isolation: str | None, attempts: int | None,
                   seqs: list[int] | None = None) -> list[AuditRecord]:
        """One ``committed`` row for each commit of the group but the first (whose row the
        transaction makes), each at a txn_seq of its own, naming the version it landed in."""
        if not others or not auditor.enabled:
            return []
        auditor.ensure()
        rows = []
        if seqs is None or len(seqs) != len(others):
            seqs = auditor.control.seq.allocate_many(txn_id, len(others))
        for c, seq in zip(others, seqs, strict=True):
            rows.append(auditor.record(
                txn_seq=seq, record_type="committed", txn_id=txn_id,
                command=f"{c.catalog.audit_command} {c.what}", arguments=self._arguments(c, size),
                started_at=c.started, ended_at=datetime.now(UTC), version_before=version - 1,
                version_after=version, changes=[f"{actions.get(c.key, 'alter')} table {c.key[0]}.{c.key[1]}"],
                isolation=isolation, attempts=attempts))
        return rows


class _GroupAuditor:
    """The lakehouse's auditor while a group's transaction commits: the transaction's own
    ``committed`` row and the group's other rows go to the control table in one append (one
    Delta commit per version, not one per client commit). Everything else is the real one's."""

    def __init__(self, real: Auditor, committer: GroupCommitter, others: list[_Commit], size: int,
                 actions: dict[tuple[str, str], str], taking: Future[list[int]] | None = None):
        self._real, self._committer, self._others, self._size, self._actions = real, committer, others, size, actions
        self._rows: list[AuditRecord] = []
        self._version: int | None = None
        self._version_before: int | None = None
        self._spare: list[int] | None = None  # the other commits' txn_seqs, taken with the transaction's
        self._taking = taking  # those numbers being taken already (`GroupCommitter._take_seqs`)

    def allocate_seq(self, txn_id: str, create: bool = False) -> int | None:
        """The transaction's txn_seq and, in the same allocation, those of the group's other
        commits (one marker round, one hint write: on an object store, six round trips saved).
        The first attempt's come from the allocation started while the group's files were
        written; an attempt after a lost root race (rebased onto a newer root) takes new ones
        after that root, so txn_seq order stays version order."""
        real = self._real
        if not real.enabled:
            return None
        real.ensure()
        need = 1 + len(self._others)
        taking, self._taking = self._taking, None
        seqs: list[int] | None = None
        if taking is not None:
            try:
                seqs = taking.result()
            except Exception as e:  # noqa: BLE001 - taken again below, where its error is the commit's
                log.info("txn_seqs taken beside the group's files failed (%s); taking them now", e)
        if seqs is None or len(seqs) < need:
            seqs = real.control.seq.allocate_many(txn_id, need)
        self._spare = seqs[1:need]
        return seqs[0]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def committed(self, seq: int | None, txn_id: str, command: str, arguments: dict, started: datetime,
                  version_before: int | None, version_after: int, changes: list[str], *,
                  isolation: str | None = None, attempts: int | None = None,
                  metrics: dict[str, float] | None = None) -> None:
        real = self._real
        if seq is None:
            return
        try:
            rows = [real.record(txn_seq=seq, record_type="committed", txn_id=txn_id, command=command,
                                arguments=arguments, started_at=started, ended_at=datetime.now(UTC),
                                version_before=version_before, version_after=version_after, changes=changes,
                                isolation=isolation, attempts=attempts, metrics=metrics or {})]
            rows += self._committer.audit_rows(real, txn_id, version_after, self._others, self._size, self._actions,
                                               isolation, attempts, self._spare)
        except Exception as e:  # noqa: BLE001 - never fail a committed version over its audit rows
            log.warning("audit rows of group commit version %s not made: %s", version_after, e)
            return
        # their txn_seqs taken now, in version order; appended by `append` once the lead is handed on
        self._rows, self._version, self._version_before = rows, version_after, version_before

    def append(self) -> None:
        """Append the group's rows (with those of the other groups waiting then: one control-table
        write), as Auditor.committed does its one."""
        if self._rows and self._version is not None:
            self._committer.audit.append(self._real, self._rows, self._version, self._version_before)
        else:
            self._committer.audit.cancel()


class _Rebuild(Exception):  # noqa: N818 - a signal to `GroupCommitter._write`
    """Some of a group's commits were refused after its files were written: build it again."""


def _written(staged_of: list[tuple[_Commit, StagedTable]], files: Future[list[BaseException | None]]) -> list[str]:
    """The metadata files `files` wrote (waiting for it): to delete when the group fails."""
    try:
        results = files.result()
    except Exception:  # noqa: BLE001 - none known written; what was is the orphan job's
        return []
    return [staged.metadata_location for (_, staged), err in zip(staged_of, results, strict=True) if err is None]
