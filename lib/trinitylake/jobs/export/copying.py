"""Copy and verification of one planned export file (engine-agnostic; see `export_plan`).

The job (`trinitylake.jobs.export.job`) calls `copy_one` per plan row on the driver or in
executor tasks; failures come back as data in `CopyStats`, so the driver can raise one typed
error naming the files.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from trinitylake.errors import TrinityLakeError
from trinitylake.jobs.export.plan import export_bytes, manifest_bytes, read_manifest, read_plan_part
from trinitylake.jobs.export.rules import ACTION_COPY, ExportSpec, PlanRow, exported_bytes, manifest_path, md5_hex
from trinitylake.storage import Storage, parse_uri, requests
from trinitylake.storage.verify import headed_etags, listed_etags, verify

_MD5_RE = re.compile(r"^[0-9a-f]{32}$")

#: ``pmap(fn, items)``: a map over a pool of threads (`trinitylake.jobs.export.planner.pool_map`).
PoolMap = Callable[[Callable, list], list]


OK, MISSING, MISMATCH = "ok", "missing", "mismatch"  # what `trinitylake.storage.verify.verify` answers


def verify_file(storage: Storage, path: str, size: int, md5: str, checksum: bool = True) -> str:
    """Whether the file at `path` has `size` bytes and MD5 `md5`: ``ok``, ``missing`` or
    ``mismatch`` (`trinitylake.storage.verify`: one HEAD where the store's ETag is the MD5,
    else a read)."""
    return verify(storage, path, size, md5, checksum)


def etag_matches(etag: str, md5: str) -> bool:
    """Whether an S3 ETag is the MD5 `md5` (single-part uploads without SSE-KMS; any other ETag
    proves nothing, and the caller verifies another way)."""
    e = etag.strip('"').lower()
    return bool(_MD5_RE.match(e)) and e == md5


def verify_written(storage: Storage, path: str, size: int, md5: str, checksum: bool = True) -> str:
    """Verification right after this process created `path` from bytes whose MD5 it computed.

    S3: a HEAD request: the size, and (with `checksum`) the ETag of the single-part PUT, which is
    the MD5 of what the store received. Elsewhere, with `checksum`: the file is read back and its
    size and MD5 compared (`verify_file`). The read mostly comes from the page cache, so it does
    not prove the platters hold the bytes, but it does catch what the write path stored other
    than it was handed (a faulty filesystem, FUSE mount or storage layer, a truncated write, a
    file replaced behind us); a stat alone passes any corruption that keeps the size. Without
    `checksum` (``verify_checksum: false``): a stat for the size.
    """
    return verify_file(storage, path, size, md5, checksum)


@dataclass
class CopyStats:
    """What copying one batch (plan part) did. Failures are data, not exceptions, so that the
    driver raises a typed error naming the files."""

    rows: int = 0
    copied: int = 0
    copied_bytes: int = 0
    skipped: int = 0
    skipped_bytes: int = 0
    verified: int = 0
    verified_bytes: int = 0
    rewritten: int = 0
    source_reads: int = 0
    seconds_verify: float = 0.0
    #: Object-store requests by kind, counted where the copy ran (executor tasks send them back).
    requests: dict[str, int] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    missing_sources: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, other: CopyStats) -> None:
        self.rows += other.rows
        self.copied += other.copied
        self.copied_bytes += other.copied_bytes
        self.skipped += other.skipped
        self.skipped_bytes += other.skipped_bytes
        self.verified += other.verified
        self.verified_bytes += other.verified_bytes
        self.rewritten += other.rewritten
        self.source_reads += other.source_reads
        self.seconds_verify += other.seconds_verify
        if other.requests:
            self.requests = requests.add(dict(self.requests), other.requests)
        if other.conflicts or other.missing_sources or other.errors:
            for k in ("conflicts", "missing_sources", "errors"):
                getattr(self, k).extend(getattr(other, k)[: max(0, 20 - len(getattr(self, k)))])

    @property
    def failed(self) -> bool:
        return bool(self.conflicts or self.missing_sources or self.errors)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CopyStats:
        return cls(**d)


def _skip(st: CopyStats, size: int) -> CopyStats:
    st.skipped, st.skipped_bytes, st.verified, st.verified_bytes = 1, size, 1, size
    return st


def copy_one(row: PlanRow, source: Storage, target: Storage, spec: ExportSpec, *, checksum: bool = True,
             recorded: tuple[int, str] | None = None) -> tuple[CopyStats, tuple[int, str] | None]:
    """Copy one planned file, reading its source at most once; returns what happened and, when
    the target holds the file verified, its (size, MD5) for the part's result manifest.

    `recorded` is the (size, MD5) an earlier run's manifest holds for this file: the target is
    then verified against it without reading the source (a resumed run). Otherwise the source is
    read once (node files come with their bytes in the plan and are not read at all), rewritten
    if planned, hashed, and created exclusively at the target; a file that is already there is
    kept when it holds exactly these bytes (an earlier run or an earlier export of the same
    lakehouse wrote it) and reported as a conflict otherwise. Nothing is ever overwritten.
    """
    st = CopyStats(rows=1)
    if recorded is not None:
        t = time.perf_counter()
        state = verify_file(target, row.target, recorded[0], recorded[1], checksum)
        st.seconds_verify += time.perf_counter() - t
        if state == OK:
            return _skip(st, recorded[0]), recorded
        if state == MISMATCH:
            st.conflicts.append(f"{target.uri(row.target)} exists with other content than {row.source}")
            return st, None
    try:
        st.source_reads += row.data is None
        data, changed = export_bytes(row, source, spec)
    except FileNotFoundError:
        st.missing_sources.append(row.source)
        return st, None
    except TrinityLakeError as e:
        st.errors.append(f"{type(e).__name__}: {e}")
        return st, None
    size, md5 = len(data), md5_hex(data)
    if (row.size >= 0 and size != row.size) or (row.md5 and md5 != row.md5):
        st.errors.append(f"{row.source}: the bytes to write do not match the plan (size {size} vs {row.size}); "
                         f"the plan is corrupt")
        return st, None
    etag = None
    try:
        if data:
            etag = target.create_exclusive(row.target, data)
        else:
            target.write(row.target, data)
        created = True
    except FileExistsError:
        created = False
    except Exception as e:  # noqa: BLE001 - reported as data; the driver raises a typed error
        st.errors.append(f"StorageError: cannot create {target.uri(row.target)}: {type(e).__name__}: {e}")
        return st, None
    return st, _verify_created(st, row, target, size, md5, created, etag, changed, checksum)


def _verify_created(st: CopyStats, row: PlanRow, target: Storage, size: int, md5: str, created: bool,
                    etag: str | None, changed: bool, checksum: bool) -> tuple[int, str] | None:
    """After the exclusive create of `row` (`created`; else the key was already there): verify
    the target holds `size` bytes with MD5 `md5`, count the outcome into `st`, and return the
    (size, MD5) the part's manifest records, or None when it failed (reported in `st`)."""
    t = time.perf_counter()
    try:
        if created and etag is not None and etag_matches(etag, md5):
            # The store's answer to our PUT: it holds exactly these bytes (no HEAD needed).
            state = OK
        else:
            state = (verify_written if created else verify_file)(target, row.target, size, md5, checksum)
    except Exception as e:  # noqa: BLE001
        st.errors.append(f"StorageError: cannot verify {target.uri(row.target)}: {type(e).__name__}: {e}")
        return None
    st.seconds_verify += time.perf_counter() - t
    if state != OK:
        if created:
            st.errors.append(f"StorageError: {target.uri(row.target)} failed verification after the copy ({state})")
        else:
            st.conflicts.append(f"{target.uri(row.target)} exists with other content than {row.source}")
        return None
    if not created:
        _skip(st, size)
        return size, md5
    st.verified, st.verified_bytes = 1, size
    st.copied, st.copied_bytes = 1, size
    st.rewritten += bool(changed)
    return size, md5


