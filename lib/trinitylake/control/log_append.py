"""Blind appends to the control table's Delta log, written here: the Parquet data file, then the
commit file, created with the store's exclusive create (``If-None-Match: *`` on S3, the same
conditional put delta-rs commits with, see `delta_options`).

Why not delta-rs for these. Its write rebuilds the table's snapshot after every commit: it lists
the log again and reads the latest checkpoint and every commit since (delta-rs 1.6 has no way to
commit without it). Measured through the catalog server on an object store at 20 ms a round
trip, an append took 6 requests one after another and about 200 ms, and every commit's answer
waits for one. A blind append needs two round trips: the data file (and a listing of the log
beside it), then the commit. Everything else stays
with delta-rs: creating the table, evolving its schema, checkpoints, compaction, redaction,
vacuum, every read, and any append to a table whose protocol asks more of a writer than this
one does (`LogAppender.of`).

The Delta rules an append follows (PROTOCOL.md, "Commit Provenance", "Add File", and the
conflict rules of optimistic concurrency):
* the commit is the next version's ``<20 digits>.json``, created only when absent, and only when
  the log holds nothing at or above that version: the log is listed from the last version
  this appender knows, while the data file is written (a version's commit file may be gone
  while its checkpoint stays: a log clean-up, or `tlake control redact`, deletes the commit
  files a checkpoint covers);
* when other writers' commits are there, each since the last version this appender knows is
  read: a blind append conflicts only with a change of the table's protocol or metadata (then
  the append is handed to delta-rs, which reloads the table), else it tries the next version.
  A checkpoint, a gap or a compacted log file there hands it to delta-rs too;
* the data file is written first, under a new name, and referenced only by the commit: one that
  no commit names (a failed append) is what Delta's vacuum removes.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from concurrent.futures import wait
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trinitylake.errors import ControlTableError, UnknownOutcomeError
from trinitylake.thread_pools import ForkSafePool

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from trinitylake.storage import Storage

_LOG = "_delta_log"
_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
#: Any entry of the log named by a version: commits, checkpoints (classic, multi-part, v2),
#: compacted log files.
_ENTRY_RE = re.compile(r"^(\d{20})\.")
#: Versions another writer may be ahead before the append is handed to delta-rs (which starts
#: from a checkpoint instead of reading every commit since).
MAX_BEHIND = 20
_ATTEMPTS = 25
#: Writer versions whose rules a blind append of our rows meets: 1, and 2 (appendOnly, which an
#: append keeps, and column invariants, which `of` refuses when the schema declares any).
_MAX_WRITER = 2
#: Lists a log while an append's data file is written.
_LISTER = ForkSafePool(2, "delta-log-list")


class DeltaChanged(Exception):  # noqa: N818 - a signal, handled by the caller
    """The table's protocol or metadata changed, or the appender fell far behind: append through
    delta-rs instead."""


def commit_path(version: int) -> str:
    return f"{_LOG}/{version:020d}.json"


class LogAppender:
    """Appends to the Delta table rooted at `storage` whose latest known version is `version`
    and whose schema is `schema` (see the module doc)."""

    def __init__(self, storage: Storage, version: int, schema: pa.Schema, client: str = "trinitylake"):
        self.storage = storage
        self.version = version
        self.schema = schema
        self.client = client

    @classmethod
    def of(cls, storage: Storage, dt: DeltaTable) -> LogAppender | None:
        """An appender continuing from `dt` (as delta-rs last read or wrote it), or None when the
        table asks more of a writer than a plain blind append (reader version over 1, writer
        version over 2 or table features, partitions, column invariants)."""
        protocol = dt.protocol()
        if protocol.min_reader_version > 1 or protocol.min_writer_version > _MAX_WRITER:
            return None
        if dt.metadata().partition_columns:
            return None
        if any("delta.invariants" in (f.metadata or {}) for f in dt.schema().fields):
            return None
        return cls(storage, dt.version(), pa.schema(dt.schema().to_arrow()))

    def append(self, data: pa.Table) -> int:
        """Append `data` (in this table's schema) as one commit; returns the commit's version.
        Raises DeltaChanged (nothing left behind) when delta-rs must do it."""
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        sink = pa.BufferOutputStream()
        same = data.schema.equals(self.schema, check_metadata=False)
        pq.write_table(data if same else data.cast(self.schema), sink, compression="snappy")
        body = sink.getvalue().to_pybytes()
        listing = _LISTER.get().submit(self._entries)  # in flight beside the data file's write
        try:
            self.storage.write(name, body)
            version = self._commit_at(self._commit(name, len(body), data), listing.result())
        except BaseException:
            wait([listing])
            self._forget(name)
            raise
        self.version = version
        return version

    # ---- internals --------------------------------------------------------------------------
    def _commit_at(self, commit: bytes, entries: list[tuple[int, bool]]) -> int:
        v = self.version + 1
        for _ in range(_ATTEMPTS):
            v = self._after_others(v, entries)
            try:
                self.storage.create_exclusive(commit_path(v), commit)
                return v
            except UnknownOutcomeError:
                try:
                    if self.storage.read(commit_path(v)) == commit:
                        return v  # it took effect (the commit names a file no other holds)
                except FileNotFoundError:
                    pass  # it did not
            except FileExistsError:
                pass
            entries = self._entries()
        raise ControlTableError(f"cannot append to the Delta table at {self.storage.uri('')}: "
                                f"{_ATTEMPTS} attempts lost to other writers")

    def _entries(self) -> list[tuple[int, bool]]:
        """The log's entries above the last version this appender knows, as (version, is a
        commit file): listed from that version on (``/`` sorts after every ``<version>.``
        name), so an append costs the same whatever the log holds below."""
        out = []
        for name in self.storage.names_after(_LOG, f"{self.version:020d}/"):
            if m := _ENTRY_RE.match(name):
                out.append((int(m.group(1)), bool(_COMMIT_RE.match(name))))
        return out

    def _after_others(self, v: int, entries: list[tuple[int, bool]]) -> int:
        """The version after the other writers' commits the log holds from `v` on, each read and
        checked (`v` itself when there are none)."""
        ahead = [(n, is_commit) for n, is_commit in entries if n >= v]
        if not ahead:
            return v
        if not all(is_commit for _, is_commit in ahead):
            raise DeltaChanged(f"the log holds a checkpoint or compacted file at or above version {v}")
        versions = sorted(n for n, _ in ahead)
        if versions != list(range(v, v + len(versions))):
            raise DeltaChanged(f"the log's commits from version {v} on are not contiguous: {versions[:5]}")
        if len(versions) > MAX_BEHIND:
            raise DeltaChanged(f"{len(versions)} commits behind")
        read = self.storage.read_many([commit_path(u) for u in versions])  # in flight together
        for u, data in zip(versions, read, strict=True):
            if isinstance(data, BaseException):
                raise data
            for line in data.splitlines():
                action = json.loads(line) if line.strip() else {}
                if "metaData" in action or "protocol" in action:
                    raise DeltaChanged(f"version {u} changed the table's metadata or protocol")
        return versions[-1] + 1

    def _commit(self, name: str, size: int, data: pa.Table) -> bytes:
        now = int(time.time() * 1000)
        info = {"timestamp": now, "operation": "WRITE", "operationParameters": {"mode": "Append"},
                "isBlindAppend": True, "clientVersion": self.client}
        add = {"path": name, "partitionValues": {}, "size": size, "modificationTime": now, "dataChange": True,
               "stats": json.dumps(_stats(data), separators=(",", ":"))}
        return (json.dumps({"commitInfo": info}, separators=(",", ":")) + "\n"
                + json.dumps({"add": add}, separators=(",", ":"))).encode()

    def _forget(self, name: str) -> None:
        try:
            self.storage.delete([name])
        except Exception:  # noqa: BLE001 - a data file no commit names: vacuum's to remove
            pass


def _stats(data: pa.Table) -> dict:
    """Delta file statistics: the row count, and min, max and null count of the integer columns
    (txn_seq above all: readers of the rows since a txn_seq skip older files by it)."""
    out: dict = {"numRecords": data.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for field in data.schema:
        if not pa.types.is_integer(field.type):
            continue
        column = data.column(field.name)
        out["nullCount"][field.name] = column.null_count
        bounds = pc.min_max(column)
        if bounds["min"].is_valid:
            out["minValues"][field.name] = bounds["min"].as_py()
            out["maxValues"][field.name] = bounds["max"].as_py()
    return out
