"""The files of Iceberg tables: metadata JSON, manifest lists, manifests and the data, delete
and statistics files they list, read once per run and cached.

Every location is keyed by its canonical URI (`trinitylake.storage.parse_uri`: scheme aliases
such as ``s3a://`` folded into ``s3://``), so the same file named two ways is one key. Reads go
through `Storage` with the lakehouse's storage options, batched per store (one round trip per
batch on S3 through the I/O engine, a thread pool otherwise).

What a snapshot *reaches* (`TableFiles.reach`): its manifest list, every manifest the list
names, and every data and delete file those manifests list as live (added or existing; a
``deleted`` entry names a file an older snapshot reaches), as Iceberg's reachable-file
cleanup counts them.

**Placement.** Manifest lists and manifests are read where the job's engine places them
(`trinitylake.spark.execution.Execution.distributed`, by the number of files and the store's
measured latency, as the other jobs decide): on the driver, a thread pool for a few tables; on
the executors (``mapInArrow``, Connect-safe) for thousands. Both call the same per-batch
function, `TableFiles.expand` (a batch of ``(uri, what)`` rows in, a batch of
`EXPAND_SCHEMA` rows out: each file's entries, or one row saying it is empty, missing or
unreadable); the executors' wrapper is `expand_task`.

**Unreadable files.** By default a file the live set needs that is missing or cannot be read
raises `TableFileError` (nothing may be deleted). The two table jobs read with `tolerant` on:
such a file is recorded in `TableFiles.broken` and the job names its table as damaged
(`trinitylake.tables_maintenance.damage`).
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from trinitylake import rowsets
from trinitylake.errors import TrinityLakeError, UnsafeOperationError
from trinitylake.iceberg.fileio import TrinityLakeFileIO
from trinitylake.spark.execution import LOCAL, Execution
from trinitylake.storage import Storage, is_absolute, parse_uri, requests
from trinitylake.tables_maintenance.avro_entries import LIST_FIELDS, MANIFEST_FIELDS, read_projected

#: File kinds, as the results count them (Iceberg's ``deleted_*_count`` names).
METADATA, MANIFEST_LIST, MANIFEST = "metadata_files", "manifest_lists", "manifests"
DATA, POSITION_DELETES, EQUALITY_DELETES, STATISTICS = (
    "data_files",
    "position_delete_files",
    "equality_delete_files",
    "statistics_files",
)
KINDS = (DATA, POSITION_DELETES, EQUALITY_DELETES, MANIFEST, MANIFEST_LIST, STATISTICS, METADATA)
#: The kinds only a manifest's contents name: a live set checked against candidates of none of
#: these kinds needs no manifest read.
CONTENT_KINDS = frozenset({DATA, POSITION_DELETES, EQUALITY_DELETES})
_CONTENT_KIND = {0: DATA, 1: POSITION_DELETES, 2: EQUALITY_DELETES}


#: A location that is its own canonical URI (``file:///...`` or ``s3://bucket/...`` of plain
#: characters, no empty, ``.`` or ``..`` segment, no trailing slash), as table files are named.
_CANONICAL = re.compile(r"^(file:///|s3://[a-z0-9][a-z0-9.\-]*/)[A-Za-z0-9._\-=%+/]*[A-Za-z0-9_\-=%+]$")


#: What a file of an `expand` batch is.
LIST_FILE, MANIFEST_FILE = "manifest list", "manifest"
#: `expand` rows: one per entry of each file (``source``, ``path``, ``kind``); a file with no
#: entry has one row of kind `EMPTY`, a missing one `MISSING`, an unreadable one `ERROR` (its
#: message in ``error``). The executors' wrapper adds a `REQUESTS` row (its request counts, JSON).
#: A manifest list's rows also carry each manifest's ``content``, ``seq`` (the sequence number
#: it was added at) and ``live`` entries (`ListEntry`); null where the list does not say.
EXPAND_SCHEMA = pa.schema(
    [("source", pa.string()), ("path", pa.string()), ("kind", pa.string()), ("error", pa.string()),
     ("content", pa.int32()), ("seq", pa.int64()), ("live", pa.int64())]
)
EXPAND_INPUT = pa.schema([("uri", pa.string()), ("what", pa.string())])
EMPTY, MISSING, ERROR, REQUESTS = "", "missing", "error", "requests"
#: The phase of the manifest reads in ``details["execution"]``.
READ_PHASE = "tables.manifests"
#: Files an executor task reads, and files a driver batch holds at once.
FILES_PER_TASK = 512
DRIVER_BATCH = 4096


#: What a manifest list says of one manifest beyond its path: content (0 data, 1 deletes), the
#: sequence number it was added at, its live entries (added + existing); None where unsaid.
ListEntry = tuple[int | None, int | None, int | None]
_NO_FACT: ListEntry = (None, None, None)  # a row that is no manifest list's entry


class TableFileError(UnsafeOperationError):
    """A table file the live set needs cannot be read: the job refuses to delete anything."""


def _branch(value: Any) -> Any:
    """A value of an Avro union as `trinitylake.iceberg.avro_rewrite.read_records` gives it
    (``(branch, value)``), or as is (`read_projected`)."""
    return value[1] if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int) else value


class TableFiles:
    """Reads and caches table files; `lakehouse_storage` resolves relative locations and gives
    the storage options. `io`: the tables' FileIO, whose storages (one per store) serve the reads
    here too (default: one on `lakehouse_storage`); the job's catalog commits through it."""

    def __init__(self, lakehouse_storage: Storage, threads: int = 16, ex: Execution | None = None,
                 io: TrinityLakeFileIO | None = None):
        self.base = lakehouse_storage
        self.threads = threads
        #: Places the manifest reads (driver-only without one).
        self.ex = ex if ex is not None else Execution(LOCAL)
        self.io = io if io is not None else TrinityLakeFileIO.on(lakehouse_storage)
        self._canon: dict[str, str] = {}
        self.metadata: dict[str, dict[str, Any]] = {}
        self.missing: set[str] = set()  # metadata files pointed at that do not exist
        #: With `tolerant`, a file that cannot be read is recorded here (URI -> why) instead of
        #: raising: the jobs then report its table as damaged and protect its files
        #: (`trinitylake.tables_maintenance.damage`); every read of it later finds it here.
        self.tolerant = False
        self.broken: dict[str, str] = {}
        self.lists: dict[str, list[str]] = {}  # manifest list -> manifests
        self.list_entries: dict[str, list[ListEntry]] = {}  # manifest list -> its manifests' `ListEntry`s, in order
        self.manifests: dict[str, dict[str, str]] = {}  # manifest -> live file -> kind
        self.reads = 0

    # ---- locations -------------------------------------------------------------------------
    def canon(self, location: str) -> str:
        """The canonical URI of a location (a relative one is under the lakehouse root).

        Memoized: a run canonicalizes every path of every manifest it reads, and parsing a
        URI checks it character by character."""
        u = self._canon.get(location)
        if u is None:
            if (
                _CANONICAL.match(location)
                and "//" not in location[8:]
                and "/./" not in location
                and "/../" not in location
            ):
                u = location  # already what parse_uri gives (checked character by character there)
            else:
                u = parse_uri(location).uri if is_absolute(location) else self.base.uri(location)
            self._canon[location] = u
        return u

    def store(self, uri: str) -> tuple[Storage, str]:
        """The storage of `uri`'s store (bucket) and `uri`'s path in it (`uri` canonical): the
        FileIO's, one per store."""
        return self.io.store(uri)

    def read_many(self, uris: Iterable[str]) -> dict[str, bytes | BaseException]:
        """The bytes of each of `uris` (or its error), batched per store."""
        by_store: dict[str, tuple[Storage, list[tuple[str, str]]]] = {}
        for u in dict.fromkeys(uris):
            st, rel = self.store(u)
            by_store.setdefault(st.root, (st, []))[1].append((u, rel))
        out: dict[str, bytes | BaseException] = {}
        for st, items in by_store.values():
            rels = [r for _, r in items]
            self.reads += len(rels)
            got = st.read_many(rels)  # the storage keeps their requests in flight together, or reads on threads
            for (u, _), data in zip(items, got, strict=True):
                out[u] = data
        return out

    # ---- metadata ----------------------------------------------------------------------------
    def load_metadata(self, locations: Iterable[str], what: str = "table metadata", missing_ok: bool = False) -> None:
        """Read the metadata JSON files of `locations` not read yet (gzip or plain).

        With `missing_ok`, a file that does not exist is recorded in `missing` (it reaches
        nothing anyone can read) instead of raising. With `tolerant`, nothing raises: a file
        that is missing is in `missing` (and, without `missing_ok`, in `broken`), one that
        cannot be read or parsed in `broken`.

        Raises:
            TableFileError: one of them is missing or unreadable (named with `what`).
        """
        wanted = list(dict.fromkeys(self.canon(x) for x in locations))
        gone_ok = missing_ok or self.tolerant
        todo = [u for u in wanted if u not in self.metadata and u not in self.broken and not (gone_ok and u in self.missing)]
        for u, data in self.read_many(todo).items():
            if isinstance(data, FileNotFoundError) and (missing_ok or self.tolerant):
                self.missing.add(u)
                continue
            if isinstance(data, BaseException):
                msg = f"{what} {u} cannot be read ({type(data).__name__}: {data})"
                if self.tolerant:
                    self.broken[u] = msg
                    continue
                raise TableFileError(f"{msg}; the files it reaches cannot be enumerated") from data
            try:
                self.metadata[u] = _metadata_doc(data)
            except (ValueError, OSError, EOFError) as e:
                if self.tolerant:
                    self.broken[u] = f"{what} {u} is not valid table metadata JSON: {e}"
                    continue
                raise TableFileError(f"{what} {u} is not valid table metadata JSON: {e}") from e
        if missing_ok or not self.tolerant:
            return
        for u in wanted:  # tolerant, but the caller needs them: a missing one is broken too
            if u in self.missing:
                self.broken.setdefault(u, f"{what} {u} cannot be read (FileNotFoundError: missing)")

    def add_metadata(self, location: str, data: bytes) -> None:
        """The metadata file at `location` holds `data` (this run wrote it): kept, never read."""
        self.metadata[self.canon(location)] = _metadata_doc(data)

    def meta(self, location: str) -> dict[str, Any]:
        """The metadata JSON at `location` (read now if not yet).

        Raises:
            TableFileError: it is missing or unreadable (also with `tolerant`).
        """
        u = self.canon(location)
        self.load_metadata([u])
        if u not in self.metadata:
            raise TableFileError(self.broken.get(u) or f"table metadata {u} cannot be read")
        return self.metadata[u]

    # ---- snapshots ---------------------------------------------------------------------------
    def prefetch(
        self,
        wanted: Iterable[tuple[dict[str, Any], Iterable[int] | None]],
        missing_ok: bool = False,
        contents: bool = True,
    ) -> None:
        """Read, in a few batches, the manifest lists and (with `contents`) the manifests of
        every ``(meta, ids)`` (None: every snapshot of `meta`), so the `reach` calls that
        follow find them cached."""
        lists: list[str] = []
        manifests: list[str] = []
        for meta, ids in wanted:
            some = None if ids is None else {int(i) for i in ids}
            for s in meta.get("snapshots") or []:
                if some is None or int(s["snapshot-id"]) in some:
                    if s.get("manifest-list"):
                        lists.append(self.canon(s["manifest-list"]))
                    manifests.extend(self.canon(m) for m in s.get("manifests") or [])
        self._load_lists(lists, missing_ok)
        if contents:
            manifests.extend(m for ml in lists for m in self.lists.get(ml, ()))
            self._load_manifests(manifests, missing_ok)

    def manifests_of(self, meta: dict[str, Any], snapshot_ids: Iterable[int], missing_ok: bool = False) -> set[str]:
        """The manifests the snapshots `snapshot_ids` of `meta` name (their manifest lists read,
        the manifests not)."""
        ids = {int(i) for i in snapshot_ids}
        self.prefetch([(meta, ids)], missing_ok, contents=False)
        out: set[str] = set()
        for s in meta.get("snapshots") or []:
            if int(s["snapshot-id"]) in ids:
                out.update(self.canon(m) for m in s.get("manifests") or [])
                if s.get("manifest-list"):
                    out.update(self.lists.get(self.canon(s["manifest-list"]), ()))
        return out

    def uncovered(self, meta: dict[str, Any], expired: Iterable[int], kept: Iterable[int]) -> set[int]:
        """The `expired` snapshots of `meta` whose manifest lists must be read to know what they
        reach beyond the `kept` ones; the others are covered by a kept descendant, whose list
        (read here, the live set needs it anyway) shows that no manifest with a live entry left
        the table since.

        Covered: expired snapshot E has a kept descendant K (the nearest), and the manifests of
        K's list added at or before E's sequence number hold, by content, exactly E's summary's
        ``total-data-files`` and ``total-delete-files`` live entries. Those manifests were in E's
        list (a manifest is never named again once dropped, and a later one has a later sequence
        number), and their entries are live in E (removing a file rewrites its manifest), so E
        named no other manifest with a live entry: every data and delete file E reaches, K
        reaches. E must be an ``append``: a snapshot that removes files writes a manifest of
        deleted entries only, which the next snapshot drops (Iceberg's and PyIceberg's writers
        carry a manifest forward only while it has a live entry), so appends name none. No file
        is ever deleted on the strength of a covered snapshot, only its own manifest list and
        statistics files: a writer that breaks these rules leaves a file for the orphan removal,
        never loses one. Format v1 (no sequence numbers), snapshots without the totals and
        snapshots no kept one descends from are read.
        """
        want = {int(i) for i in expired}
        if not want:
            return set()
        snaps = {int(s["snapshot-id"]): s for s in meta.get("snapshots") or []}
        keep = sorted((k for k in {int(i) for i in kept} if k in snaps), key=lambda k: _seq(snaps[k]) or 0)
        self.prefetch([(meta, keep)], missing_ok=True, contents=False)
        nearest: dict[int, int] = {}  # expired snapshot -> its nearest kept descendant
        seen = set(keep)
        for k in keep:  # oldest first: an ancestor is claimed by the nearest kept snapshot above it
            parent = snaps[k].get("parent-snapshot-id")
            sid = int(parent) if parent is not None else None
            while sid is not None and sid in snaps and sid not in seen:
                seen.add(sid)
                nearest[sid] = k
                parent = snaps[sid].get("parent-snapshot-id")
                sid = int(parent) if parent is not None else None
        return {e for e in want if e not in nearest or not self._covers(snaps[nearest[e]], snaps.get(e))}

    def _covers(self, kept: dict[str, Any], snap: dict[str, Any] | None) -> bool:
        """Whether `kept`'s list shows every manifest with a live entry of its ancestor `snap`
        (see `uncovered`)."""
        if snap is None:
            return False
        seq, summary = _seq(snap), snap.get("summary") or {}
        if summary.get("operation") != "append":
            return False  # it may have written a manifest of deleted entries only, which no later list names
        try:
            totals = (int(summary["total-data-files"]), int(summary["total-delete-files"]))
        except (KeyError, TypeError, ValueError):
            return False
        ml = kept.get("manifest-list")
        entries = self.list_entries.get(self.canon(ml)) if ml else None
        if seq is None or entries is None:
            return False
        live = [0, 0]
        for content, added_at, n in entries:
            if added_at is None:
                return False
            if added_at <= seq:
                if n is None or content not in (0, 1, None):
                    return False
                live[content or 0] += n
        return (live[0], live[1]) == totals

    def named(self, meta: dict[str, Any], snapshot_ids: Iterable[int]) -> dict[str, str]:
        """The files the snapshots `snapshot_ids` of `meta` name themselves, nothing read: their
        manifest lists and statistics files."""
        ids = {int(i) for i in snapshot_ids}
        out = {self.canon(s["manifest-list"]): MANIFEST_LIST
               for s in meta.get("snapshots") or [] if int(s["snapshot-id"]) in ids and s.get("manifest-list")}
        out.update(self.statistics(meta, ids))
        return out

    def reach(
        self, meta: dict[str, Any], snapshot_ids: Iterable[int], missing_ok: bool = False, contents: bool = True
    ) -> dict[str, str]:
        """Every file the snapshots `snapshot_ids` of `meta` reach (URI -> kind), their
        statistics files included. Without `contents`, the manifests are named but not read:
        the data and delete files they list are left out (for a caller that knows none of
        those can be in question).

        With `missing_ok`, a manifest list or manifest that is gone is skipped (an interrupted
        run may have deleted it: it reaches nothing the live set needs); otherwise it raises.

        Raises:
            TableFileError: a manifest list or manifest is missing or unreadable.
        """
        ids = {int(i) for i in snapshot_ids}
        self.prefetch([(meta, ids)], missing_ok, contents)
        out: dict[str, str] = {}
        for s in meta.get("snapshots") or []:
            if int(s["snapshot-id"]) not in ids:
                continue
            manifests = [self.canon(m) for m in s.get("manifests") or []]
            if s.get("manifest-list"):
                ml = self.canon(s["manifest-list"])
                if ml in self.lists:
                    out[ml] = MANIFEST_LIST
                    manifests.extend(self.lists[ml])
            for m in manifests:
                if not contents:
                    out[m] = MANIFEST
                elif m in self.manifests:
                    out[m] = MANIFEST
                    out.update(self.manifests[m])
        out.update(self.statistics(meta, ids))
        return out

    def statistics(self, meta: dict[str, Any], snapshot_ids: set[int]) -> dict[str, str]:
        """Statistics and partition statistics files of `snapshot_ids`."""
        out: dict[str, str] = {}
        for k in ("statistics", "partition-statistics"):
            for s in meta.get(k) or []:
                if int(s.get("snapshot-id", -1)) in snapshot_ids and s.get("statistics-path"):
                    out[self.canon(s["statistics-path"])] = STATISTICS
        return out

    def _load_lists(self, uris: list[str], missing_ok: bool) -> None:
        todo = [u for u in dict.fromkeys(uris) if u not in self.lists and u not in self.broken]
        details: dict[str, list[ListEntry]] = {}
        for u, entries in self._read_placed(todo, LIST_FILE, missing_ok, details).items():
            self.lists[u] = list(entries)
            self.list_entries[u] = details.get(u, [])

    def _load_manifests(self, uris: list[str], missing_ok: bool) -> None:
        todo = [u for u in dict.fromkeys(uris) if u not in self.manifests and u not in self.broken]
        self.manifests.update(self._read_placed(todo, MANIFEST_FILE, missing_ok))

    def _read_placed(self, uris: list[str], what: str, missing_ok: bool,
                     details: dict[str, list[ListEntry]] | None = None) -> dict[str, dict[str, str]]:
        """The entries of each of `uris` (files of kind `what`), read on the driver or on the
        executors as the engine places them; a missing file (with `missing_ok`) is left out.
        `details`: filled with each manifest list's `ListEntry`s.

        Raises:
            TableFileError: a file is unreadable, or missing without `missing_ok`.
        """
        n = len(uris)
        if n == 0:
            return {}
        ex = self.ex
        source = pa.table({"uri": pa.array(uris, pa.string()), "what": pa.array([what] * n, pa.string())})
        step = rowsets.place(ex, n, storage=self.base, requests_per_item=1.0, phase=READ_PHASE)
        if step.distributed:
            parts = ex.partitions(n, FILES_PER_TASK)
            with step.phase(READ_PHASE, n, f"read {n} table {what}s ({parts} tasks)"), step.executor_failures(
                    f"the Spark job reading {n} table {what}s (first: {uris[0]})", "nothing was deleted, run again"):
                task = functools.partial(expand_task, self.base, ex.limits.threads)
                batches = ex.map_arrow(source, task, EXPAND_SCHEMA, parts).toArrow().to_batches()
            self.reads += n
        else:
            with step.phase(READ_PHASE, n, f"read {n} table {what}s"):
                batches = [self.expand(b) for b in source.to_batches(max_chunksize=DRIVER_BATCH)]
        out: dict[str, dict[str, str]] = {}
        for b in batches:
            # Only the columns used: a manifest read's fact columns are all null (millions of rows).
            cols = {c: b.column(c).to_pylist() for c in ("source", "path", "kind", "error")}
            if details is not None:
                facts = zip(*(b.column(c).to_pylist() for c in ("content", "seq", "live")), strict=True)
                for src, kind, fact in zip(cols["source"], cols["kind"], facts, strict=True):
                    if kind == MANIFEST:
                        details.setdefault(src, []).append(fact)
            for src, path, kind, err in zip(cols["source"], cols["path"], cols["kind"], cols["error"], strict=True):
                if kind == REQUESTS:
                    ex.add_executor_requests(err or "")
                elif kind == MISSING:
                    if not missing_ok:
                        msg = f"{what} {src} cannot be read (FileNotFoundError: {err})"
                        if self.tolerant:
                            self.broken[src] = msg
                            continue
                        raise TableFileError(f"{msg}; the files it reaches cannot be enumerated")
                elif kind == ERROR:
                    if self.tolerant:
                        self.broken[src] = err or f"{what} {src} cannot be read"
                        continue
                    raise TableFileError(err or f"{what} {src} cannot be read")
                elif kind == EMPTY:
                    out.setdefault(src, {})
                else:
                    out.setdefault(src, {})[path] = kind
        return out

    def expand(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The per-batch function of both placements: read the files of `batch`
        (`EXPAND_INPUT` rows) and return their entries as `EXPAND_SCHEMA` rows: a manifest
        list's manifests (kind `MANIFEST`), a manifest's live data and delete files (their
        kinds; a ``deleted`` entry names a file an older snapshot reaches)."""
        uris = batch.column(0).to_pylist()
        whats = batch.column(1).to_pylist()
        src: list[str] = []
        paths: list[str] = []
        kinds: list[str] = []
        errors: list[str | None] = []
        facts: list[ListEntry] = []

        def row(u: str, p: str, k: str, e: str | None = None, fact: ListEntry = _NO_FACT) -> None:
            src.append(u)
            paths.append(p)
            kinds.append(k)
            errors.append(e)
            facts.append(fact)

        got = self.read_many(uris)
        for u, what in zip(uris, whats, strict=True):
            data = got[u]
            if isinstance(data, FileNotFoundError):
                row(u, "", MISSING, str(data))
                continue
            if isinstance(data, BaseException):
                row(u, "", ERROR, f"{what} {u} cannot be read ({type(data).__name__}: {data}); "
                    "the files it reaches cannot be enumerated")
                continue
            try:
                recs = read_projected(data, LIST_FIELDS if what == LIST_FILE else MANIFEST_FIELDS)
                entries = _list_entries(recs) if what == LIST_FILE else _manifest_entries(recs)
            except (TrinityLakeError, ValueError, KeyError, EOFError, TypeError) as e:
                row(u, "", ERROR, f"{what} {u} is not a readable Avro file: {e}")
                continue
            if not entries:
                row(u, "", EMPTY)
            for raw, kind, fact in entries:
                row(u, self.canon(raw), kind, None, fact)
        if any(f is not _NO_FACT for f in facts):
            content, seq, live = zip(*facts, strict=True)
            fact_cols = [pa.array(content, pa.int32()), pa.array(seq, pa.int64()), pa.array(live, pa.int64())]
        else:  # a batch of manifests: no list facts, three null columns without a Python list each
            fact_cols = [pa.nulls(len(src), pa.int32()), pa.nulls(len(src), pa.int64()), pa.nulls(len(src), pa.int64())]
        return pa.RecordBatch.from_arrays(
            [pa.array(src, pa.string()), pa.array(paths, pa.string()), pa.array(kinds, pa.string()),
             pa.array(errors, pa.string()), *fact_cols],
            schema=EXPAND_SCHEMA,
        )


def _metadata_doc(data: bytes) -> dict[str, Any]:
    """A metadata file's JSON object (gzip or plain). Raises ValueError, OSError or EOFError."""
    doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    if not isinstance(doc, dict):
        raise ValueError(f"a JSON {type(doc).__name__}, not an object")
    return doc


def _list_entries(recs: list[dict[str, Any]]) -> list[tuple[str, str, ListEntry]]:
    return [(_branch(r["manifest_path"]), MANIFEST, _list_entry(r)) for r in recs]


def _list_entry(r: dict[str, Any]) -> ListEntry:
    def num(*names: str) -> int | None:
        for n in names:
            v = _branch(r.get(n))
            if v is not None:
                return int(v)
        return None

    added, existing = num("added_files_count", "added_data_files_count"), num("existing_files_count",
                                                                              "existing_data_files_count")
    live = added + existing if added is not None and existing is not None else None
    return num("content"), num("sequence_number"), live


def _seq(snap: dict[str, Any]) -> int | None:
    v = snap.get("sequence-number")
    return None if v is None else int(v)


def _manifest_entries(recs: list[dict[str, Any]]) -> list[tuple[str, str, ListEntry]]:
    out: list[tuple[str, str, ListEntry]] = []
    for r in recs:
        if _branch(r.get("status")) == 2:
            continue  # deleted entry: an older snapshot reaches the file
        df = _branch(r["data_file"])
        content = _branch(df.get("content")) or 0
        out.append((_branch(df["file_path"]), _CONTENT_KIND.get(int(content), DATA), _NO_FACT))
    return out


def expand_task(base: Storage, threads: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of the executors: `TableFiles.expand` over each batch, then one
    `REQUESTS` row with the task's object-store request counts."""
    files = TableFiles(base, threads)
    before = requests.snapshot()
    for b in batches:
        yield files.expand(b)
    yield pa.RecordBatch.from_pylist(
        [{"source": "", "path": "", "kind": REQUESTS, "error": json.dumps(requests.since(before))}],
        schema=EXPAND_SCHEMA,
    )


def metadata_log(meta: dict[str, Any]) -> list[str]:
    """The previous metadata files `meta` logs (raw locations)."""
    return [e["metadata-file"] for e in meta.get("metadata-log") or [] if e.get("metadata-file")]


def current_snapshot(meta: dict[str, Any]) -> int | None:
    cur = meta.get("current-snapshot-id")
    return None if cur is None or int(cur) < 0 else int(cur)
