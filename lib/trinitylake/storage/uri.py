"""URI normalization, done once at the edge.

Every location the product handles is turned into a canonical URI here:
``file:///abs/path``, ``s3://bucket/key`` or ``memory://name/path``. Scheme aliases
(``s3a``, ``s3n``) are folded into ``s3``, duplicate and trailing slashes are removed, and
``..`` segments are refused, so that two spellings of one file always compare equal (the
Iceberg orphan-file lesson: a scheme or authority mismatch must never make a live file look
like an orphan).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from trinitylake.errors import InvalidURIError

SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "file": "file", "local": "file", "memory": "memory", "s3": "s3"}
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
# RFC 8089 also allows ``file:/abs/path`` (no authority); so do Java's File.toURI and Spark.
_FILE_NO_AUTHORITY_RE = re.compile(r"^(?:file|local):(/(?!/).*|/)$", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedURI:
    scheme: str  # canonical: file, s3, memory, or another fsspec protocol
    authority: str  # bucket for s3, "" for file
    path: str  # without leading slash for s3/memory, absolute for file

    @property
    def uri(self) -> str:
        if self.scheme == "file":
            return "file://" + self.path
        return f"{self.scheme}://{self.authority}" + (f"/{self.path}" if self.path else "")

    @property
    def fs_path(self) -> str:
        """The path as fsspec filesystems of this scheme expect it."""
        if self.scheme == "file":
            return self.path
        return f"{self.authority}/{self.path}" if self.path else self.authority

    @property
    def is_local(self) -> bool:
        """Whether the location is on the local filesystem."""
        return self.scheme == "file"

    @property
    def local_path(self) -> str | None:
        """The local filesystem path of a local location, None for any other store."""
        return self.path if self.scheme == "file" else None

    @property
    def store_uri(self) -> str:
        """The top of the store that holds the location: ``scheme://bucket``, ``file:///``."""
        return "file:///" if self.scheme == "file" else f"{self.scheme}://{self.authority}"


def _clean_segments(path: str, original: str) -> list[str]:
    segs = [s for s in path.split("/") if s not in ("", ".")]
    if ".." in segs:
        raise InvalidURIError(f"URI {original!r} contains '..'; give a normalized location")
    return segs


# A relative path that is already normal: segments of letters, digits and ``._=+-``, none empty,
# ``.`` or ``..`` (the names the format writes). Joining one onto a root needs no parsing.
_PLAIN_RELATIVE_RE = re.compile(r"(?!\.\.?(?:/|$))[A-Za-z0-9_=+-][A-Za-z0-9_.=+-]*(?:/(?!\.\.?(?:/|$))[A-Za-z0-9_.=+-]+)*")


def is_plain_relative(path: str) -> bool:
    """True when `path` is a relative path that normalization would leave unchanged."""
    return _PLAIN_RELATIVE_RE.fullmatch(path) is not None


def is_absolute(location: str) -> bool:
    """True for a URI with a scheme or an absolute local path; False for a relative path."""
    return bool(_SCHEME_RE.match(location) or _FILE_NO_AUTHORITY_RE.match(location)) or location.startswith("/")


def parse_uri(uri: str) -> ParsedURI:
    """Parse and normalize a URI or local path.

    Raises:
        InvalidURIError: the location is empty, has ``..`` segments or control characters.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidURIError(f"empty location {uri!r}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in uri):
        raise InvalidURIError(f"location {uri!r} contains control characters")
    m_file = _FILE_NO_AUTHORITY_RE.match(uri)
    if m_file:
        return ParsedURI("file", "", "/" + "/".join(_clean_segments(m_file.group(1), uri)))
    m = _SCHEME_RE.match(uri)
    if not m:
        # A plain local path; relative paths are made absolute against the working directory.
        path = uri if uri.startswith("/") else os.path.join(os.getcwd(), uri)
        segs = _clean_segments(path, uri)
        return ParsedURI("file", "", "/" + "/".join(segs))
    scheme = SCHEME_ALIASES.get(m.group(1).lower(), m.group(1).lower())
    rest = m.group(2)
    if scheme == "file":
        if not rest.startswith("/"):
            # file://host/path: only an empty host or localhost is meaningful here.
            host, _, tail = rest.partition("/")
            if host not in ("", "localhost"):
                raise InvalidURIError(f"file URI {uri!r} names a remote host {host!r}")
            rest = "/" + tail
        segs = _clean_segments(rest, uri)
        return ParsedURI("file", "", "/" + "/".join(segs))
    authority, _, path = rest.partition("/")
    if not authority:
        raise InvalidURIError(f"URI {uri!r} has no bucket or authority")
    if authority in (".", ".."):
        raise InvalidURIError(f"URI {uri!r} has {authority!r} as its bucket or authority")
    segs = _clean_segments(path, uri)
    return ParsedURI(scheme, authority, "/".join(segs))


def normalize_uri(uri: str) -> str:
    """Canonical spelling of a location (see module docstring)."""
    return parse_uri(uri).uri


def join_uri(base: str, rel: str) -> str:
    """Join a relative path onto a canonical base URI.

    Empty and ``.`` segments of `rel` are dropped (an empty `rel` gives `base` itself, without a
    trailing slash); ``..`` raises InvalidURIError. A filesystem-root base (``file:///`` or ``/``)
    keeps its single slash.
    """
    segs = _clean_segments(rel, rel)
    root_like = base == "/" or base.endswith(":///")
    head = base if root_like else base.rstrip("/")
    if not segs:
        return head
    return head + ("" if root_like else "/") + "/".join(segs)


def same_scheme(a: str, b: str) -> bool:
    """Whether two locations are on the same kind of store (one set of options serves both)."""
    return parse_uri(a).scheme == parse_uri(b).scheme


def hadoop_location(location: str) -> str:
    """`location` as Hadoop's filesystems take it: ``s3://`` becomes ``s3a://`` outside
    Databricks (whose own S3 filesystem takes ``s3://``); anything else unchanged."""
    if location.startswith("s3://") and not os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return "s3a://" + location[len("s3://"):]
    return location


def spark_location(uri: str) -> str:
    """`uri` as Spark's own readers take it: ``s3://`` becomes ``s3a://`` outside Databricks.

    Raises:
        ValueError: a ``memory://`` location (it lives in this Python process only).
    """
    p = parse_uri(uri)
    if p.scheme == "memory":
        raise ValueError(f"{p.uri}: Spark cannot read a memory:// location; use a local path or an object store")
    return hadoop_location(p.uri)


def local_path_of_url(url: str) -> str | None:
    """The local path of a URL as other libraries spell it (``file:///a%20b``, ``/a b``;
    percent-escapes decoded), or None for a URL of any other store."""
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme in ("", "file") else None
