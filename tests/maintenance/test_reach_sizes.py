"""Sizing reached definitions (`reach.sizes_of`): the bulk local path and its fallbacks."""

from __future__ import annotations

import os

import pytest

from tests.support.faults import FaultSpec, injected
from trinitylake.errors import StorageError
from trinitylake.maintenance import reach as R


@pytest.fixture
def tree(tmp_path):
    """Files of distinct sizes under a few directories, and their keys in an unsorted order."""
    keys = []
    for i in range(300):
        key = f"{i % 7:04b}/{i % 3:04b}/def-{i:05d}.binpb"
        p = tmp_path / key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * (i + 1))
        keys.append(key)
    keys.reverse()  # not path order: the bulk path must scatter sizes back to the caller's order
    return tmp_path, keys


def _expected(root, keys):
    return [os.path.getsize(root / k) if (root / k).exists() else -1 for k in keys]


@pytest.mark.parametrize("chunk", [4, 1 << 20])  # several threaded chunks, and one serial chunk
def test_bulk_local_sizes_keep_the_callers_order(tree, monkeypatch, chunk):
    root, keys = tree
    monkeypatch.setattr(R, "SIZE_CHUNK", chunk)
    keys = keys + ["0000/0000/missing.binpb", "nowhere/at/all.binpb"]
    reader = R.Reader(str(root))
    assert R._local_sizes(reader, keys) is not None  # the bulk path was taken
    assert R.sizes_of(reader, keys) == _expected(root, keys)
    assert R.sizes_of(reader, keys)[-2:] == [-1, -1]


def test_keys_outside_the_root_go_through_the_storage(tree, tmp_path_factory):
    root, keys = tree
    other = tmp_path_factory.mktemp("elsewhere")
    (other / "e.binpb").write_bytes(b"12345")
    reader = R.Reader(str(root))
    mixed = keys[:5] + [f"file://{other}/e.binpb"]
    assert R._local_sizes(reader, mixed) is None
    assert R.sizes_of(reader, mixed) == _expected(root, keys[:5]) + [5]


def test_a_permanent_fault_of_the_disk_surfaces_as_a_typed_error(tree):
    # A ``stat`` the disk refuses (injected at the system call and at the storage): the bulk
    # path asks the storage again, whose typed error surfaces.
    root, keys = tree
    reader = R.Reader(str(root))
    with injected(FaultSpec(permanent_paths=r"def-0004", permanent_ops=("info",))) as inj:
        with pytest.raises(StorageError):
            R.sizes_of(reader, keys, io_threads=1)
        assert inj.counts["op:info"] >= 2  # the system call, then the storage
    assert R.sizes_of(reader, keys) == _expected(root, keys)  # uninstalled again


def test_transient_faults_of_the_disk_are_retried(tree):
    root, keys = tree
    reader = R.Reader(str(root))
    with injected(FaultSpec(transient_rate=0.3, ops=("info",), seed=3)) as inj:
        assert R.sizes_of(reader, keys, io_threads=1) == _expected(root, keys)
    assert inj.injected > 0


def test_a_stat_error_other_than_missing_is_asked_again_through_the_storage(tree, monkeypatch):
    root, keys = tree
    reader = R.Reader(str(root))
    asked = []
    real_stat = os.stat

    def flaky_stat(path, *a, **kw):
        if str(path).endswith("def-00007.binpb") and kw.get("dir_fd") is not None:
            raise OSError(5, "Input/output error")
        return real_stat(path, *a, **kw)

    real_size = R.Reader.size

    def size(self, key):
        asked.append(key)
        return real_size(self, key)

    monkeypatch.setattr(os, "stat", flaky_stat)
    monkeypatch.setattr(R.Reader, "size", size)
    assert R.sizes_of(reader, keys) == _expected(root, keys)
    assert [k.rsplit("/", 1)[1] for k in asked] == ["def-00007.binpb"]
