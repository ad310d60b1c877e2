"""URI normalization: one canonical spelling per file, `..` refused."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trinitylake.errors import InvalidURIError, ValidationError
from trinitylake.storage import ParsedURI, is_absolute, join_uri, normalize_uri, parse_uri


# ---- scheme aliases -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("s3://bucket/a/b", "s3://bucket/a/b"),
        ("s3a://bucket/a/b", "s3://bucket/a/b"),
        ("s3n://bucket/a/b", "s3://bucket/a/b"),
        ("S3A://bucket/a/b", "s3://bucket/a/b"),
        ("S3://bucket/a", "s3://bucket/a"),
        ("s3://bucket", "s3://bucket"),
        ("s3a://bucket/", "s3://bucket"),
        ("memory://name/x/y", "memory://name/x/y"),
        ("MEMORY://name/x", "memory://name/x"),
        ("local:///tmp/x", "file:///tmp/x"),
        ("gs://bkt/a//b/", "gs://bkt/a/b"),  # other fsspec protocols pass through, normalized
    ],
)
def test_scheme_aliases_fold(raw: str, canonical: str) -> None:
    assert normalize_uri(raw) == canonical


def test_alias_spellings_compare_equal() -> None:
    spellings = ["s3://b/lake/x.arrow", "s3a://b/lake/x.arrow", "s3n://b//lake/./x.arrow/", "S3A://b/lake//x.arrow"]
    assert {normalize_uri(s) for s in spellings} == {"s3://b/lake/x.arrow"}


def test_bucket_name_case_is_kept() -> None:
    # Bucket and key are case-sensitive data, only the scheme is folded.
    assert normalize_uri("S3://MyBucket/Key/A") == "s3://MyBucket/Key/A"


# ---- slashes ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("s3://b/a/", "s3://b/a"),
        ("s3://b/a///", "s3://b/a"),
        ("s3://b//a//b", "s3://b/a/b"),
        ("s3://b/./a/./b/.", "s3://b/a/b"),
        ("memory://m//x//", "memory://m/x"),
        ("file:///tmp//a///b/", "file:///tmp/a/b"),
        ("/tmp//a/./b//", "file:///tmp/a/b"),
        ("file:///", "file:///"),
        ("/", "file:///"),
    ],
)
def test_duplicate_and_trailing_slashes(raw: str, canonical: str) -> None:
    assert normalize_uri(raw) == canonical


# ---- dot-dot ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw",
    [
        "s3://b/a/../c",
        "s3a://b/..",
        "s3://b/../other-bucket/x",
        "file:///tmp/../etc/passwd",
        "/tmp/a/..",
        "a/../b",
        "../x",
        "..",
        "memory://m/a/../b",
    ],
)
def test_dotdot_rejected(raw: str) -> None:
    with pytest.raises(InvalidURIError, match=r"\.\."):
        parse_uri(raw)


def test_dotdot_inside_a_name_is_fine() -> None:
    assert normalize_uri("s3://b/a..b/..c/d..") == "s3://b/a..b/..c/d.."


def test_invalid_uri_error_is_a_value_error() -> None:
    # Callers may catch ValueError; the typed error stays the same object.
    with pytest.raises(ValueError):
        parse_uri("s3://b/../x")
    assert issubclass(InvalidURIError, ValidationError)


# ---- other invalid input -------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "s3://",
        "s3:///key",
        "s3a:///",
        "memory://",
        "s3://b/a\nb",
        "s3://b/a\x00",
        "/tmp/a\x7f",
        "s3://b/\tx",
    ],
)
def test_invalid_locations(raw: str) -> None:
    with pytest.raises(InvalidURIError):
        parse_uri(raw)


def test_non_string_rejected() -> None:
    with pytest.raises(InvalidURIError):
        parse_uri(None)  # type: ignore[arg-type]


# ---- local paths and file:// forms ----------------------------------------------------------
def test_relative_local_path_absolutized(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert normalize_uri("lake") == f"file://{tmp_path}/lake"
    assert normalize_uri("./lake/sub/") == f"file://{tmp_path}/lake/sub"
    assert normalize_uri("lake//sub") == f"file://{tmp_path}/lake/sub"
    assert normalize_uri(".") == f"file://{tmp_path}"


def test_relative_path_follows_cwd(tmp_path, monkeypatch) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    monkeypatch.chdir(tmp_path / "one")
    first = normalize_uri("x")
    monkeypatch.chdir(tmp_path / "two")
    assert normalize_uri("x") != first
    assert normalize_uri("x") == f"file://{tmp_path}/two/x"


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("/tmp/lake", "file:///tmp/lake"),
        ("file:///tmp/lake", "file:///tmp/lake"),
        ("file://localhost/tmp/lake", "file:///tmp/lake"),
        ("FILE:///tmp/lake", "file:///tmp/lake"),
        ("file:/tmp/lake", "file:///tmp/lake"),  # RFC 8089 form without authority (Java, Spark)
        ("file:/tmp//lake/", "file:///tmp/lake"),
        ("file:/", "file:///"),
        ("local:/tmp/lake", "file:///tmp/lake"),
        ("file:////tmp/lake", "file:///tmp/lake"),
    ],
)
def test_file_uri_forms(raw: str, canonical: str) -> None:
    assert normalize_uri(raw) == canonical


def test_file_uri_with_remote_host_rejected() -> None:
    with pytest.raises(InvalidURIError, match="remote host"):
        parse_uri("file://otherhost/tmp/lake")


def test_parsed_parts() -> None:
    assert parse_uri("s3a://bkt//a/b/") == ParsedURI("s3", "bkt", "a/b")
    assert parse_uri("s3://bkt") == ParsedURI("s3", "bkt", "")
    assert parse_uri("file:///tmp/x") == ParsedURI("file", "", "/tmp/x")
    assert parse_uri("memory://m/x") == ParsedURI("memory", "m", "x")


def test_fs_path() -> None:
    assert parse_uri("s3://bkt/a/b").fs_path == "bkt/a/b"
    assert parse_uri("s3://bkt").fs_path == "bkt"
    assert parse_uri("file:///tmp/x").fs_path == "/tmp/x"
    assert parse_uri("memory://m/x").fs_path == "m/x"


# ---- is_absolute --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("location", "absolute"),
    [
        ("s3://b/x", True),
        ("s3a://b/x", True),
        ("memory://m/x", True),
        ("file:///x", True),
        ("file:/x", True),
        ("/x", True),
        ("x", False),
        ("a/b/c.arrow", False),
        ("_latest_hint.txt", False),
        ("0110/0000/1011/01111000-node-x.arrow", False),
        ("weird:name", False),  # a colon alone does not make a scheme
        ("", False),
    ],
)
def test_is_absolute(location: str, absolute: bool) -> None:
    assert is_absolute(location) is absolute


# ---- join ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("base", "rel", "joined"),
    [
        ("s3://b/lake", "x.arrow", "s3://b/lake/x.arrow"),
        ("s3://b/lake/", "x.arrow", "s3://b/lake/x.arrow"),
        ("s3://b", "a/b", "s3://b/a/b"),
        ("s3://b/lake", "a//b/", "s3://b/lake/a/b"),
        ("s3://b/lake", "./a/./b", "s3://b/lake/a/b"),
        ("s3://b/lake", "/a", "s3://b/lake/a"),
        (
            "file:///tmp/lake",
            "0110/0000/1011/01111000-node-x.arrow",
            "file:///tmp/lake/0110/0000/1011/01111000-node-x.arrow",
        ),
        ("file:///", "a/b", "file:///a/b"),
        ("/", "a", "/a"),
        ("memory://m", "x", "memory://m/x"),
    ],
)
def test_join(base: str, rel: str, joined: str) -> None:
    assert join_uri(base, rel) == joined


@pytest.mark.parametrize(
    ("base", "joined"), [("s3://b/lake", "s3://b/lake"), ("s3://b/lake/", "s3://b/lake"), ("file:///", "file:///")]
)
@pytest.mark.parametrize("rel", ["", ".", "/", "./"])
def test_join_empty_gives_base(base: str, rel: str, joined: str) -> None:
    assert join_uri(base, rel) == joined


def test_join_rejects_dotdot() -> None:
    with pytest.raises(InvalidURIError):
        join_uri("s3://b/lake", "../other/x")
    with pytest.raises(InvalidURIError):
        join_uri("s3://b/lake", "a/../../x")


def test_join_result_is_canonical() -> None:
    for base in ("s3://b/lake", "file:///tmp/lake", "memory://m/r", "file:///"):
        for rel in ("a", "a/b/c", "a//b/", "_latest_hint.txt"):
            joined = join_uri(base, rel)
            assert normalize_uri(joined) == joined


# ---- properties ---------------------------------------------------------------------------
_segment = st.text(alphabet=st.sampled_from(list("abcXYZ019_-.=")), min_size=1, max_size=6).filter(lambda s: s != "..")
_path = st.lists(st.one_of(_segment, st.just(""), st.just(".")), max_size=6).map("/".join)


@settings(max_examples=150, deadline=None)
@given(
    scheme=st.sampled_from(["s3", "s3a", "s3n", "S3A", "memory", "gs"]),
    bucket=st.from_regex(r"[a-z0-9]{3,8}", fullmatch=True),
    path=_path,
)
def test_normalize_is_idempotent_for_buckets(scheme: str, bucket: str, path: str) -> None:
    once = normalize_uri(f"{scheme}://{bucket}/{path}")
    assert normalize_uri(once) == once
    assert "//" not in once.split("://", 1)[1]
    assert not once.endswith("/")
    assert "/./" not in once + "/"


@settings(max_examples=150, deadline=None)
@given(path=_path, form=st.sampled_from(["file://{}", "file:{}", "{}", "file://localhost{}", "local://{}"]))
def test_normalize_is_idempotent_for_files(path: str, form: str) -> None:
    once = normalize_uri(form.format("/" + path.lstrip("/")))
    assert once.startswith("file:///")
    assert normalize_uri(once) == once
    assert normalize_uri(once[len("file://") :]) == once


@settings(max_examples=100, deadline=None)
@given(left=_path, right=_path)
def test_dotdot_anywhere_rejected(left: str, right: str) -> None:
    with pytest.raises(InvalidURIError):
        parse_uri(f"s3://bkt/{left}/../{right}")


def test_cwd_not_needed_for_absolute(tmp_path, monkeypatch) -> None:
    # An absolute location never depends on the working directory.
    monkeypatch.chdir(tmp_path)
    assert normalize_uri("/srv/lake") == "file:///srv/lake"
    assert os.getcwd() == str(tmp_path)
