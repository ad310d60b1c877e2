"""Object keys: schema-ID prefixes, byte padding, name validation, decoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.format import oracle
from trinitylake.errors import InvalidNameError, ValidationError
from trinitylake.format import keys as K

C8 = K.KeyCodec(8, 8, 8)


def test_schema_prefixes():
    assert K.NS_PREFIX == "B==="
    assert K.TABLE_PREFIX == "C==="
    assert K.VIEW_PREFIX == "D==="
    assert K.schema_prefix(0) == "A==="
    assert K.schema_prefix(4) == "E==="  # transactions (never a tree key)
    assert K.schema_prefix(63) == "/==="
    assert K.schema_prefix(64) == "BA=="  # our choice for ids >= 64: base64 digits MSB first
    assert K.schema_prefix(64**4 - 1) == "////"
    with pytest.raises(ValidationError):
        K.schema_prefix(64**4)
    with pytest.raises(ValidationError):
        K.schema_prefix(-1)


def test_java_key_vectors():
    # The Java reference's TestObjectKeys, name sizes of 8 bytes.
    assert C8.namespace_key("ns1") == "B===ns1     "
    assert C8.table_key("ns1", "t1") == "C===ns1     t1      "
    assert C8.namespace_key("ns1") == oracle.ns_key("ns1", 8)
    assert C8.table_key("ns1", "t1") == oracle.table_key("ns1", "t1", 8, 8)
    assert C8.view_key("ns1", "v1") == "D===ns1     v1      "


def test_default_sizes():
    c = K.KeyCodec()
    assert len(c.namespace_key("default").encode()) == 104
    assert len(c.table_key("default", "t").encode()) == 204
    assert c.table_key("sales", "t07") == oracle.table_key("sales", "t07")


def test_padding_counts_utf8_bytes():
    # "é" is 2 bytes, "日本" 6 bytes, "🦆" 4 bytes: padding fills up to the byte width.
    for name in ("é", "日本", "🦆", "aé日", "é🦆"):
        key = C8.namespace_key(name)
        assert len(key.encode("utf-8")) == 4 + 8
        assert key == oracle.ns_key(name, 8)
        tkey = C8.table_key(name, name)
        assert len(tkey.encode("utf-8")) == 4 + 16
        assert C8.decode(tkey) == ("table", (name, name))
    # Exactly at the limit in bytes is fine, one byte over is not (even though it is few characters).
    assert C8.namespace_key("日本aa") == "B===日本aa"
    with pytest.raises(InvalidNameError, match="9 UTF-8 bytes"):
        C8.namespace_key("日本aaa")
    with pytest.raises(InvalidNameError):
        C8.namespace_key("🦆🦆🦆")  # 3 characters, 12 bytes


@pytest.mark.parametrize(
    "bad",
    ["", "a b", " a", "a ", "a\tb", "a\nb", "\x00", "a\x1fb", "a\x7fb", "a/b", "a\\b", ".", "..", "x" * 9],
)
def test_invalid_names(bad):
    with pytest.raises(InvalidNameError):
        C8.namespace_key(bad)
    with pytest.raises(InvalidNameError):
        C8.table_key("ns", bad)
    with pytest.raises(InvalidNameError):
        C8.table_key(bad if bad else "", "t")


def test_invalid_name_is_validation_error():
    assert issubclass(InvalidNameError, ValidationError)
    with pytest.raises(ValueError):
        K.validate_name(None, 8)  # type: ignore[arg-type]


def test_allowed_punctuation():
    for name in ("a.b", "a-b", "a_b", "~!@#$%", "A=B"):
        assert C8.decode(C8.namespace_key(name)) == ("namespace", (name,))


def test_order_groups_by_type_then_namespace():
    keys = [
        C8.table_key("ab", "z"),
        C8.namespace_key("abc"),
        C8.table_key("abc", "a"),
        C8.namespace_key("ab"),
        C8.view_key("a", "v"),
        C8.table_key("ab", "a"),
    ]
    ordered = sorted(keys, key=lambda k: k.encode())
    assert ordered == [
        C8.namespace_key("ab"),
        C8.namespace_key("abc"),
        C8.table_key("ab", "a"),
        C8.table_key("ab", "z"),
        C8.table_key("abc", "a"),
        C8.view_key("a", "v"),
    ]
    # str order equals unsigned-byte order for these keys (no surrogates), which the tree uses.
    assert sorted(keys) == ordered
    # A namespace's tables are a prefix scan that does not catch a longer namespace.
    assert C8.table_key("ab", "a").startswith(C8.tables_prefix("ab"))
    assert not C8.table_key("abc", "a").startswith(C8.tables_prefix("ab"))
    assert C8.view_key("ab", "v").startswith(C8.views_prefix("ab"))


name_st = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FFF, blacklist_characters="/\\\x7f"), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(name_st, name_st)
def test_encode_decode_round_trip(ns, t):
    c = K.KeyCodec(16, 24, 12)
    if len(ns.encode()) > 16 or len(t.encode()) > 12 or ns in (".", "..") or t in (".", ".."):
        return
    nk, tk, vk = c.namespace_key(ns), c.table_key(ns, t), c.view_key(ns, t)
    assert c.decode(nk) == ("namespace", (ns,))
    assert c.decode(tk) == ("table", (ns, t))
    assert c.decode(vk) == ("view", (ns, t))
    assert c.describe(tk) == f"{ns}.{t}"
    assert len(tk.encode()) == 4 + 16 + 24
    assert tk == oracle.table_key(ns, t, 16, 24)


@pytest.mark.parametrize(
    "bad",
    ["E===ns1     ", "B===ns1", "B===ns1      x", "C===ns1     ", "B===        ", "C===ns1     t 1     ", "xx"],
)
def test_decode_rejects_malformed_keys(bad):
    with pytest.raises(ValidationError):
        C8.decode(bad)
    assert C8.describe(bad) == repr(bad)
