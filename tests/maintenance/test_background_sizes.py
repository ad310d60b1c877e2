"""`BackgroundSizes`: definition sizes from a second process, in feeding order, or None (and the
caller sizes in process) whenever the answer could be out of line."""

from __future__ import annotations

import os

import pytest

from trinitylake.storage import Storage
from trinitylake.storage.background_sizes import BackgroundSizes


@pytest.fixture
def tree(tmp_path):
    keys = []
    for i in range(120):
        key = f"{i % 5:04b}/def-{i:05d}.binpb"
        p = tmp_path / key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * (i + 3))
        keys.append(key)
    return tmp_path, keys


def test_sizes_come_back_in_feeding_order_across_blocks(tree):
    root, keys = tree
    keys = [*keys[::-1], "0001/missing.binpb", "def-00000.binpb/under-a-file"]
    (root / "def-00000.binpb").write_bytes(b"f")
    with BackgroundSizes(Storage(str(root)), start_after=10) as s:
        for i in range(0, len(keys), 7):
            s.add(keys[i : i + 7])
        got = s.finish(len(keys))
    want = [os.path.getsize(root / k) for k in keys[:-2]] + [-1, -2]  # -2: ENOTDIR, the storage asks again
    assert got is not None and list(got) == want


def test_a_small_walk_never_starts_the_child(tree):
    root, keys = tree
    s = BackgroundSizes(Storage(str(root)), start_after=len(keys) + 1)
    s.add(keys)
    assert s.finish(len(keys)) is None and s._proc is None


@pytest.mark.parametrize("bad", ["s3://bucket/def.binpb", "/etc/passwd", "file:///etc/passwd", "a\nb"])
def test_a_key_that_is_not_plain_relative_abandons_the_child(tree, bad):
    root, keys = tree
    with BackgroundSizes(Storage(str(root)), start_after=1) as s:
        s.add(keys[:5])
        s.add([bad])
        s.add(keys[5:10])
        assert not s.active
        assert s.finish(11) is None


def test_a_dead_child_means_no_answer(tree):
    root, keys = tree
    with BackgroundSizes(Storage(str(root)), start_after=1) as s:
        s.add(keys[:5])
        s._proc.kill()
        s._proc.wait()
        s.add(keys[5:])  # writing to a dead child fails, or its answer is short
        assert s.finish(len(keys)) is None
