"""The walk's rules (present, outside) and expire's owned rule: each adapter applies the one
definition, so the Python value and the Arrow array give the same answer (the Spark column
adapters run in tests/spark/test_walk.py and test_expire.py)."""

from __future__ import annotations

import pyarrow as pa

from trinitylake.format.paths import is_format_owned, root_name
from trinitylake.jobs.expire import rules as E
from trinitylake.treewalk import walk_rules as W

SIZES = [-1, 0, 1, 4096, None]
PATHS = [root_name(3), "_lakehouse_def_0123abcd-0123-4567-89ab-0123456789ab.binpb",
         "0110/0101/0000/01010101-t.arrow", "0110/0101/0000/01010101-t/data/part-0.arrow",
         "_latest_hint.txt", "_control/x.json", "s3://b/lh/0110/0101/0000/01010101-t.arrow", ""]


def test_present_agrees() -> None:
    arrow = W.present_arrow(pa.array(SIZES, pa.int64())).to_pylist()
    assert [W.present(s) if s is not None else None for s in SIZES] == arrow
    assert W.present(W.UNKNOWN_SIZE) is False and W.present(0) is True and W.present(None) is False


def test_known_bytes_agrees() -> None:
    arrow = W.known_bytes_arrow(pa.array(SIZES[:-1], pa.int64())).to_pylist()
    assert arrow == [W.known_bytes(s) for s in SIZES[:-1]] == [0, 0, 1, 4096]


def test_outside_agrees() -> None:
    assert W.outside_arrow(pa.array(PATHS)).to_pylist() == [W.outside(p) for p in PATHS]
    assert [p for p in PATHS if W.outside(p)] == ["s3://b/lh/0110/0101/0000/01010101-t.arrow"]


def test_owned_agrees_with_format() -> None:
    assert E.owned_arrow(pa.array([*PATHS, None])).to_pylist() == [E.owned(p) for p in PATHS] + [False]
    assert [E.owned(p) for p in PATHS] == [is_format_owned(p) for p in PATHS]
