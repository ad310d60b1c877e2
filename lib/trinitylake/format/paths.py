"""File names of the format: root node files, the version hint, definitions, hash-prefixed paths.

Root node files are ``_`` + the version as 64-bit binary, bit-reversed (least significant bit
first) + ``.arrow`` (the Java reference's test vectors; the spec doc's 32-bit example is a
leftover). Non-root nodes and object definition files live under a 20-bit MurmurHash3 prefix
``bbbb/bbbb/bbbb/bbbbbbbb-<name>`` so that writes spread over object-store key prefixes.
"""

from __future__ import annotations

import re
import uuid

import mmh3

from trinitylake.errors import ValidationError

ROOT_RE = re.compile(r"^_[01]{64}\.arrow$")
HASHED_RE = re.compile(r"^([01]{4})/([01]{4})/([01]{4})/([01]{8})-(.+)$")
LAKEHOUSE_DEF_RE = re.compile(r"^_lakehouse_def_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.binpb$")
OWNED_HASHED_RE = re.compile(r"^[01]{4}/[01]{4}/[01]{4}/[01]{8}-[^/]+\.(arrow|binpb)$")
HINT_FILE = "_latest_hint.txt"
MAX_VERSION = (1 << 64) - 1


def root_name(version: int) -> str:
    """Root node file name of `version`."""
    if not isinstance(version, int) or version < 0 or version > MAX_VERSION:
        raise ValidationError(f"version must be an integer in [0, 2^64), got {version!r}")
    return "_" + format(version, "064b")[::-1] + ".arrow"


def root_version(name: str) -> int:
    """Version encoded in a root node file name (the base name, or a path ending in it)."""
    base = name.rsplit("/", 1)[-1]
    if not ROOT_RE.match(base):
        raise ValidationError(f"{name!r} is not a root node file name (expected _<64 bits>.arrow)")
    return int(base[1:65][::-1], 2)


def is_root_name(name: str) -> bool:
    return bool(ROOT_RE.match(name))


def hashed_path(original_name: str) -> str:
    """Hash-prefixed path of a non-root node or definition file name.

    Any ``/`` in the name becomes ``-`` (as in the Java reference), the hash is
    MurmurHash3_x86_32 with seed 0 over the UTF-8 bytes, and its low 20 bits form the prefix.
    """
    name = original_name.replace("/", "-")
    bits = format(mmh3.hash(name.encode("utf-8"), 0, signed=False) & 0xFFFFF, "020b")
    return f"{bits[0:4]}/{bits[4:8]}/{bits[8:12]}/{bits[12:20]}-{name}"


def new_node_path() -> str:
    return hashed_path(f"node-{uuid.uuid4()}.arrow")


def lakehouse_def_name(def_id: str | None = None) -> str:
    return f"_lakehouse_def_{def_id or uuid.uuid4()}.binpb"


def namespace_def_path(ns: str) -> str:
    return hashed_path(f"{ns}-{uuid.uuid4()}.binpb")


def table_def_path(ns: str, table: str) -> str:
    return hashed_path(f"{ns}-{table}-{uuid.uuid4()}.binpb")


def view_def_path(ns: str, view: str) -> str:
    return hashed_path(f"view-{ns}-{view}-{uuid.uuid4()}.binpb")


TXN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def txn_def_path(txn_id: str, state: int = 0) -> str:
    """Hash-prefixed TransactionDef file of a distributed transaction.

    State 0 is ``txn-<id>.binpb``, the Java reference's name. Java overwrites that file on every
    change; we create one file per state instead, ``txn-<id>.<n>.binpb`` (ids never contain a
    dot, so no id's state-0 name is another id's state-n name).
    """
    if not TXN_ID_RE.match(txn_id or ""):
        raise ValidationError(f"transaction id must be 1-128 characters of A-Z a-z 0-9 _ - (not starting with - or _), got {txn_id!r}")
    if state < 0:
        raise ValidationError(f"transaction state number must be non-negative, got {state}")
    return hashed_path(f"txn-{txn_id}.binpb" if state == 0 else f"txn-{txn_id}.{state}.binpb")


_HASHED_TAIL_RE = re.compile(r"/[01]{4}/[01]{4}/[01]{4}/[01]{8}-[^/]+$")


def owning_root(uri: str) -> str | None:
    """Root URI of the lakehouse that holds the format file at absolute `uri`: the URI without
    its hash-prefixed path (non-root nodes, definitions) or without its file name (root node
    files, lakehouse definitions); None for any other name.

    Relative pointers inside a file resolve against this root, also when the file was reached
    through an absolute URI from another tree (a partial or minimal export's cut).
    """
    m = _HASHED_TAIL_RE.search(uri)
    if m:
        return uri[: m.start()]
    base, _, name = uri.rpartition("/")
    if base and (ROOT_RE.match(name) or LAKEHOUSE_DEF_RE.match(name)):
        return base
    return None


def is_format_owned(rel_path: str) -> bool:
    """True for files whose names the format owns (the only orphan-cleanup candidates)."""
    return bool(ROOT_RE.match(rel_path) or LAKEHOUSE_DEF_RE.match(rel_path) or OWNED_HASHED_RE.match(rel_path))


def parse_hint(data: bytes) -> int | None:
    """Version in a hint file, or None when the content is garbage (callers then probe)."""
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    if not text.isdigit() or len(text) > 20:
        return None
    v = int(text)
    return v if v <= MAX_VERSION else None
