"""The audit rows of a catalog server's groups (rest_catalog/group_commit.py), appended
together: one control-table write for the groups whose roots exist while the previous one is
written."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trinitylake.control import AuditRecord
    from trinitylake.lakehouse.audit import Auditor

#: How many groups being written an audit append about to start waits for (`AuditBatch.append`).
AUDIT_WAIT_GROUPS = 2


@dataclass
class _Rows:
    rows: list[AuditRecord]
    version: int
    version_before: int | None
    done: bool = False


class AuditBatch:
    """The audit rows of the groups whose roots exist, appended together: while one append is
    being written, the rows of the groups that finish meanwhile wait and go into the next one.

    An append costs the same whatever its rows (a Delta commit: about 20 ms of CPU here), so
    one that is about to start while a group is being written waits for that group's rows
    (`expect`), for at most `wait_groups` groups: the writers whose commits are in it would
    otherwise wait for the next append anyway. No timer: a lone writer's append starts at once.

    It waits only while a group's root takes no longer than an append (moving averages of
    both). On an object store the other way round holds: at 20 ms a round trip, a root took
    300 ms and an append 200 ms, and a group of 31 commits waiting for the root of the one
    straggler behind it answered its writers 600 ms after its own root instead of 250 ms.
    """

    def __init__(self, wait_groups: int = AUDIT_WAIT_GROUPS) -> None:
        self._cond = threading.Condition()
        self._queue: list[_Rows] = []
        self._writing = False
        self._expected = 0  # groups being written whose rows (or `cancel`) will come
        self.wait_groups = wait_groups
        #: Moving averages of a group's root (from its taking to its root) and of an append, in
        #: seconds (None: none measured yet).
        self.root_s: float | None = None
        self.append_s: float | None = None
        #: Appends written, and the rows in them (for tests and the benchmark).
        self.appends = 0
        self.rows = 0
        #: The work after each append (`_settle`), one at a time, in order.
        self._after = ThreadPoolExecutor(1, thread_name_prefix="audit-settle")

    def expect(self) -> None:
        """A group is being written: its rows (`append`) or `cancel` follows."""
        with self._cond:
            self._expected += 1

    def rooted(self, seconds: float) -> None:
        """A group's root took `seconds` from the group's taking."""
        with self._cond:
            self.root_s = moving(self.root_s, seconds)

    def _worth_waiting(self) -> bool:
        return self.root_s is None or self.append_s is None or self.root_s <= self.append_s

    def cancel(self) -> None:
        """An expected group brings no rows (it failed, or auditing is off)."""
        with self._cond:
            self._expected -= 1
            self._cond.notify_all()

    def append(self, auditor: Auditor, rows: list[AuditRecord], version: int, version_before: int | None) -> None:
        mine = _Rows(rows, version, version_before)
        with self._cond:
            self._queue.append(mine)
            self._expected -= 1
            self._cond.notify_all()
            while not mine.done and self._writing:
                self._cond.wait()
            if mine.done:
                return
            self._writing = True
            arrived = len(self._queue)
            while self._expected > 0 and len(self._queue) - arrived < self.wait_groups and self._worth_waiting():
                self._cond.wait()
            batch, self._queue = self._queue, []
            self.appends += 1
            self.rows += sum(len(b.rows) for b in batch)
        began = time.monotonic()
        appended = False
        try:
            appended = auditor.append([r for b in batch for r in b.rows], checkpoint=False)
        finally:
            with self._cond:
                self.append_s = moving(self.append_s, time.monotonic() - began)
                for b in batch:
                    b.done = True
                self._writing = False
                self._cond.notify_all()
        if appended:
            self._after.submit(self._settle, auditor, batch)

    @staticmethod
    def _settle(auditor: Auditor, batch: list[_Rows]) -> None:
        """What follows an append, once its writers are answered: on an object store the
        audited markers, the check below them and a due checkpoint are 2 round trips and
        sometimes a few hundred ms, none of which the rows' writers need to wait for. In
        version order, one batch after another (the check below a version finds the markers
        of the batches before it written)."""
        for b in batch:
            auditor.audited(b.version, b.version_before)
        auditor.control.write_due_checkpoint()

    def settled(self) -> None:
        """Wait for the work of the appends so far to be done (for tests)."""
        self._after.submit(lambda: None).result()


def moving(average: float | None, sample: float) -> float:
    return sample if average is None else 0.8 * average + 0.2 * sample
