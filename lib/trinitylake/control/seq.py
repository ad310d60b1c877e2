"""Transaction sequence numbers (`txn_seq`) allocated with the storage's commit primitive.

A sequence number ``n`` is taken by exclusively creating the marker file
``<prefix>/<n as 20 zero-padded digits>`` (``O_EXCL``/hard link on local disk,
``If-None-Match: *`` on S3) holding the transaction id. Whoever creates the marker owns the
number; losers try ``n + 1``. No Delta round trip and no lock service is needed, and the order
is the order in which allocations *completed*: an allocation that returned before another one
started always got a smaller number (see :meth:`SeqAllocator.allocate`).

Markers are contiguous from 1 up to the newest one, except the old ones removed by
:meth:`SeqAllocator.prune`. The hint file ``<prefix>/_hint`` (best effort, may be stale or
missing) only saves probing; it is never trusted without checking that its marker exists.
"""

from __future__ import annotations

import re
from concurrent.futures import Executor

from trinitylake.errors import ControlTableError, UnknownOutcomeError
from trinitylake.storage import Storage
from trinitylake.thread_pools import ForkSafePool

SEQ_DIGITS = 20
#: Probes an allocator's own last marker while the next ones are created (`_take_above_own`).
_PROBES = ForkSafePool(2, "txn-seq-probe")
_MARKER_RE = re.compile(rf"^\d{{{SEQ_DIGITS}}}$")


