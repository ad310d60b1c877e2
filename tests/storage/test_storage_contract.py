"""One contract for every storage kind: local files, memory:// and S3 (moto).

Each test runs three times (see `conftest.KINDS`). Backend-specific behaviour (temporary
files, hard links, S3 batches) is tested at the end of the file.
"""

from __future__ import annotations

import errno
import os
import pickle
import threading
import time
from typing import Any

import pytest

import trinitylake.storage.filesystem as filesystem_mod
import trinitylake.storage.retry as retry_mod
import trinitylake.storage.storage as storage_mod
from trinitylake.errors import InvalidURIError, StorageError, UnknownOutcomeError
from trinitylake.storage import FileInfo, Storage, local_storage, object_io, object_storage
from trinitylake.storage.uri import parse_uri

LAYOUT = {
    "a.txt": b"A",
    "d1/b.txt": b"BB",
    "d1/d2/c.txt": b"CCC",
    "d10/e.txt": b"EEEE",  # shares the prefix "d1" as a string, not as a directory
}


def _populate(s: Storage, files: dict[str, bytes] = LAYOUT) -> None:
    for path, data in files.items():
        s.write(path, data)


def _paths(infos: Any) -> list[str]:
    return sorted(i.path for i in infos)


# ---- read / write ------------------------------------------------------------------------
def test_write_read_roundtrip(storage: Storage) -> None:
    data = bytes(range(256)) * 40
    storage.write("a/b/c.bin", data)
    assert storage.read("a/b/c.bin") == data
    storage.write("a/b/c.bin", b"new")
    assert storage.read("a/b/c.bin") == b"new"


def test_write_empty_file_is_allowed(storage: Storage) -> None:
    # Plain write (hint files, plans) may be empty; only create_exclusive refuses empty data.
    storage.write("empty", b"")
    assert storage.read("empty") == b""
    assert storage.info("empty").size == 0


def test_read_missing_names_the_uri(storage: Storage) -> None:
    with pytest.raises(FileNotFoundError, match="no such file") as e:
        storage.read("nope/x.arrow")
    assert storage.uri("nope/x.arrow") in str(e.value)


def test_read_directory_fails(storage: Storage) -> None:
    storage.write("d/f", b"1")
    with pytest.raises((FileNotFoundError, IsADirectoryError)):
        storage.read("d")


def test_exists_is_for_files_only(storage: Storage) -> None:
    storage.write("d/sub/f", b"1")
    assert storage.exists("d/sub/f")
    assert not storage.exists("d/sub/g")
    assert not storage.exists("nope")
    assert not storage.exists("d")  # a directory (an S3 key prefix) is not a file
    assert not storage.exists("d/sub")


def test_info(storage: Storage) -> None:
    before = time.time()
    storage.write("d/f.bin", b"x" * 1234)
    info = storage.info("d/f.bin")
    assert info == FileInfo("d/f.bin", 1234, info.mtime)
    assert before - 300 < info.mtime < time.time() + 300  # S3 has 1-second resolution, clocks may skew
    absolute = storage.info(storage.uri("d/f.bin"))
    assert absolute.size == 1234
    assert absolute.path == storage.uri("d/f.bin")  # `path` is echoed as given


def test_info_missing_or_directory(storage: Storage) -> None:
    storage.write("d/f", b"1")
    for missing in ("d/g", "d", "nope/x"):
        with pytest.raises(FileNotFoundError, match="no such file"):
            storage.info(missing)


# ---- listing ------------------------------------------------------------------------------
def test_list_recursive(storage: Storage) -> None:
    _populate(storage)
    infos = list(storage.list())
    assert _paths(infos) == sorted(LAYOUT)
    assert {i.path: i.size for i in infos} == {p: len(d) for p, d in LAYOUT.items()}
    assert all(isinstance(i, FileInfo) and i.mtime > 0 for i in infos)


def test_list_non_recursive(storage: Storage) -> None:
    _populate(storage)
    assert _paths(storage.list(recursive=False)) == ["a.txt"]
    assert _paths(storage.list("d1", recursive=False)) == ["d1/b.txt"]


