"""Root node file names (bit-reversed 64-bit versions) and hash-prefixed paths."""

from __future__ import annotations

import re
import uuid

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.format import oracle
from trinitylake.errors import ValidationError
from trinitylake.format import paths as P

# Vectors from the Java reference's TestFileLocations.
JAVA_ROOT_VECTORS = {
    0: "_" + "0" * 64 + ".arrow",
    1: "_1" + "0" * 63 + ".arrow",
    100: "_00100110" + "0" * 56 + ".arrow",
    12345678: "_0111001010000110001111010000000000000000000000000000000000000000.arrow",
    9223372036854775802: "_0101111111111111111111111111111111111111111111111111111111111110.arrow",
}


@pytest.mark.parametrize(("version", "name"), sorted(JAVA_ROOT_VECTORS.items()))
def test_root_name_java_vectors(version, name):
    assert P.root_name(version) == name
    assert P.root_version(name) == version
    assert P.is_root_name(name)
    assert oracle.root_name(version) == name


def test_root_name_extremes_and_paths():
    top = (1 << 64) - 1
    assert P.root_name(top) == "_" + "1" * 64 + ".arrow"
    assert P.root_version(P.root_name(top)) == top
    # root_version accepts a path ending in a root name.
    assert P.root_version("some/dir/" + P.root_name(42)) == 42
    # Consecutive versions differ in the first character: they spread over key prefixes.
    assert P.root_name(6)[1] != P.root_name(7)[1]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, (1 << 64) - 1))
def test_root_name_round_trip(v):
    name = P.root_name(v)
    assert len(name) == 1 + 64 + len(".arrow")
    assert P.root_version(name) == v
    assert oracle.root_name(v) == name and oracle.root_version(name) == v


@pytest.mark.parametrize("bad", [-1, 1 << 64, 1.0, "1", None])
def test_root_name_rejects_out_of_range(bad):
    with pytest.raises(ValidationError):
        P.root_name(bad)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "_0.arrow",
        "_" + "0" * 63 + ".arrow",  # 63 bits
        "_" + "0" * 65 + ".arrow",  # 65 bits
        "_" + "0" * 32 + ".arrow",  # the spec doc's 32-bit example width
        "_" + "0" * 63 + "2.arrow",
        "_" + "0" * 64 + ".parquet",
        "0" * 64 + ".arrow",
        "_" + "0" * 64 + ".arrow.tmp",
        "_lakehouse_def_x.binpb",
        "_latest_hint.txt",
    ],
)
def test_root_version_rejects_invalid_names(bad):
    assert not P.is_root_name(bad)
    with pytest.raises(ValidationError):
        P.root_version(bad)


# ---- hash prefixes ----------------------------------------------------------------------
def test_murmur_oracle_known_vectors():
    assert oracle.murmur3_32(b"") == 0
    assert oracle.murmur3_32(b"hello") == 0x248BFA47
    assert oracle.murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723


def test_format_md_examples():
    # FORMAT.md §1 examples; both were verified against mmh3 and the oracle (they agree).
    n = "node-6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8.arrow"
    assert P.hashed_path(n) == "0110/0000/1011/01111000-" + n
    assert oracle.hashed_path(n) == P.hashed_path(n)
    # The doc elides the uuid of its second example ("6fcb514b-…"); with the same uuid it matches.
    d = "ns1-t1-6fcb514b-b878-4c9d-95b7-8dc3a7ce6fd8.binpb"
    assert P.hashed_path(d) == "1100/0101/0000/01001101-" + d
    assert oracle.hashed_path(d) == P.hashed_path(d)


def test_hash_is_unsigned_low_20_bits():
    # Pick names whose signed mmh3 is negative: a signed/unsigned mix-up would change the bits.
    negatives = [n for n in (f"node-{i}.arrow" for i in range(200)) if mmh3.hash(n.encode(), 0, signed=True) < 0]
    assert len(negatives) > 20
    for n in negatives:
        h = mmh3.hash(n.encode(), 0, signed=False)
        assert h == oracle.murmur3_32(n.encode())
        bits = format(h & 0xFFFFF, "020b")
        assert P.hashed_path(n) == f"{bits[:4]}/{bits[4:8]}/{bits[8:12]}/{bits[12:]}-{n}"


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/"), min_size=1, max_size=60))
def test_hashed_path_matches_oracle(name):
    got = P.hashed_path(name)
    assert got == oracle.hashed_path(name)
    m = oracle.HASHED_RE.match(got)
    assert m and m.group(5) == name
    assert [len(m.group(i)) for i in range(1, 5)] == [4, 4, 4, 8]


def test_hashed_path_replaces_slashes():
    assert P.hashed_path("a/b.binpb") == oracle.hashed_path("a-b.binpb")


def test_generated_paths_are_hash_prefixed_and_unique():
    made = [P.new_node_path(), P.namespace_def_path("ns1"), P.table_def_path("ns1", "t1"), P.view_def_path("ns1", "v1")]
    for p in made:
        m = oracle.HASHED_RE.match(p)
        assert m, p
        assert oracle.hashed_path(m.group(5)) == p
        assert P.is_format_owned(p)
    assert re.fullmatch(r"node-[0-9a-f-]{36}\.arrow", oracle.HASHED_RE.match(made[0]).group(5))
    assert re.fullmatch(r"ns1-t1-[0-9a-f-]{36}\.binpb", oracle.HASHED_RE.match(made[2]).group(5))
    assert re.fullmatch(r"view-ns1-v1-[0-9a-f-]{36}\.binpb", oracle.HASHED_RE.match(made[3]).group(5))
    assert P.new_node_path() != P.new_node_path()


def test_lakehouse_def_name_and_ownership():
    name = P.lakehouse_def_name()
    assert P.LAKEHOUSE_DEF_RE.match(name)
    u = str(uuid.uuid4())
    assert P.lakehouse_def_name(u) == f"_lakehouse_def_{u}.binpb"
    assert P.is_format_owned(name)
    assert P.is_format_owned(P.root_name(3))
    for not_owned in ("_latest_hint.txt", "sales.orders/metadata/v1.metadata.json", "_control/_delta_log/0.json",
                      "0000/0000/0000/00000000-data.parquet"):
        assert not P.is_format_owned(not_owned)


@pytest.mark.parametrize(
    ("data", "want"),
    [(b"100", 100), (b"0", 0), (b" 7\n", 7), (b"", None), (b"abc", None), (b"-1", None), (b"1e3", None),
     (b"\xff\xfe", None), (b"99999999999999999999999", None), (str(1 << 64).encode(), None),
     (str((1 << 64) - 1).encode(), (1 << 64) - 1)],
)
def test_parse_hint(data, want):
    assert P.parse_hint(data) == want