class SeqAllocator:
    """Allocates strictly increasing, unique ``txn_seq`` values under `prefix` of `storage`.

    Args:
        storage: a storage rooted at the control location (e.g. ``<lakehouse>/_control``).
        prefix: directory of the marker files, relative to the storage root. It starts with
            ``_`` so that Delta readers and vacuum ignore it.
    """

    def __init__(self, storage: Storage, prefix: str = "_seq"):
        self.storage = storage
        self.prefix = prefix.strip("/")
        #: The number this allocator took last (0: none yet): where the next allocation looks
        #: first, before the hint.
        self._took = 0
        #: Where the hint is written when set, instead of in the allocating thread: for a
        #: long-lived allocator that never starts from the hint (the catalog server's), whose
        #: allocations would otherwise wait a round trip for it on an object store.
        self.hint_executor: Executor | None = None

    def __repr__(self) -> str:
        return f"SeqAllocator({self.storage.uri(self.prefix)!r})"

    # ---- paths ------------------------------------------------------------------------
    def marker_path(self, n: int) -> str:
        return f"{self.prefix}/{n:0{SEQ_DIGITS}d}"

    @property
    def hint_path(self) -> str:
        return f"{self.prefix}/_hint"

    # ---- public API -------------------------------------------------------------------
    def allocate(self, txn_id: str, *, hint: bool = True) -> int:
        """Atomically take the next sequence number for `txn_id` and return it.

        Numbers are unique and strictly increasing in allocation order across processes and
        machines. Gaps are possible (a number whose marker was claimed while a concurrent
        prune ran is abandoned), so never assume ``n - 1`` was a transaction.

        Raises:
            ValueError: `txn_id` is empty (markers are never empty files; see ENVIRONMENT.md).
        """
        if not txn_id:
            raise ValueError("txn_id must be a non-empty string")
        n = self._take_from(txn_id.encode("utf-8"), *self._first_free())
        if hint:
            self._write_hint(n)
        self._took = max(self._took, n)
        return n

    def _take_from(self, data: bytes, n: int, above_present: bool) -> int:
        """Take the first free number from `n` on (`above_present`: the marker of ``n - 1`` was
        just seen present)."""
        while True:
            try:
                self.storage.create_exclusive(self.marker_path(n), data)
            except (FileExistsError, UnknownOutcomeError):
                # Taken, or possibly ours but unreadable: skipping it only leaves a gap.
                n, above_present = n + 1, False
                continue
            # Markers are contiguous up to the newest, so the previous one exists unless a
            # prune deleted it. A missing predecessor means our (stale) starting point lay in
            # the pruned region and `n` may be a number handed out long ago: abandon it. (Not
            # asked when `n - 1` was seen present just before: a prune removes the oldest
            # markers first, so nothing above a present one was ever pruned.)
            if n > 1 and not above_present and not self.storage.exists(self.marker_path(n - 1)):
                n, above_present = self._probe_free(self._listed_max()), False
                continue
            return n

    def allocate_many(self, txn_id: str, count: int) -> list[int]:
        """`count` sequence numbers for `txn_id`, increasing: each the first free number after
        the previous (another allocator may take some in between), the hint written once at
        the end. Right above this allocator's own last number all are created together, its own
        last marker probed beside them (`_take_above_own`: on an object store one round trip in
        all); from a start found by the hint, the first is taken as `allocate` takes one. For the audit rows of a group of
        commits (the catalog server's group commit): one marker file each, created in flight
        together, no probing or hint write between them.
        """
        if count <= 0:
            return []
        if not txn_id:
            raise ValueError("txn_id must be a non-empty string")
        data = txn_id.encode("utf-8")
        out = self._take_above_own(data, count)
        if out:
            n = out[-1] + 1
        else:
            n, above_present = self._first_free()
            if not above_present:
                # a start found through the hint or a listing: the first one as `allocate`
                # takes it, with its predecessor check; the rest from there on
                out.append(self._take_from(data, n, False))
                n = out[0] + 1
            # else all of them in flight together from the first free one on: nothing at or
            # above a present marker was ever pruned (one round trip fewer on an object store)
        while len(out) < count:
            # the rest in flight together (on an object store, one round trip instead of one each)
            numbers = range(n, n + count - len(out))
            out += self._create(numbers, data)
            n = numbers.stop
        self._write_hint(out[-1])
        self._took = max(self._took, out[-1])
        return out

    def _take_above_own(self, data: bytes, count: int) -> list[int]:
        """Up to `count` numbers right above the one this allocator took last, in one round trip:
        their markers created in flight while its own last marker is probed (empty: it took none
        yet, the first was taken by another allocator, or a prune removed its marker).

        The same guarantee as probing first: a prune removes the oldest markers first, so while
        its own marker is present nothing above it was pruned, and a free number above it was
        never handed out. When the marker is gone, the ones just made may lie in the pruned
        region: abandoned (gaps), and the allocation starts again by the hint."""
        took = self._took
        if took <= 0:
            return []
        probe = _PROBES.get().submit(self.storage.exists, self.marker_path(took))
        try:
            got = self._create(range(took + 1, took + 1 + count), data)
        finally:
            present = probe.result()
        if not present or not got or got[0] != took + 1:
            # pruned below, or others went on from where it stopped (how far is the hint's to
            # say): what it made is left as gaps
            return []
        return got

    def _create(self, numbers: range, data: bytes) -> list[int]:
        """The `numbers` whose markers this call created, all in flight together (on an object
        store one round trip for all)."""
        made = self.storage.create_exclusive_many([(self.marker_path(m), data) for m in numbers])
        out = []
        for m, r in zip(numbers, made, strict=True):
            if isinstance(r, FileExistsError | UnknownOutcomeError):
                continue  # taken by another allocator, or possibly ours but unknown: a gap
            if isinstance(r, BaseException):
                raise r
            out.append(m)
        return out

    def last(self) -> int:
        """The newest allocated sequence number, 0 when none was ever allocated."""
        return self._probe_free(self._start()) - 1

    def owner(self, n: int) -> str | None:
        """The txn_id that allocated `n`, or None when its marker is gone (pruned) or never existed."""
        try:
            return self.storage.read(self.marker_path(n)).decode("utf-8")
        except FileNotFoundError:
            return None

    def prune(self, keep_last: int = 1000) -> int:
        """Delete old marker files, keeping at least the newest `keep_last` (at least 1).

        Returns:
            The number of marker files deleted.
        """
        keep_last = max(1, int(keep_last))
        numbers = self._listed_numbers()
        if len(numbers) <= keep_last:
            return 0
        numbers.sort()
        # Point the hint at the newest marker first, so allocators skip the pruned region.
        self._write_hint_now(numbers[-1])
        doomed = numbers[: len(numbers) - keep_last]
        failures = self.storage.delete(self.marker_path(n) for n in doomed)
        if failures:
            path, msg = failures[0]
            raise ControlTableError(
                f"could not delete {len(failures)} txn_seq marker(s) under {self.storage.uri(self.prefix)}, "
                f"e.g. {path}: {msg}"
            )
        return len(doomed)

    # ---- internals --------------------------------------------------------------------
    def _first_free(self) -> tuple[int, bool]:
        """Where an allocation tries first, and whether the marker below it was just seen: above
        the number this allocator took last when its marker is still there and the next one is
        free (both probed together, no read of the hint: on an object store one round trip
        instead of three), else above the hint's or the listing's newest marker."""
        took = self._took
        if took > 0:
            here, above = self.storage.exists_many([self.marker_path(took), self.marker_path(took + 1)])
            if here and not above:
                return took + 1, True
        # Others allocated meanwhile (the hint jumps over their numbers), or a prune took ours.
        return self._probe_free(self._start()), False

    def _start(self) -> int:
        """A sequence number known to be allocated and still present (0: none)."""
        hint = self._read_hint()
        if hint > 0 and self.storage.exists(self.marker_path(hint)):
            return hint
        return self._listed_max()

    def _probe_free(self, start: int) -> int:
        """First number above `start` whose marker does not exist."""
        n = start + 1
        while self.storage.exists(self.marker_path(n)):
            n += 1
        return n

    def _read_hint(self) -> int:
        try:
            return max(0, int(self.storage.read(self.hint_path).decode("ascii").strip()))
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return 0

    def _write_hint(self, n: int) -> None:
        if self.hint_executor is not None:
            self.hint_executor.submit(self._write_hint_now, n)
        else:
            self._write_hint_now(n)

    def _write_hint_now(self, n: int) -> None:
        try:
            self.storage.write(self.hint_path, str(n).encode("ascii"))
        except Exception:  # noqa: BLE001 - the hint is best effort by design
            pass

    def _listed_numbers(self) -> list[int]:
        out = []
        for fi in self.storage.list(self.prefix, recursive=False):
            name = fi.path.rsplit("/", 1)[-1]
            if _MARKER_RE.match(name):
                out.append(int(name))
        return out

    def _listed_max(self) -> int:
        return max(self._listed_numbers(), default=0)