def test_list_by_prefix(storage: Storage) -> None:
    _populate(storage)
    assert _paths(storage.list("d1")) == ["d1/b.txt", "d1/d2/c.txt"]  # not d10/
    assert _paths(storage.list("d1/")) == ["d1/b.txt", "d1/d2/c.txt"]
    assert _paths(storage.list("d1/d2")) == ["d1/d2/c.txt"]
    assert _paths(storage.list("d10")) == ["d10/e.txt"]
    assert _paths(storage.list(storage.uri("d1"))) == ["d1/b.txt", "d1/d2/c.txt"]


def test_list_missing_prefix_is_empty(storage: Storage) -> None:
    assert list(storage.list()) == []  # nothing written yet: the root itself is missing
    assert list(storage.list(recursive=False)) == []
    _populate(storage)
    assert list(storage.list("nope")) == []
    assert list(storage.list("d1/nope", recursive=False)) == []
    assert list(storage.list("d")) == []  # a string prefix of d1/ and d10/ is not a directory


def test_list_prefix_naming_a_file_is_empty(storage: Storage) -> None:
    _populate(storage)
    assert list(storage.list("a.txt")) == []
    assert list(storage.list("d1/b.txt", recursive=False)) == []


def test_list_dirs(storage: Storage) -> None:
    _populate(storage)
    dirs, files = storage.list_dirs()
    assert dirs == ["d1", "d10"]
    assert [(f.path, f.size) for f in files] == [("a.txt", 1)]
    dirs, files = storage.list_dirs("d1")
    assert dirs == ["d1/d2"]
    assert [(f.path, f.size) for f in files] == [("d1/b.txt", 2)]
    assert storage.list_dirs("d1/") == (dirs, files)
    dirs, files = storage.list_dirs("d1/d2")
    assert dirs == [] and [f.path for f in files] == ["d1/d2/c.txt"]


def test_names_after_lists_a_folder_from_a_name_on(storage: Storage) -> None:
    """What a Delta log's appender asks: the names in one folder after the last version it
    knows, in order; a sub-folder's files and a sibling folder sharing the prefix are not there."""
    log = ["00000000000000000001.json", "00000000000000000002.checkpoint.parquet", "00000000000000000002.json",
           "00000000000000000003.json", "_last_checkpoint"]
    for n in log:
        storage.write(f"log/{n}", b"x")
    storage.write("log/_commits/00000000000000000009.json", b"x")
    storage.write("log0/00000000000000000009.json", b"x")
    assert storage.names_after("log", "00000000000000000002/") == ["00000000000000000003.json", "_last_checkpoint"]
    assert storage.names_after("log/", "") == log
    assert storage.names_after("log", "~") == []
    assert storage.names_after("missing", "") == []


def test_list_dirs_missing_or_file(storage: Storage) -> None:
    assert storage.list_dirs() == ([], [])
    _populate(storage)
    assert storage.list_dirs("nope") == ([], [])
    assert storage.list_dirs("a.txt") == ([], [])


# ---- delete -------------------------------------------------------------------------------
def test_delete_bulk_missing_ok_and_idempotent(storage: Storage) -> None:
    _populate(storage)
    batch = ["a.txt", "d1/b.txt", "missing.txt", "d1/d2/missing"]
    assert storage.delete(batch) == []
    assert not storage.exists("a.txt") and not storage.exists("d1/b.txt")
    assert _paths(storage.list()) == ["d1/d2/c.txt", "d10/e.txt"]
    assert storage.delete(batch) == []  # a re-run is a no-op
    assert storage.delete([]) == []
    assert storage.delete(iter(["d10/e.txt"])) == []  # any iterable
    assert _paths(storage.list()) == ["d1/d2/c.txt"]


