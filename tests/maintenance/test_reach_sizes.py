"""Sizing reached definitions (`reach.sizes_of`): the bulk local path and its fallbacks."""

from __future__ import annotations

import os

import pytest

from tests.support.faults import FaultSpec, injected
from trinitylake.errors import StorageError
from trinitylake.storage import Storage, local_storage
from trinitylake.treewalk import reach as R


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
    monkeypatch.setattr(local_storage, "SIZE_CHUNK", chunk)
    keys = keys + ["0000/0000/missing.binpb", "nowhere/at/all.binpb"]
    reader = R.Reader(str(root))
    monkeypatch.setattr(Storage, "info", lambda *a: pytest.fail("asked one by one, not in the bulk path"))
    assert R.sizes_of(reader, keys) == _expected(root, keys)
    assert R.sizes_of(reader, keys)[-2:] == [-1, -1]


def test_keys_outside_the_root_go_through_the_storage(tree, tmp_path_factory):
    root, keys = tree
    other = tmp_path_factory.mktemp("elsewhere")
    (other / "e.binpb").write_bytes(b"12345")
    reader = R.Reader(str(root))
    mixed = keys[:5] + [f"file://{other}/e.binpb"]
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

    real_info = Storage.info

    def info(self, key):
        asked.append(key)
        return real_info(self, key)

    monkeypatch.setattr(os, "stat", flaky_stat)
    monkeypatch.setattr(Storage, "info", info)
    assert R.sizes_of(reader, keys) == _expected(root, keys)
    assert [k.rsplit("/", 1)[1] for k in asked] == ["def-00007.binpb"]


def test_object_store_sizes_come_from_folder_listings_never_one_request_per_key(monkeypatch):
    """On a store that is not local disk (memory:// here; S3 through a request-capturing proxy
    in `test_walk_self_contained.py`), every key is sized from a listing: hashed keys, keys at
    the root and in other folders, and absolute keys of another tree; each folder listed once."""
    import uuid

    from trinitylake.storage import Storage

    base = f"memory://sizes-{uuid.uuid4().hex[:8]}"
    lake, other = Storage(f"{base}/lh"), Storage(f"{base}/exports/e1")
    keys, want = [], []
    for i in range(40):
        key = f"{i % 5:04b}/{i % 3:04b}/{i % 2:04b}/0000000{i % 2}-def-{i:03d}.binpb"
        lake.write(key, b"x" * (i + 1))
        keys.append(key)
        want.append(i + 1)
    for key, size in (("_lakehouse_def_a.binpb", 7), ("_lakehouse_def_b.binpb", 8), ("tables/t1/def.binpb", 9)):
        lake.write(key, b"y" * size)
        keys.append(key)
        want.append(size)
    for j in range(3):
        other.write(f"0001/0010/0011/00000001-def-{j}.binpb", b"z" * (20 + j))
        keys.append(other.uri(f"0001/0010/0011/00000001-def-{j}.binpb"))
        want.append(20 + j)
    keys.append("0001/0001/0001/00000001-gone.binpb")
    keys.append(other.uri("0001/0010/0011/00000001-gone.binpb"))
    want += [-1, -1]
    listed: list[tuple[str, str]] = []
    real_list, real_dirs = Storage.list, Storage.list_dirs

    def spy_list(self, prefix="", recursive=True):
        listed.append(("list", prefix))
        return real_list(self, prefix, recursive)

    def spy_dirs(self, prefix=""):
        listed.append(("dirs", prefix))
        return real_dirs(self, prefix)

    monkeypatch.setattr(Storage, "list", spy_list)
    monkeypatch.setattr(Storage, "list_dirs", spy_dirs)
    monkeypatch.setattr(R.Reader, "size", lambda self, k: pytest.fail(f"{k} sized by one request"))
    reader = R.Reader(lake.root)
    # Few keys: one listing of each key's own folder.
    few = [keys[0], keys[40], keys[42], keys[43], keys[-1]]
    assert R.sizes_of(reader, few) == [want[keys.index(k)] for k in few]
    assert len(listed) == len({R.size_folder(k) for k in few}) == 4  # the two of e1 share theirs
    # Many hashed keys: one recursive listing of the root (a small lakehouse) and one of the
    # other tree's folder; then per top-level hash folder (a big one).
    for one_stream, folders in ((R.LIST_ONE_STREAM_KEYS, 2), (1, 5 + 3)):  # 5 hash folders, "", tables/t1, e1
        monkeypatch.setattr(R, "LIST_ONE_STREAM_KEYS", one_stream)
        listed.clear()
        assert R.sizes_of(reader, keys) == want
        assert len(listed) == len(set(listed)) == folders, listed
