"""The reliability verifier itself: its floor is the committed ``oldest_retained_version``, so
a root deleted at or above it is reported even when it was the oldest root left."""

from __future__ import annotations

from tests.reliability._verify import Verifier
from trinitylake.format.paths import root_name
from trinitylake.lakehouse import Lakehouse


def _raise_floor(lh: Lakehouse, floor: int) -> None:
    def fn(d):
        d.oldest_retained_version = floor

    txn = lh.begin()
    txn.mutate_definition(fn, f"floor {floor}")
    txn.commit()


def test_a_deleted_retained_root_is_reported_even_when_it_is_the_oldest_left(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    for i in range(6):
        lh.create_namespace(f"n{i}")
    _raise_floor(lh, 3)
    lh.storage.delete([root_name(v) for v in range(3)])  # a correct expire of 0..2
    assert Verifier(lh.uri).check() == []
    lh.storage.delete([root_name(3)])  # one too many: version 3 is retained
    found = Verifier(lh.uri).check()
    assert found == ["versions missing between 3 and 7: [3]"]


def test_a_floor_that_goes_down_is_reported(tmp_path):
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    lh.create_namespace("a")
    _raise_floor(lh, 1)
    v = Verifier(lh.uri)
    assert v.check() == []
    _raise_floor(lh, 0)
    assert "oldest_retained_version went down from 1 to 0" in v.check()