def test_delete_missing_file_does_not_stop_the_batch(storage: Storage) -> None:
    # Regression: fsspec's bulk rm on memory:// stopped at the first missing file and the
    # error was swallowed, so the files after it stayed while delete() reported success.
    _populate(storage)
    assert storage.delete(["missing-1", "a.txt", "missing-2", "d1/b.txt", "d10/e.txt"]) == []
    assert _paths(storage.list()) == ["d1/d2/c.txt"]


def test_delete_absolute_uris_and_duplicates(storage: Storage) -> None:
    _populate(storage)
    assert storage.delete([storage.uri("a.txt"), "a.txt", storage.uri("d1/b.txt")]) == []
    assert _paths(storage.list()) == ["d1/d2/c.txt", "d10/e.txt"]


def test_delete_invalid_path_raises_before_deleting(storage: Storage) -> None:
    _populate(storage)
    with pytest.raises(InvalidURIError):
        storage.delete(["a.txt", "../escape"])
    assert storage.exists("a.txt")


# ---- create_exclusive ---------------------------------------------------------------------
def test_create_exclusive(storage: Storage) -> None:
    storage.create_exclusive("_0000.arrow", b"first")
    assert storage.read("_0000.arrow") == b"first"
    with pytest.raises(FileExistsError, match="already exists") as e:
        storage.create_exclusive("_0000.arrow", b"second")
    assert storage.uri("_0000.arrow") in str(e.value)
    assert storage.read("_0000.arrow") == b"first"


def test_create_exclusive_over_written_file(storage: Storage) -> None:
    storage.write("hint", b"1")
    with pytest.raises(FileExistsError):
        storage.create_exclusive("hint", b"2")
    assert storage.read("hint") == b"1"


def test_create_exclusive_makes_parents(storage: Storage) -> None:
    storage.create_exclusive("a/b/c/d.binpb", b"x")
    assert storage.read("a/b/c/d.binpb") == b"x"
    assert storage.list_dirs("a/b")[0] == ["a/b/c"]


def test_create_exclusive_refuses_empty_data(storage: Storage) -> None:
    with pytest.raises(ValueError, match="empty"):
        storage.create_exclusive("marker", b"")
    assert not storage.exists("marker")
    storage.create_exclusive("marker", b"1")
    with pytest.raises(ValueError):  # checked before anything else, even on an existing file
        storage.create_exclusive("marker", b"")
    assert storage.read("marker") == b"1"


def test_create_exclusive_leaves_nothing_behind(storage: Storage) -> None:
    storage.create_exclusive("d/root", b"1")
    with pytest.raises(FileExistsError):
        storage.create_exclusive("d/root", b"2")
    assert _paths(storage.list()) == ["d/root"]
    dirs, files = storage.list_dirs("d")
    assert dirs == [] and _paths(files) == ["d/root"]


def test_create_exclusive_accepts_bytes_like(storage: Storage) -> None:
    storage.create_exclusive("ba", bytearray(b"abc"))
    storage.create_exclusive("mv", memoryview(b"xyz"))
    assert storage.read("ba") == b"abc" and storage.read("mv") == b"xyz"


# ---- paths: relative vs absolute ------------------------------------------------------------
def test_uri_of_relative_and_absolute(storage: Storage) -> None:
    root = storage.root
    assert storage.uri("a/b.arrow") == root + "/a/b.arrow"
    assert storage.uri("a//b.arrow/") == root + "/a/b.arrow"
    assert storage.uri("") == root  # no trailing slash
    assert storage.uri(".") == root
    assert storage.uri(storage.uri("x")) == storage.uri("x")
    assert parse_uri(storage.uri("x")).uri == storage.uri("x")  # canonical


def test_relative(storage: Storage) -> None:
    root = storage.root
    assert storage.relative(storage.uri("a/b")) == "a/b"
    assert storage.relative(root) == ""
    assert storage.relative(root + "/") == ""
    assert storage.relative(root + "//a//b/") == "a/b"
    assert storage.relative(root + "2/x") is None  # a sibling that shares the root's spelling
    assert storage.relative(root.rsplit("/", 1)[0] + "/other/x") is None
    assert storage.relative("a//b/") == "a/b"  # already relative: normalized, not re-rooted
    assert storage.relative("") == ""


