"""A copied file corrupted on its way into the target: the export's check after the copy fails,
names the file, and nothing is recorded as a finished export.

The fault: the storage stores other bytes than the export handed it for one file (one byte
flipped, same size; or the last bytes cut off), and answers as if all went well. It is injected
at `Storage._io`, the seam every attempt of every storage operation goes through (as
`tests.support.faults` injects its faults), below the export's own code: what a faulty disk,
filesystem, FUSE mount or object store would do. Nothing of the export is replaced; it runs on
the driver's threads (``execution=local``) in this process, where the seam is wrapped.

A local target and the local S3 (moto) server are both covered: their checks differ (a local
target is read back; on S3 the PUT's ETag, the MD5 of what the store received, is compared,
then a HEAD and a read).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from trinitylake.errors import AlreadyExistsError, StorageError
from trinitylake.storage import Storage

from .conftest import latest_def, populate, root_files, target_files


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0x01])


def _cut_last_bytes(data: bytes) -> bytes:
    return data[: max(1, len(data) - 3)]


@contextmanager
def corrupting(pattern: str, damage: Callable[[bytes], bytes]) -> Iterator[list[str]]:
    """Every Storage stores `damage(bytes)` instead of the bytes of the first exclusive create
    whose path matches `pattern` (one file, once), and reports success. Yields the path(s) hit."""
    rx = re.compile(pattern)
    real = Storage._io
    hit: list[str] = []

    def io(self: Storage, op: str, path: str, fn: Callable[..., Any], *args: Any) -> Any:
        if op == "create_exclusive" and not hit:
            if args and isinstance(args[0], list):  # the S3 engine's batch: [(key, bytes), ...]
                items = list(args[0])
                for i, (key, data) in enumerate(items):
                    if rx.search(key):
                        items[i] = (key, damage(bytes(data)))
                        hit.append(key)
                        break
                args = (items, *args[1:])
            elif rx.search(path) and len(args) >= 2 and isinstance(args[1], bytes | bytearray | memoryview):
                args = (args[0], damage(bytes(args[1])), *args[2:])
                hit.append(path)
        return real(self, op, path, fn, *args)

    Storage._io = io  # type: ignore[method-assign]
    try:
        yield hit
    finally:
        Storage._io = real  # type: ignore[method-assign]


#: A file of the exported tree that is not the root (``_...arrow``) nor bookkeeping (``_export/``):
#: definition files (copied from the source) and non-root node files (bytes from the plan).
DEFINITION = r"(^|/)(?!_)[^/]*\.(?!arrow$)[a-z]+$"
NODE = r"(^|/)(?!_)[^/]+\.arrow$"


def _assert_not_recorded(lh, target: Storage, name: str, before: int) -> None:
    assert name not in latest_def(lh).exported_snapshots
    assert lh.latest_version() == before, "the failed export committed nothing to the source"
    assert root_files(target) == [], "no exported root: readers of the target see no version"


@pytest.mark.parametrize(("what", "pattern"), [("definition", DEFINITION), ("node", NODE)], ids=["definition", "node"])
@pytest.mark.parametrize("damage", [_flip_last_byte, _cut_last_bytes], ids=["flipped", "cut"])
def test_a_corrupted_copy_on_local_disk_fails_the_export_naming_the_file(run, make_lakehouse, tmp_path, what,
                                                                          pattern, damage):
    lh = make_lakehouse()
    populate(lh, namespaces=1, tables=4, alters=1, drops=0)
    before = lh.latest_version()
    target = str(tmp_path / "target")
    with corrupting(pattern, damage) as hit, pytest.raises(StorageError) as err:
        run(lh, target, "e1", execution="local")
    assert len(hit) == 1, f"the fault found no {what} file to corrupt"
    rel = hit[0]
    tgt = Storage(target)
    assert rel in str(err.value), f"the error names the corrupted file: {err.value}"
    assert "failed verification after the copy" in str(err.value)
    _assert_not_recorded(lh, tgt, "e1", before)

    # Without the fault a re-run of the same export finds the corrupted file there and refuses
    # to overwrite it (another content than planned), still naming it, still recording nothing.
    with pytest.raises(AlreadyExistsError) as again:
        run(lh, target, "e1", execution="local")
    assert rel in str(again.value) and "other content" in str(again.value)
    _assert_not_recorded(lh, tgt, "e1", before)


@pytest.mark.s3
@pytest.mark.parametrize(("what", "pattern"), [("definition", DEFINITION), ("node", NODE)], ids=["definition", "node"])
@pytest.mark.parametrize("client", ["engine", "s3fs"])
def test_a_corrupted_copy_on_s3_fails_the_export_naming_the_file(run, make_lakehouse, s3_bucket, s3_storage_options,
                                                                  what, pattern, client):
    """Both S3 clients: the asynchronous engine (a part's PUTs as one batch, checked by their
    ETags) and s3fs (options the engine does not serve, here ``use_ssl: false``: one PUT a file,
    then a HEAD)."""
    if client == "s3fs":
        s3_storage_options = {**s3_storage_options, "use_ssl": False}
    lh = make_lakehouse()
    populate(lh, namespaces=1, tables=4, alters=1, drops=0)
    before = lh.latest_version()
    target = f"{s3_bucket}/exports/corrupt-{what}-{client}"
    with corrupting(pattern, _flip_last_byte) as hit, pytest.raises(StorageError) as err:
        run(lh, target, "e1", target_storage_options=s3_storage_options, execution="local")
    assert len(hit) == 1, f"the fault found no {what} file to corrupt"
    key = hit[0]
    assert key.split("/", 1)[-1].split("exports/", 1)[-1] in str(err.value), err.value
    assert "failed verification after the copy" in str(err.value)
    tgt = Storage(target, s3_storage_options)
    assert (tgt.engine is not None) == (client == "engine")
    assert target_files(tgt), "the copy ran"
    _assert_not_recorded(lh, tgt, "e1", before)


def test_the_same_export_without_the_fault_succeeds(run, make_lakehouse, tmp_path):
    """The control: the patterns match files the export writes, and unharmed copies pass the check."""
    lh = make_lakehouse()
    populate(lh, namespaces=1, tables=4, alters=1, drops=0)
    target = str(tmp_path / "target")
    with corrupting(DEFINITION, lambda d: d) as hit_def:
        r = run(lh, target, "e1", execution="local")
    assert len(hit_def) == 1
    assert r.counts["copied"] == r.counts["verified"] == r.counts["planned"]
    assert latest_def(lh).exported_snapshots["e1"].endswith(root_files(Storage(target))[0])
