"""Sizes of many local files, taken by a second process while the caller goes on (the walk reads
nodes meanwhile): a fast path of local storage, asked through `Storage.sizes_in_background`.

A walk that reports sizes must ``stat`` every definition file it reaches: 1.1M of them took
7-12 s after the 24-36 s of node reads on our 2-core machines, one after the other, in one
interpreter (threads beside the node reads only convoy on the interpreter lock). A child
process (`stat_worker`, standard library only) takes the keys as each level finds them and
answers with all the sizes at the end, so the ``stat``s run on the other core meanwhile.

Only for local, relative keys on a storage without a fault injector hooked in; anything else
(a key that is a URI or an absolute path, a child that cannot start or dies) makes `finish`
answer None and the caller sizes in process as before. The answer lines up with the keys in
the order they were fed.
"""

from __future__ import annotations

import logging
import os
import queue
import subprocess
import sys
import threading
from array import array
from collections.abc import Sequence
from typing import IO, Protocol


class _Rooted(Protocol):
    """A storage, as far as this module needs it: the local folder of its root, or None."""

    def path_on_disk(self, path: str) -> str | None: ...

log = logging.getLogger(__name__)

_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stat_worker.py")
#: Keys held back before the child starts: smaller walks size in process (a start costs ~30 ms,
#: 50k in-process ``stat``s about 0.5 s, which the child would save only in part).
START_AFTER_KEYS = 50_000


class BackgroundSizes:
    """Feed keys with `add`, take their sizes (in feeding order) with `finish`; `close` always."""

    def __init__(self, storage: _Rooted, start_after: int | None = None):
        self._root = storage.path_on_disk("")
        self._start_after = START_AFTER_KEYS if start_after is None else start_after
        self._pending: list[str] = []
        self._fed = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed = self._root is None
        self._out: list[bytes] = []
        self._reader: threading.Thread | None = None
        # Blocks of keys go to the child from a thread of their own: the child reads as it
        # stats, so writing from the caller made each `add` wait for the stats of its keys (2.6
        # of a 1.1M-file walk's 26 s). None ends the queue.
        self._blocks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._write_error: str | None = None

    @property
    def active(self) -> bool:
        """Whether keys still go to a child (False: the caller sizes in process)."""
        return not self._failed

    def add(self, keys: list[str]) -> None:
        """Keys met for the first time, in the walk's order."""
        if self._failed or not keys:
            return
        if self._proc is None:
            self._pending.extend(keys)
            if len(self._pending) >= self._start_after:
                keys, self._pending = self._pending, []
                self._start()
                if self._failed:
                    return
            else:
                return
        self._send(keys)

    def _start(self) -> None:
        try:
            self._proc = subprocess.Popen([sys.executable, "-I", _WORKER, str(self._root)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, close_fds=True)
        except OSError as e:
            log.debug("sizing in process: no stat worker (%s)", e)
            self._failed = True
            return
        proc = self._proc
        assert proc.stdout is not None
        # Read the answer as it comes, so a full pipe never blocks the child at the end.
        self._reader = threading.Thread(target=lambda: self._out.append(proc.stdout.read()),  # type: ignore[union-attr]
                                        name="stat-worker-reader", daemon=True)
        self._reader.start()
        self._writer = threading.Thread(target=self._write_blocks, args=(proc.stdin,), name="stat-worker-writer",
                                        daemon=True)
        self._writer.start()

    def _write_blocks(self, stdin: IO[bytes]) -> None:
        while (block := self._blocks.get()) is not None:
            if self._write_error is None:
                try:
                    stdin.write(block)
                except (OSError, ValueError) as e:  # the child is gone: `finish` says so
                    self._write_error = str(e)

    def _send(self, keys: Sequence[str]) -> None:
        block = "\n".join(keys) + "\n"
        # One line per key, each relative: a newline inside a key, a URI (a colon) or an
        # absolute path would put the answers out of line or stat the wrong file.
        if block.count("\n") != len(keys) or ":" in block or block.startswith("/") or "\n/" in block:
            self._abandon("a key that is not a plain relative path")
            return
        self._blocks.put(block.encode("utf-8", "surrogateescape"))
        self._fed += len(keys)

    def _abandon(self, why: str) -> None:
        log.debug("sizing in process: %s", why)
        self._failed = True
        self.close()

    def finish(self, n: int) -> array[int] | None:
        """Sizes of the `n` keys fed so far (-1 missing, -2 ask the storage again), or None: 64-bit
        integers in native order, one buffer (an Arrow array of them costs no copy)."""
        if self._failed:
            return None
        if self._proc is None:  # never started: a small walk
            return None
        proc = self._proc
        try:
            assert proc.stdin is not None
            self._stop_writer()
            if self._write_error is not None:
                raise OSError(self._write_error)
            proc.stdin.close()
            if self._reader is not None:
                self._reader.join()
            rc = proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
        except OSError as e:
            self._abandon(f"the stat worker failed ({e})")
            return None
        data = b"".join(self._out)
        sizes = array("q")
        sizes.frombytes(data[: len(data) - len(data) % 8])
        if sys.byteorder != "little":
            sizes.byteswap()
        self._proc = None
        if rc != 0 or len(sizes) != n or self._fed != n:
            log.warning("stat worker answered %d sizes for %d keys (exit %s); sizing in process", len(sizes), n, rc)
            self._failed = True
            return None
        return sizes

    def _stop_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            self._blocks.put(None)
            writer.join()

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self._stop_writer()  # its next write fails at once: the child is gone
        if self._reader is not None:
            self._reader.join()  # the child is gone: its stdout is at end of file
        for f in (proc.stdin, proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def __enter__(self) -> BackgroundSizes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