def copy_part(name: str, source: Storage, target: Storage, spec: ExportSpec, export_dir: str, checksum: bool,
              resumed: bool, pmap: PoolMap | None = None) -> CopyStats:
    """Copy the files of one plan part (`pmap` maps over its rows, over threads; None: a plain
    loop); write its result manifest when all are verified. The same on the driver's threads,
    in the driver's copy worker processes and in executor tasks."""
    rows = read_plan_part(target.read(f"{export_dir}/plan/{name}"))
    mpath = manifest_path(export_dir, name)
    recorded = (read_manifest(target, mpath) if resumed else None) or {}
    if target.batches_in_flight:
        # An object store the I/O engine serves: the part's requests in flight together,
        # server-side copies where the store can (`copy_batch`).
        stats, files = copy_batch(rows, source, target, spec, checksum=checksum, recorded=recorded)
    else:
        stats, files = _copy_each(rows, source, target, spec, checksum, recorded, pmap)
    if not stats.failed and files != recorded:
        target.write(mpath, manifest_bytes(name, files))
    return stats


def _copy_each(rows: list[PlanRow], source: Storage, target: Storage, spec: ExportSpec, checksum: bool,
               recorded: dict[str, tuple[int, str]], pmap: PoolMap | None
               ) -> tuple[CopyStats, dict[str, tuple[int, str]]]:
    """`copy_one` per row (over `pmap`): the stats and the (size, MD5) of every verified file."""
    ensure_dirs = getattr(target, "ensure_dirs", None)
    if ensure_dirs is not None:
        ensure_dirs(r.target for r in rows if r.target not in recorded)

    def one(r: PlanRow) -> tuple[CopyStats, tuple[int, str] | None]:
        return copy_one(r, source, target, spec, checksum=checksum, recorded=recorded.get(r.target))

    results = pmap(one, rows) if pmap is not None else [one(r) for r in rows]
    stats = CopyStats()
    files: dict[str, tuple[int, str]] = {}
    for r, (st, done) in zip(rows, results, strict=True):
        stats.add(st)
        if done is not None:
            files[r.target] = done
    return stats, files


