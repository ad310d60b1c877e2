"""The storage's batches (`Storage.read_many`, `sizes`, `storage.verify`, `list_columns`, `write_many`,
`remove_empty_dirs`, `for_store_of`): what callers ask for, the same answers on every store,
however each store does it (local files through one descriptor of the root, fsspec's
``memory://`` file by file)."""

from __future__ import annotations

import hashlib
import pickle
import uuid

import pytest

from trinitylake.storage import Storage
from trinitylake.storage.verify import verify

FILES = {f"{i % 4:04b}/{i % 3:04b}/f-{i:03d}.bin": bytes([i % 251]) * (10 + i) for i in range(40)}


@pytest.fixture(params=["local", "memory"])
def st(request, tmp_path):
    s = Storage(str(tmp_path / "root")) if request.param == "local" else Storage(f"memory://b-{uuid.uuid4().hex}")
    s.write_many(FILES)
    return s


def test_read_many_answers_each_path_in_order_with_its_error(st):
    paths = [*sorted(FILES)[::-1], "0000/missing.bin", st.uri(sorted(FILES)[0])]
    got = st.read_many(paths)
    assert got[:-2] == [FILES[p] for p in paths[:-2]]
    assert isinstance(got[-2], FileNotFoundError) and "0000/missing.bin" in str(got[-2])
    assert got[-1] == FILES[sorted(FILES)[0]]  # a URI on the same store reads the same file


def test_read_many_bounded_by_bytes_stops_at_the_file_that_reaches_them(tmp_path):
    st = Storage(str(tmp_path))
    st.write_many(FILES)
    paths = sorted(FILES)
    got = st.read_many(paths, max_bytes=FILES[paths[0]].__len__() + 1)
    assert got == [FILES[paths[0]], FILES[paths[1]]]  # the second file reaches the bound
    assert st.read_many(paths, max_bytes=1 << 40) == [FILES[p] for p in paths]


def test_sizes_are_the_files_sizes_and_minus_one_for_missing(st):
    paths = [*sorted(FILES), "0001/nothing.bin"]
    assert st.sizes(paths) == [len(FILES[p]) for p in paths[:-1]] + [-1]


def test_verify_says_ok_missing_or_mismatch(st):
    p, data = next(iter(FILES.items()))
    md5 = hashlib.md5(data).hexdigest()
    assert verify(st, p, len(data), md5) == "ok"
    assert verify(st, p, len(data), hashlib.md5(b"other").hexdigest()) == "mismatch"
    assert verify(st, p, len(data) + 1, md5, checksum=False) == "mismatch"
    assert verify(st, p, len(data), "0" * 32, checksum=False) == "ok"  # the size alone
    assert verify(st, "0000/none.bin", 1, md5) == "missing"


def test_list_columns_is_the_listing_as_columns(st):
    paths, sizes, mtimes = st.list_columns("0001")
    want = {f.path: f.size for f in st.list("0001")}
    assert dict(zip(paths, sizes, strict=True)) == want and len(mtimes) == len(paths)
    assert want == {p: len(d) for p, d in FILES.items() if p.startswith("0001/")}
    assert st.list_columns("1111") == ([], [], [])


def test_one_storage_per_store_kept_by_the_storage_never_pickled(tmp_path):
    st = Storage(str(tmp_path / "a"))
    bucket = f"b-{uuid.uuid4().hex[:8]}"
    other = f"memory://{bucket}/x.bin"  # another store: read through a storage of its own
    s1, p1 = st.storage_of(other)
    s2, _ = st.storage_of(f"memory://{bucket}/y.bin")
    assert s1 is s2 is st.for_store_of(other) and s1 is not st and p1.endswith("/x.bin")
    s1.write(p1, b"x")
    assert st.storage_of(other)[0].read(p1) == b"x"
    assert st.storage_of(f"file://{tmp_path}/elsewhere.bin")[0] is st  # the same kind of store: itself
    assert st.storage_of("rel/key.bin") == (st, "rel/key.bin")
    assert pickle.loads(pickle.dumps(st))._stores == {}


def test_remove_empty_dirs_keeps_a_folder_that_holds_a_file(tmp_path):
    st = Storage(str(tmp_path))
    st.write("a/b/c/keep.bin", b"k")
    st.write("a/d/e/gone.bin", b"g")
    st.delete(["a/d/e/gone.bin"])
    st.remove_empty_dirs(["a/d", "a/d/e", "a/b/c", "a"])
    assert not (tmp_path / "a/d").exists()
    assert (tmp_path / "a/b/c/keep.bin").read_bytes() == b"k"