def test_absolute_and_relative_reach_the_same_file(storage: Storage) -> None:
    storage.write(storage.uri("x/abs.bin"), b"via-absolute")
    assert storage.read("x/abs.bin") == b"via-absolute"
    storage.create_exclusive("x/rel.bin", b"via-relative")
    assert storage.read(storage.uri("x/rel.bin")) == b"via-relative"
    assert storage.exists(storage.uri("x/rel.bin"))
    with pytest.raises(FileExistsError):
        storage.create_exclusive(storage.uri("x/rel.bin"), b"again")
    assert _paths(storage.list(storage.uri("x"))) == ["x/abs.bin", "x/rel.bin"]


def test_path_on_another_scheme_is_refused(storage: Storage) -> None:
    other = "memory://elsewhere/x" if storage.scheme != "memory" else "file:///tmp/elsewhere/x"
    with pytest.raises(StorageError, match="this storage is"):
        storage.read(other)
    with pytest.raises(StorageError):
        storage.create_exclusive(other, b"1")


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "a/.."])
def test_dotdot_paths_are_refused(storage: Storage, bad: str) -> None:
    with pytest.raises(InvalidURIError):
        storage.write(bad, b"1")
    with pytest.raises(InvalidURIError):
        storage.read(bad)
    with pytest.raises(InvalidURIError):
        storage.create_exclusive(bad, b"1")


def test_for_uri(storage: Storage) -> None:
    storage.write("sub/dir/f", b"1")
    sub = storage.for_uri(storage.uri("sub"))
    assert sub.root == storage.uri("sub")
    assert sub.options == storage.options
    assert sub.read("dir/f") == b"1"
    assert storage.relative(sub.uri("dir/f")) == "sub/dir/f"


# ---- pickling ------------------------------------------------------------------------------
def test_pickle_roundtrip_still_reads(storage: Storage) -> None:
    fresh = pickle.loads(pickle.dumps(storage))  # never used: no filesystem yet
    storage.write("p/x", b"pickled")
    assert storage.read("p/x") == b"pickled"
    _ = storage.fs  # a live filesystem (an s3fs client, an event loop) must not be pickled
    clone = pickle.loads(pickle.dumps(storage))
    assert (clone.root, clone.scheme, clone.options) == (storage.root, storage.scheme, storage.options)
    assert repr(clone) == repr(storage)
    for s in (clone, fresh):
        assert s.read("p/x") == b"pickled"
        assert s.exists("p/x")
    clone.create_exclusive("p/y", b"from-clone")
    assert storage.read("p/y") == b"from-clone"
    with pytest.raises(FileExistsError):
        fresh.create_exclusive("p/y", b"from-fresh")


# ---- several instances on one root (several writers, executors) --------------------------------
def test_new_files_of_another_writer_are_seen_after_a_listing(backend: Any) -> None:
    # Regression: s3fs's listings cache answered exists()/info() from an earlier listing, so a
    # root file committed by another writer looked missing (and info() said "directory").
    a, b = backend.new(client="a"), backend.new(client="b")
    if backend.kind == "s3":
        assert a.fs is not b.fs
    a.write("v/_1", b"1")
    assert [f.path for f in a.list_dirs("v")[1]] == ["v/_1"]
    assert _paths(a.list("v")) == ["v/_1"]
    assert not a.exists("v/_2")
    b.create_exclusive("v/_2", b"22")
    assert a.exists("v/_2")
    assert a.info("v/_2").size == 2
    assert a.read("v/_2") == b"22"
    assert [f.path for f in a.list_dirs("v")[1]] == ["v/_1", "v/_2"]
    assert _paths(a.list("v", recursive=False)) == ["v/_1", "v/_2"]
    with pytest.raises(FileExistsError):
        a.create_exclusive("v/_2", b"again")
    b.delete(["v/_1"])
    assert not a.exists("v/_1")
    assert _paths(a.list("v")) == ["v/_2"]