# ---- object stores: a part's files as batches --------------------------------------------------------
#: A range listing that verifies server-side copies stops after this many keys per copied file
#: (plus `_LIST_SLACK`); the files it did not reach are verified by a HEAD each instead. A plan
#: part's keys are one sorted range of the target (the planner sorts and cuts them), so its
#: listing holds about its own files.
_LIST_KEYS_PER_FILE = 4
_LIST_SLACK = 2000


def _same_bucket(a: Storage, b: Storage) -> bool:
    return parse_uri(a.root).store_uri == parse_uri(b.root).store_uri


def copy_batch(rows: list[PlanRow], source: Storage, target: Storage, spec: ExportSpec, *, checksum: bool,
               recorded: dict[str, tuple[int, str]]) -> tuple[CopyStats, dict[str, tuple[int, str]]]:
    """`copy_one` for every row at once, on a target the I/O engine serves; returns the stats
    and the (size, MD5) of every file verified at the target (for the part's manifest).

    Requests per file (the model `tests/storage/test_requests.py` checks):

    * a definition copied as it is, source and target on one endpoint with one set of
      credentials in one bucket: **one CopyObject** with ``If-None-Match: *`` (no byte through
      the client), verified by a listing of the part's key range at the target (1,000 keys a
      LIST): each copy there, its size and ETag recorded (a key that existed before: compared
      with its source by a HEAD);
    * a node (its exported bytes are in the plan): one PUT with ``If-None-Match: *``, verified
      by the ETag it answers (the MD5 of what the store received);
    * a file rewritten, or copied across endpoints or buckets: one GET and one PUT;
    * a file of a resumed part: one HEAD against its recorded size and MD5.

    A target key that exists is never overwritten: it is kept when it holds exactly the bytes
    planned (an interrupted run, an earlier export) and reported as a conflict otherwise.
    """
    stats = CopyStats()
    files: dict[str, tuple[int, str]] = {}
    todo: list[PlanRow] = []
    resumed = [r for r in rows if r.target in recorded]
    for r, h in zip(resumed, target.head_many([r.target for r in resumed]) if resumed else [], strict=True):
        st = CopyStats(rows=1)
        size, md5 = recorded[r.target]
        state = _state_of_head(h, size, md5, checksum)
        if state == OK:
            stats.add(_skip(st, size))
            files[r.target] = (size, md5)
        elif state == MISMATCH:
            st.conflicts.append(f"{target.uri(r.target)} exists with other content than {r.source}")
            stats.add(st)
        else:
            todo.append(r)  # missing, or not verifiable by its ETag: copied (or verified) again
    todo += [r for r in rows if r.target not in recorded]
    server_side = target.copies_server_side_from(source) and _same_bucket(source, target)
    by_copy: list[PlanRow] = []
    by_put: list[PlanRow] = []
    for r in todo:
        (by_copy if server_side and r.data is None and r.action == ACTION_COPY else by_put).append(r)
    if by_put:
        _put_rows(by_put, source, target, spec, checksum, stats, files)
    if by_copy:
        _copy_rows(by_copy, source, target, checksum, stats, files)
    return stats, files


