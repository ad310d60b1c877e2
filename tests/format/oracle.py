"""Independent oracle for names and hash prefixes, copied from the acceptance reader
(/work/shared/acceptance/lib/tlfmt.py), which was written from the spec and the Java
reference's test vectors and never from this project's code."""

from __future__ import annotations

import re
import struct

ROOT_RE = re.compile(r"^_[01]{64}\.arrow$")
HASHED_RE = re.compile(r"^([01]{4})/([01]{4})/([01]{4})/([01]{8})-(.+)$")


def murmur3_32(data: bytes, seed: int = 0) -> int:
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & 0xFFFFFFFF
    n = len(data) // 4
    for i in range(n):
        k = struct.unpack_from("<I", data, 4 * i)[0]
        k = (k * c1) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
        h = ((h << 13) | (h >> 19)) & 0xFFFFFFFF
        h = (h * 5 + 0xE6546B64) & 0xFFFFFFFF
    tail = data[4 * n :]
    k = 0
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if len(tail) >= 1:
        k ^= tail[0]
        k = (k * c1) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def root_name(version: int) -> str:
    return "_" + format(version, "064b")[::-1] + ".arrow"


def root_version(name: str) -> int:
    if not ROOT_RE.match(name):
        raise ValueError(name)
    return int(name[1:65][::-1], 2)


def hashed_path(original_name: str) -> str:
    bits = format(murmur3_32(original_name.encode()) & 0xFFFFF, "020b")
    return f"{bits[0:4]}/{bits[4:8]}/{bits[8:12]}/{bits[12:20]}-{original_name}"


def pad(name: str, size: int) -> str:
    b = name.encode()
    if len(b) > size:
        raise ValueError(name)
    return name + " " * (size - len(b))


def ns_key(ns: str, size: int = 100) -> str:
    return "B===" + pad(ns, size)


def table_key(ns: str, t: str, ns_size: int = 100, t_size: int = 100) -> str:
    return "C===" + pad(ns, ns_size) + pad(t, t_size)


def classify_tree(files: list[str]) -> dict:
    """Split relative file paths into root files, hash-prefixed files whose prefix matches
    the oracle, hash-prefixed files whose prefix does not, and everything else."""
    roots, hashed, bad, other = [], [], [], []
    for rel in files:
        if ROOT_RE.match(rel):
            roots.append(rel)
        elif m := HASHED_RE.match(rel):
            (hashed if hashed_path(m.group(5)) == rel else bad).append(rel)
        else:
            other.append(rel)
    return {"roots": roots, "hashed": hashed, "bad_hash": bad, "other": other}
