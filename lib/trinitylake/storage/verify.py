"""Whether a store holds the bytes a copy meant it to: by one HEAD where the store's ETag is the
MD5 of a single-part upload (S3), by listings of a copied key range (server-side copies), else
by reading the bytes back. Callers say what to check (`verify`, `listed_etags`), never how."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from trinitylake.errors import StorageError
from trinitylake.storage.object_io import sorted_keys_range
from trinitylake.storage.storage import Storage

#: What `verify` finds at a path.
OK, MISSING, MISMATCH = "ok", "missing", "mismatch"
_MD5_RE = re.compile(r"^[0-9a-f]{32}$")


def verify(storage: Storage, path: str, size: int, md5: str, checksum: bool = True) -> str:
    """Whether the file at `path` holds `size` bytes with MD5 `md5`: ``ok``, ``missing`` or
    ``mismatch``. Where one HEAD gives an ETag that is the MD5 of a single-part upload (S3) that
    HEAD suffices; other ETags (multipart, SSE-KMS) and other stores read the bytes (one read
    gives both size and checksum); without `checksum` the size alone."""
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
    try:
        data = storage.read(path)
    except FileNotFoundError:
        return MISSING
    return OK if len(data) == size and hashlib.md5(data, usedforsecurity=False).hexdigest() == md5 else MISMATCH


def listed_etags(storage: Storage, paths: Sequence[str], slack_per_file: int = 4, slack: int = 2000
                 ) -> dict[str, tuple[int, str | None]]:
    """(size, ETag) of the `paths` that exist (sorted, one key range of the store), for
    verifying server-side copies: through the I/O engine a listing of their key range (1,000
    keys a LIST), one per folder right below the one they all lie in (`folder_runs`), those
    listings in flight together; each stopped after ``slack_per_file * len(run) + slack`` keys,
    the files it did not reach by one HEAD each; elsewhere a stat each (no ETag).

    Why a listing per folder: ranges listed side by side end sooner than one after another (a
    known way to list S3 faster), and a store that walks a folder to answer a LIST (s3s-fs
    walks all of it, whatever the range) walks each folder once instead of the whole tree
    for every part of an export."""
    out: dict[str, tuple[int, str | None]] = {}
    if not paths:
        return out
    if not storage.batches_in_flight:
        for p in paths:
            try:
                out[p] = (storage.info(p).size, None)
            except FileNotFoundError:
                continue
        return out
    runs = folder_runs(paths)
    if len(runs) == 1:
        return _listed_run(storage, runs[0], slack_per_file, slack)
    with ThreadPoolExecutor(len(runs), thread_name_prefix="tlake-list") as pool:
        for got in pool.map(lambda r: _listed_run(storage, r, slack_per_file, slack), runs):
            out.update(got)
    return out


#: At most this many listings for one `listed_etags` call (more folders: one listing of all).
MAX_FOLDER_RUNS = 16


def folder_runs(paths: Sequence[str]) -> list[Sequence[str]]:
    """The sorted `paths` cut where the folder right below the one they all lie in changes
    (files directly in that folder stay with their neighbours); all of them as one run when
    that gives more than `MAX_FOLDER_RUNS`."""
    folder, _, _ = sorted_keys_range([paths[0], paths[-1]])
    depth = folder.count("/") + 1 if folder else 0

    def below(p: str) -> str | None:
        parts = p.split("/")
        return parts[depth] if len(parts) > depth + 1 else None

    runs: list[Sequence[str]] = []
    start, current = 0, below(paths[0])
    for i in range(1, len(paths)):
        b = below(paths[i])
        if b is not None and b != current:
            if current is not None or i > start:
                runs.append(paths[start:i])
                start = i
            current = b
    runs.append(paths[start:])
    return runs if len(runs) <= MAX_FOLDER_RUNS else [paths]


def _listed_run(storage: Storage, paths: Sequence[str], slack_per_file: int, slack: int
                ) -> dict[str, tuple[int, str | None]]:
    out: dict[str, tuple[int, str | None]] = {}
    wanted = set(paths)
    budget = slack_per_file * len(paths) + slack
    for n, (p, size, etag) in enumerate(_list_range(storage, paths[0], paths[-1])):
        if p in wanted:
            out[p] = (size, etag)
        if n >= budget:
            break
    else:
        return out
    out.update(headed_etags(storage, [p for p in paths if p not in out]))
    return out


def headed_etags(storage: Storage, paths: Sequence[str]) -> dict[str, tuple[int, str | None]]:
    """(size, ETag) of the `paths` that exist: one HEAD each, in flight together."""
    out: dict[str, tuple[int, str | None]] = {}
    for p, h in zip(paths, storage.head_many(paths) if paths else [], strict=True):
        if isinstance(h, FileNotFoundError):
            continue
        if isinstance(h, BaseException):
            raise h
        out[p] = (h.size, h.etag)
    return out


def _list_range(storage: Storage, first: str, last: str) -> Iterator[tuple[str, int, str | None]]:
    """The objects from `first` to `last` (paths under the storage's root, in key order) as
    ``(path, size, ETag)``: one LIST a 1,000 of them, from the folder both lie in."""
    eng = storage.engine
    if eng is None:
        raise StorageError(f"a ranged listing needs the S3 engine, this storage is {storage.root}")
    a, b = storage._fs_path(first), storage._fs_path(last)  # noqa: SLF001 - the storage package's own
    bucket = a.partition("/")[0]
    folder, after, stop = sorted_keys_range([a.partition("/")[2], b.partition("/")[2]])
    rf = storage._parsed.fs_path.strip("/")  # noqa: SLF001
    for o in eng.list_objects(f"{bucket}/{folder}", start_after=after, stop_after=stop):
        name = f"{bucket}/{o.key}"
        if name.startswith(rf + "/"):
            yield name[len(rf) + 1:], o.size, o.etag
