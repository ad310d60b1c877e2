"""`LocalFiles`: the lean local I/O of the export copy keeps the storage's contract."""

from __future__ import annotations

import os

import pytest

from tests.support.faults import FaultSpec, injected
from trinitylake.errors import StorageError
from trinitylake.storage import Storage
from trinitylake.storage.local_files import READ_BUFFER, LocalFiles


@pytest.fixture(params=["anonymous", "named"])
def files(request, tmp_path) -> LocalFiles:
    lf = LocalFiles(Storage(str(tmp_path)))
    if request.param == "named":
        lf._anonymous = False  # the fallback of filesystems without O_TMPFILE or /proc
    elif not lf._anonymous:
        pytest.fail("this Linux machine should support O_TMPFILE with /proc")
    return lf


def _all_names(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_create_read_info_round_trip(files, tmp_path):
    files.create_exclusive("a/b/c.bin", b"hello")
    assert files.read("a/b/c.bin") == b"hello"
    assert files.info("a/b/c.bin").size == 5
    assert oct(os.stat(tmp_path / "a/b/c.bin").st_mode & 0o777) == "0o644"
    assert _all_names(tmp_path) == ["a/b/c.bin"]  # no temporary left behind


def test_create_never_overwrites(files, tmp_path):
    files.create_exclusive("x.bin", b"first")
    with pytest.raises(FileExistsError, match="x.bin"):
        files.create_exclusive("x.bin", b"second")
    assert (tmp_path / "x.bin").read_bytes() == b"first"
    assert _all_names(tmp_path) == ["x.bin"]


def test_read_larger_than_the_buffer(files, tmp_path):
    data = os.urandom(3 * READ_BUFFER + 17)
    files.create_exclusive("big.bin", data)
    assert files.read("big.bin") == data
    exact = os.urandom(READ_BUFFER)  # exactly one buffer: the short-read shortcut must not lie
    files.create_exclusive("exact.bin", exact)
    assert files.read("exact.bin") == exact


def test_missing_files_name_the_uri(files):
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        files.read("nope.bin")
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        files.info("nope.bin")


def test_directories_are_not_files(files, tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(FileNotFoundError):
        files.info("d")


def test_empty_exclusive_create_is_refused(files):
    with pytest.raises(ValueError, match="empty"):
        files.create_exclusive("e.bin", b"")


def test_ensure_dirs_then_create(files, tmp_path):
    files.ensure_dirs(["p/q/r/1.bin", "p/q/2.bin", "s/3.bin"])
    assert (tmp_path / "p/q/r").is_dir() and (tmp_path / "s").is_dir()
    files.create_exclusive("p/q/r/1.bin", b"1")
    assert files.read("p/q/r/1.bin") == b"1"


def test_transient_faults_are_retried_and_ambiguous_creates_recognised(files, tmp_path):
    # Transient faults, some raised after the create took effect: the retry finds its own
    # bytes in place and succeeds; nothing else is left behind.
    spec = FaultSpec(transient_rate=0.5, after_share=0.5, max_consecutive=2, seed=7,
                     ops=("create_exclusive", "read", "info"))
    with injected(spec) as inj:
        for i in range(40):
            files.create_exclusive(f"f/{i}.bin", f"payload {i}".encode())
        for i in range(40):
            assert files.read(f"f/{i}.bin") == f"payload {i}".encode()
    assert inj.injected > 0  # the faults did happen
    assert _all_names(tmp_path) == sorted(f"f/{i}.bin" for i in range(40))


def test_permanent_faults_are_typed(files):
    with injected(FaultSpec(permanent_paths=r"denied", permanent_ops=("create_exclusive",))):
        with pytest.raises((StorageError, PermissionError)):
            files.create_exclusive("denied.bin", b"x")


def test_of_wraps_only_local_storage(tmp_path):
    s = Storage(str(tmp_path))
    lf = LocalFiles.of(s)
    assert isinstance(lf, LocalFiles) and LocalFiles.of(lf) is lf
    assert lf.root == s.root and lf.uri("k") == s.uri("k")  # everything else is the storage's