def _state_of_head(h: Any, size: int, md5: str, checksum: bool) -> str:
    """``ok``/``missing``/``mismatch`` of a HEAD (`Listed` or its error) against size and MD5;
    ``unknown`` when the ETag is no MD5 (multipart, SSE-KMS) and a checksum is asked."""
    if isinstance(h, FileNotFoundError):
        return MISSING
    if isinstance(h, BaseException):
        raise h
    if h.size != size:
        return MISMATCH
    if not checksum or not md5:  # no MD5 recorded: the store listed no ETag when it was copied
        return OK
    etag = str(h.etag or "").strip('"').lower()
    if _MD5_RE.match(etag):
        return OK if etag == md5 else MISMATCH
    return "unknown"


def _put_rows(rows: list[PlanRow], source: Storage, target: Storage, spec: ExportSpec, checksum: bool,
              stats: CopyStats, files: dict[str, tuple[int, str]]) -> None:
    """Rows whose bytes go through the client: read (nodes: from the plan), rewritten if
    planned, hashed, created exclusively; each verified by its PUT's ETag."""
    reads = [r for r in rows if r.data is None]
    got = dict(zip([r.target for r in reads], source.read_many([r.target for r in reads]), strict=True)) if reads else {}
    items: list[tuple[PlanRow, bytes, str, bool]] = []
    for r in rows:
        st = CopyStats(rows=1)
        if r.data is not None:
            data, changed = r.data, r.action != ACTION_COPY
        else:
            st.source_reads = 1
            raw = got[r.target]
            if isinstance(raw, FileNotFoundError):
                st.missing_sources.append(r.source)
                stats.add(st)
                continue
            if isinstance(raw, BaseException):
                st.errors.append(f"{type(raw).__name__}: {raw}")
                stats.add(st)
                continue
            try:
                data = exported_bytes(r, raw, source, spec)
            except TrinityLakeError as e:
                st.errors.append(f"{type(e).__name__}: {e}")
                stats.add(st)
                continue
            changed = data is not raw
        md5 = md5_hex(data)
        if (r.size >= 0 and len(data) != r.size) or (r.md5 and md5 != r.md5):
            st.errors.append(f"{r.source}: the bytes to write do not match the plan (size {len(data)} vs {r.size}); "
                             f"the plan is corrupt")
            stats.add(st)
            continue
        stats.add(st)
        items.append((r, bytes(data), md5, changed))
    nonempty = [it for it in items if it[1]]
    for r, data, _md5, _ch in items:
        if not data:
            target.write(r.target, data)
    answers = dict(zip([it[0].target for it in nonempty],
                       target.create_exclusive_many([(it[0].target, it[1]) for it in nonempty]), strict=True))
    for r, data, md5, changed in items:
        st = CopyStats()
        res = answers.get(r.target)
        if isinstance(res, BaseException) and not isinstance(res, FileExistsError):
            st.errors.append(f"StorageError: cannot create {target.uri(r.target)}: {type(res).__name__}: {res}")
        else:
            done = _verify_created(st, r, target, len(data), md5, not isinstance(res, BaseException),
                                   res if isinstance(res, str) else None, changed, checksum)
            if done is not None:
                files[r.target] = done
        stats.add(st)


