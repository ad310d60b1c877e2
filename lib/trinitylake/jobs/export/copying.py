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
from trinitylake.jobs.export.rules import ExportSpec, PlanRow, manifest_path, md5_hex
from trinitylake.storage import Storage, requests

_MD5_RE = re.compile(r"^[0-9a-f]{32}$")


OK, MISSING, MISMATCH = "ok", "missing", "mismatch"


def verify_file(storage: Storage, path: str, size: int, md5: str, checksum: bool = True) -> str:
    """Whether the file at `path` has `size` bytes and MD5 `md5`: ``ok``, ``missing`` or ``mismatch``.

    On S3 the ETag of a single-part upload is the MD5: a HEAD request then suffices. Other
    ETags (multipart, SSE-KMS) fall back to reading the bytes.
    """
    if storage.head_gives_md5:
        info = storage.head_s3(path)
        if info is None:
            return MISSING
        if int(info.get("size") or 0) != size:
            return MISMATCH
        if not checksum:
            return OK
        etag = str(info.get("ETag") or info.get("etag") or "").strip('"').lower()
        if _MD5_RE.match(etag) and etag == md5:
            return OK
    elif not checksum:
        try:
            return OK if storage.info(path).size == size else MISMATCH
        except FileNotFoundError:
            return MISSING
    try:  # one read gives both the size and the checksum (cheaper than a stat, then a read)
        data = storage.read(path)
    except FileNotFoundError:
        return MISSING
    return OK if len(data) == size and md5_hex(data) == md5 else MISMATCH


def etag_matches(etag: str, md5: str) -> bool:
    """Whether an S3 ETag is the MD5 `md5` (single-part uploads without SSE-KMS; any other ETag
    proves nothing, and the caller verifies another way)."""
    e = etag.strip('"').lower()
    return bool(_MD5_RE.match(e)) and e == md5


def verify_written(storage: Storage, path: str, size: int, md5: str, checksum: bool = True) -> str:
    """Verification right after this process created `path` from bytes whose MD5 it computed.

    S3: a HEAD request: the size, and (with `checksum`) the ETag of the single-part PUT, which is
    the MD5 of what the store received. Elsewhere: a stat for the size; the checksum is the MD5
    of the very bytes handed to the exclusive create (computed while copying), since re-reading a
    file just written locally only reads our own page cache back (see the job's module doc).
    """
    if storage.head_gives_md5:
        return verify_file(storage, path, size, md5, checksum)
    try:
        return OK if storage.info(path).size == size else MISMATCH
    except FileNotFoundError:
        return MISSING


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
    t = time.perf_counter()
    try:
        if created and etag is not None and etag_matches(etag, md5):
            # The store's answer to our PUT: it holds exactly these bytes (no HEAD needed).
            state = OK
        else:
            state = (verify_written if created else verify_file)(target, row.target, size, md5, checksum)
    except Exception as e:  # noqa: BLE001
        st.errors.append(f"StorageError: cannot verify {target.uri(row.target)}: {type(e).__name__}: {e}")
        return st, None
    st.seconds_verify += time.perf_counter() - t
    if state != OK:
        if created:
            st.errors.append(f"StorageError: {target.uri(row.target)} failed verification after the copy ({state})")
        else:
            st.conflicts.append(f"{target.uri(row.target)} exists with other content than {row.source}")
        return st, None
    if not created:
        return _skip(st, size), (size, md5)
    st.verified, st.verified_bytes = 1, size
    st.copied, st.copied_bytes = 1, size
    st.rewritten += bool(changed)
    return st, (size, md5)


def copy_part(name: str, source: Storage, target: Storage, spec: ExportSpec, export_dir: str, checksum: bool,
              resumed: bool, pmap: Callable[[Callable[[Any], Any], list], list] | None = None) -> CopyStats:
    """Copy the files of one plan part (`pmap` maps over its rows, over threads; None: a plain
    loop); write its result manifest when all are verified. The same on the driver's threads,
    in the driver's copy worker processes and in executor tasks."""
    rows = read_plan_part(target.read(f"{export_dir}/plan/{name}"))
    mpath = manifest_path(export_dir, name)
    recorded = (read_manifest(target, mpath) if resumed else None) or {}
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
    if not stats.failed and files != recorded:
        target.write(mpath, manifest_bytes(name, files))
    return stats