# =============================================================================================
# Local files only
# =============================================================================================
@pytest.fixture
def local(tmp_path: Any) -> Storage:
    return Storage(str(tmp_path / "lake"))


def _tmp_files(root: str) -> list[str]:
    found = []
    for dirpath, _, names in os.walk(root):
        found += [os.path.join(dirpath, n) for n in names if local_storage.is_tmp(n)]
    return found


def test_local_root_forms(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for spelling in ("lake", "./lake/", str(tmp_path / "lake"), f"file://{tmp_path}/lake", f"file:{tmp_path}/lake"):
        s = Storage(spelling)
        assert s.root == f"file://{tmp_path}/lake"
        assert s.scheme == "file"
        assert s.options == {}


def test_local_filesystem_root() -> None:
    # Regression: joining onto "file:///" produced "file:/a", which then parsed as a relative path.
    s = Storage("/")
    assert s.root == "file:///"
    assert s.uri("tmp/x") == "file:///tmp/x"
    assert s.uri("") == "file:///"
    assert s.relative("file:///tmp/x") == "tmp/x"
    assert s.relative("/tmp/x") == "tmp/x"
    assert s._fs_path("tmp/x") == "/tmp/x"


def test_local_readers_never_see_partial_content(local: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(256 * 1024)
    real_link = os.link
    seen: list[tuple[bool, int]] = []

    def checking_link(src: str, dst: str, *args: Any, **kwargs: Any) -> None:
        # At the moment the name appears, the content is already complete.
        seen.append((os.path.exists(dst), os.path.getsize(src)))
        real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(local_storage.os, "link", checking_link)
    local.create_exclusive("_root.arrow", data)
    assert seen == [(False, len(data))]
    assert local.read("_root.arrow") == data
    assert _tmp_files(local._fs_path("")) == []


def test_local_concurrent_reader_sees_whole_files(local: Storage) -> None:
    size = 512 * 1024
    names = [f"v/_{i}" for i in range(12)]
    stop = threading.Event()
    bad: list[str] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            for n in names:
                try:
                    got = local.read(n)
                except FileNotFoundError:
                    continue
                reads[0] += 1
                if len(got) != size or got != bytes([got[0]]) * size:
                    bad.append(n)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i, n in enumerate(names):
            local.create_exclusive(n, bytes([i + 1]) * size)
            local.write(n + ".hint", bytes([i + 1]) * size)
    finally:
        stop.set()
        t.join()
    assert bad == []
    assert _tmp_files(local._fs_path("")) == []


def test_local_temporary_files_are_not_listed(local: Storage) -> None:
    local.write("d/real", b"1")
    local.write("d/notes.tmp-file", b"2")  # looks like a temp name, but is not one of ours
    fp = local._fs_path("d/real")
    with open(f"{fp}.tmp-{'a' * 32}", "wb") as f:  # an in-flight (or crashed) write
        f.write(b"partial")
    assert _paths(local.list()) == ["d/notes.tmp-file", "d/real"]
    assert _paths(local.list_dirs("d")[1]) == ["d/notes.tmp-file", "d/real"]


def test_local_failed_writes_leave_no_temporary_file(local: Storage) -> None:
    local.write("d/keep", b"1")
    with pytest.raises(TypeError):
        local.create_exclusive("d/x", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        local.write("d/y", "not bytes")  # type: ignore[arg-type]
    assert not local.exists("d/x") and not local.exists("d/y")
    assert _tmp_files(local._fs_path("")) == []
    assert sorted(os.listdir(local._fs_path("d"))) == ["keep"]


def test_local_without_hard_links_is_still_exclusive(local: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_link(src: str, dst: str, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted", src)

    monkeypatch.setattr(local_storage.os, "link", no_link)
    local.create_exclusive("r", b"first")
    with pytest.raises(FileExistsError):
        local.create_exclusive("r", b"second")
    assert local.read("r") == b"first"
    assert _tmp_files(local._fs_path("")) == []


def test_local_link_errors_propagate(local: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(src: str, dst: str, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", src)

    monkeypatch.setattr(local_storage.os, "link", full_disk)
    with pytest.raises(OSError) as e:
        local.create_exclusive("r", b"1")
    assert e.value.errno == errno.ENOSPC and not isinstance(e.value, FileExistsError)
    assert not local.exists("r")
    assert _tmp_files(local._fs_path("")) == []


def test_local_delete_reports_failures(local: Storage) -> None:
    local.write("d/sub/f", b"1")
    local.write("g", b"1")
    failures = local.delete(["d/sub", "g", "missing"])  # a directory is not deleted as a file
    assert [p for p, _ in failures] == ["d/sub"]
    assert local.exists("d/sub/f") and not local.exists("g")


# =============================================================================================
# S3 only
# =============================================================================================
@pytest.mark.s3
def test_s3_bucket_root(s3_bucket: str, s3_storage_options: dict[str, Any]) -> None:
    s = Storage(s3_bucket, s3_storage_options)
    assert s.root == s3_bucket
    _populate(s)
    assert _paths(s.list()) == sorted(LAYOUT)
    assert s.list_dirs()[0] == ["d1", "d10"]
    assert s.relative(s3_bucket + "/d1/b.txt") == "d1/b.txt"
    assert s.read(s3_bucket.replace("s3://", "s3a://") + "/a.txt") == b"A"
    assert s.delete(list(LAYOUT)) == []
    assert list(s.list()) == []


@pytest.mark.s3
def test_s3_aliases_reach_the_same_objects(s3_bucket: str, s3_storage_options: dict[str, Any]) -> None:
    s = Storage(s3_bucket.replace("s3://", "s3a://") + "/lake/", s3_storage_options)
    assert s.root == s3_bucket + "/lake"
    s.create_exclusive("x", b"1")
    with pytest.raises(FileExistsError):
        s.create_exclusive(s3_bucket.replace("s3://", "s3n://") + "/lake/x", b"2")


@pytest.mark.s3
def test_s3_delete_in_batches(
    s3_bucket: str, s3_storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Storage(s3_bucket + "/lake", s3_storage_options)
    names = [f"f{i}" for i in range(8)]
    for n in names:
        s.write(n, b"1")
    calls: list[int] = []
    real = s.fs.call_s3
    real_engine = object_io.obstore.delete_async

    def counting(method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "delete_objects":
            calls.append(len(kwargs["Delete"]["Objects"]))
        return real(method, *args, **kwargs)

    async def engine_counting(store: Any, keys: list[str]) -> None:
        calls.append(len(keys))
        await real_engine(store, keys)

    monkeypatch.setattr(filesystem_mod, "_S3_DELETE_BATCH", 3)
    monkeypatch.setattr(s.fs, "call_s3", counting)
    monkeypatch.setattr(object_io.obstore, "delete_async", engine_counting)
    assert s.delete(names + ["missing"]) == []
    assert sorted(calls) == [3, 3, 3]  # through the engine (in flight together) or botocore
    assert list(s.list()) == []


@pytest.mark.s3
def test_s3_delete_reports_what_s3_refused(
    s3_bucket: str, s3_storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # s3fs's own bulk delete drops the per-key Errors of DeleteObjects; ours reports them.
    s = Storage(s3_bucket + "/lake", s3_storage_options)
    s.write("ok", b"1")
    s.write("locked", b"1")
    real = s.fs.call_s3

    def refusing(method: str, *args: Any, **kwargs: Any) -> Any:
        if method != "delete_objects":
            return real(method, *args, **kwargs)
        keys = [o["Key"] for o in kwargs["Delete"]["Objects"]]
        allowed = [k for k in keys if not k.endswith("locked")]
        out = real(method, Bucket=kwargs["Bucket"], Delete={"Objects": [{"Key": k} for k in allowed], "Quiet": True})
        out["Errors"] = [
            {"Key": k, "Code": "AccessDenied", "Message": "Access Denied"} for k in keys if k.endswith("locked")
        ]
        return out

    real_engine = object_io.obstore.delete_async

    async def engine_refusing(store: Any, keys: list[str]) -> None:
        # S3 deletes the rest and refuses the key; obstore raises on it, naming no other key
        await real_engine(store, [k for k in keys if not k.endswith("locked")])
        if any(k.endswith("locked") for k in keys):
            raise OSError("Failed to delete object lake/locked: AccessDenied: Access Denied")

    monkeypatch.setattr(s.fs, "call_s3", refusing)
    monkeypatch.setattr(object_io.obstore, "delete_async", engine_refusing)
    failures = s.delete(["ok", "locked", "missing"])
    assert failures == [("locked", "AccessDenied: Access Denied")]
    assert not s.exists("ok") and s.exists("locked")


@pytest.mark.s3
def test_s3_delete_in_a_missing_bucket_is_reported(s3_bucket: str, s3_storage_options: dict[str, Any]) -> None:
    s = Storage(s3_bucket + "/lake", s3_storage_options)
    s.write("f", b"1")
    gone = "s3://tl-no-such-bucket-here/x"
    failures = s.delete(["f", gone])
    assert [p for p, _ in failures] == [gone]
    assert not s.exists("f")


# ---- S3 error classification (no server needed) --------------------------------------------
def _client_error(code: str, status: int, operation: str = "PutObject") -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
    )


def _wrapped(code: str, status: int, message: str) -> OSError:
    err = OSError(errno.EIO, message)
    err.__cause__ = _client_error(code, status)
    return err


def test_s3_error_classification() -> None:
    assert storage_mod.is_precondition_failed(_wrapped("PreconditionFailed", 412, "pre-conditions did not hold"))
    # Before: any message containing "412" (e.g. in a key name) counted as a lost race.
    assert not storage_mod.is_precondition_failed(_wrapped("AccessDenied", 403, "denied on node-4127.arrow"))
    assert storage_mod.is_precondition_failed(OSError("PreconditionFailed"))  # no botocore detail at all
    assert storage_mod.is_conditional_conflict(_wrapped("ConditionalRequestConflict", 409, "conflict"))
    assert not storage_mod.is_conditional_conflict(_wrapped("SlowDown", 503, "slow down"))


@pytest.fixture
def offline_s3() -> Storage:
    # The fake endpoint is never reached: the client calls the tests fake are put in its place.
    return Storage("s3://tl-offline/lake", {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"})


class _Got:
    """What a fake GET answers (obstore's GetResult, as far as the engine reads it)."""

    def __init__(self, data: bytes):
        self.data = data

    async def bytes_async(self) -> bytes:
        return self.data


def _fake_put(monkeypatch: pytest.MonkeyPatch, fn: Any) -> None:
    """The S3 engine's PUTs answered by `fn(key, data, mode)` (raise to fail; fault injection)."""
    import obstore

    async def put_async(store: Any, key: str, data: bytes, mode: str | None = None, **kw: Any) -> Any:
        fn(key, data, mode)
        return {"e_tag": None, "version": None}

    monkeypatch.setattr(obstore, "put_async", put_async)


def _fake_get(monkeypatch: pytest.MonkeyPatch, fn: Any) -> None:
    import obstore

    async def get_async(store: Any, key: str, **kw: Any) -> Any:
        return _Got(fn(key))

    monkeypatch.setattr(obstore, "get_async", get_async)


def test_s3_create_exclusive_retries_conditional_conflicts(
    offline_s3: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    from obstore.exceptions import GenericError

    assert offline_s3.engine is not None
    calls: list[str] = []

    def flaky(key: str, data: bytes, mode: str) -> None:
        calls.append(mode)
        if len(calls) < 3:
            raise GenericError("Generic S3 error: Error performing PUT: status: 409 Conflict: "
                               "<Code>ConditionalRequestConflict</Code>")

    monkeypatch.setattr(retry_mod.time, "sleep", lambda s: None)
    _fake_put(monkeypatch, flaky)
    offline_s3.create_exclusive("_1", b"data")
    assert calls == ["create", "create", "create"]


def test_s3_create_exclusive_maps_412_and_keeps_other_errors(
    offline_s3: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    from obstore.exceptions import AlreadyExistsError, GenericError, PermissionDeniedError

    def precondition(key: str, data: bytes, mode: str) -> None:
        raise AlreadyExistsError("Object at location lake/_1 already exists: 412 Precondition Failed")

    _fake_put(monkeypatch, precondition)
    # A 412 may be a retry of our own unseen success: the stored bytes decide.
    _fake_get(monkeypatch, lambda key: b"theirs")
    with pytest.raises(FileExistsError, match="already exists: s3://tl-offline/lake/_1"):
        offline_s3.create_exclusive("_1", b"data")
    _fake_get(monkeypatch, lambda key: b"data")
    offline_s3.create_exclusive("_1", b"data")

    def unreadable(key: str) -> bytes:
        raise GenericError("Generic S3 error: error sending request: connection reset reading _1")

    monkeypatch.setattr(retry_mod.time, "sleep", lambda s: None)
    _fake_get(monkeypatch, unreadable)  # unknown, not a lost race
    with pytest.raises(UnknownOutcomeError, match="s3://tl-offline/lake/_1"):
        offline_s3.create_exclusive("_1", b"data")

    def denied(key: str, data: bytes, mode: str) -> None:
        raise PermissionDeniedError("Access Denied for node-4120.arrow")

    _fake_put(monkeypatch, denied)
    with pytest.raises(PermissionError):
        offline_s3.create_exclusive("_1", b"data")

    calls = []

    def always_conflict(key: str, data: bytes, mode: str) -> None:
        calls.append(1)
        raise GenericError("Generic S3 error: status: 409 Conflict: <Code>ConditionalRequestConflict</Code>")

    _fake_put(monkeypatch, always_conflict)
    with pytest.raises(OSError):
        offline_s3.create_exclusive("_1", b"data")
    assert len(calls) == object_storage._S3_CONFLICT_ATTEMPTS


def test_s3_filesystem_has_no_listings_cache(offline_s3: Storage) -> None:
    assert offline_s3.fs.dircache.use_listings_cache is False
    cached = Storage("s3://tl-offline", {**offline_s3.options, "use_listings_cache": True})
    assert cached.fs.dircache.use_listings_cache is True  # an explicit option still wins


def _report_fs_identity(storage: Storage, results: Any) -> None:
    results.put((os.getpid(), id(storage.fs)))


def test_forked_child_builds_its_own_filesystem(offline_s3: Storage) -> None:
    # An s3fs client (and its event loop) must not be reused across fork (Spark's Python
    # workers fork from a daemon): the child builds a new one on first use.
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    ctx = multiprocessing.get_context("fork")
    parent_fs = offline_s3.fs
    results = ctx.Queue()
    p = ctx.Process(target=_report_fs_identity, args=(offline_s3, results), daemon=True)
    p.start()
    try:
        child_pid, child_fs_id = results.get(timeout=60)
        p.join(timeout=30)
    finally:
        if p.is_alive():
            p.terminate()
    assert child_pid != os.getpid()
    assert child_fs_id != id(parent_fs)
    assert offline_s3.fs is parent_fs  # the parent keeps its own


def test_storages_with_equal_options_share_one_filesystem(offline_s3: Storage) -> None:
    same = Storage("s3a://tl-offline/other/root", dict(offline_s3.options))
    assert same.fs is offline_s3.fs
    assert pickle.loads(pickle.dumps(offline_s3)).fs is offline_s3.fs  # e.g. every Spark task
    other = Storage("s3://tl-offline/lake", {**offline_s3.options, "key": "other-key"})
    assert other.fs is not offline_s3.fs
    assert Storage("s3://tl-offline", {**offline_s3.options, "skip_instance_cache": False}).fs is not None