def _copy_rows(rows: list[PlanRow], source: Storage, target: Storage, checksum: bool, stats: CopyStats,
               files: dict[str, tuple[int, str]]) -> None:
    """Server-side copies (one CopyObject with ``If-None-Match: *`` each), verified by a listing
    of the target's key range: each copy is there, with the size and ETag the part's manifest
    records. The store made each copy itself, atomically, from the source as it was, and a
    lakehouse file never changes once written, so the source is not listed again (on s3s-fs,
    which walks its whole bucket folder for every LIST, those listings were a sixth of the
    export at 20 ms). Only a key that already existed is compared with its source (a HEAD
    each): kept when it holds the same, a conflict otherwise."""
    rows = sorted(rows, key=lambda r: r.target)
    answers = target.copy_many_from(source, [(r.target, r.target) for r in rows])
    t = time.perf_counter()
    landed = [r.target for r, a in zip(rows, answers, strict=True) if a is None or isinstance(a, FileExistsError)]
    tgt_meta = _listed(target, landed)
    src_meta = headed_etags(source, [r.target for r, a in zip(rows, answers, strict=True)
                                if isinstance(a, FileExistsError) and r.target in tgt_meta])
    for r, a in zip(rows, answers, strict=True):
        st = CopyStats(rows=1)
        if isinstance(a, FileNotFoundError):
            st.missing_sources.append(r.source)
        elif isinstance(a, BaseException) and not isinstance(a, FileExistsError):
            st.errors.append(f"StorageError: cannot copy {r.source} to {target.uri(r.target)}: {type(a).__name__}: {a}")
        elif (g := tgt_meta.get(r.target)) is None:
            st.errors.append(f"StorageError: {target.uri(r.target)} failed verification after the copy (missing)")
        elif a is None:  # created by this copy
            eg = _etag(g[1])
            # The manifest's MD5: the ETag where it is one (a single-part object's); "" (check
            # by size) otherwise, as on a store that lists no ETags (s3s-fs).
            files[r.target] = (g[0], eg if _MD5_RE.match(eg) else "")
            st.verified, st.verified_bytes, st.copied, st.copied_bytes = 1, g[0], 1, g[0]
        elif (s := src_meta.get(r.target)) is None:
            st.errors.append(f"StorageError: {r.source} is gone, so {target.uri(r.target)}, which existed before "
                             "the copy, cannot be verified against it")
        else:
            es, eg = _etag(s[1]), _etag(g[1])
            # Same size and ETag (where both list one: AWS, MinIO and R2 do, s3s-fs does not).
            if g[0] == s[0] and (not checksum or not es or not eg or es == eg):
                files[r.target] = (s[0], es if _MD5_RE.match(es) else (eg if _MD5_RE.match(eg) else ""))
                _skip(st, s[0])
            else:
                st.conflicts.append(f"{target.uri(r.target)} exists with other content than {r.source}")
        stats.add(st)
    stats.seconds_verify += time.perf_counter() - t


def _etag(etag: str | None) -> str:
    return str(etag or "").strip('"').lower()


def _listed(storage: Storage, paths: list[str]) -> dict[str, tuple[int, str | None]]:
    """(size, ETag) of the sorted `paths` that exist (`trinitylake.storage.verify.listed_etags`:
    a listing of their key range, the ones a bounded listing did not reach by one HEAD each)."""
    return listed_etags(storage, paths, _LIST_KEYS_PER_FILE, _LIST_SLACK)
