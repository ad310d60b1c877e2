"""Regression canary for the s3fs empty-file trap.

s3fs writes an EMPTY file opened with ``"xb"`` through ``touch()``, which sends a plain PUT
without ``If-None-Match: *``: an existing object is silently overwritten with nothing, although
``"xb"`` promises exclusive creation. Our `Storage.create_exclusive` therefore refuses empty data
on every backend. These tests pass whether or not s3fs fixes the trap; what raw s3fs did is
recorded as the ``s3fs_empty_xb_overwrote`` property (``--junitxml``) and, when it no longer
overwrites, as a warning so that someone can revisit the workaround.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import s3fs

from trinitylake.storage import Storage

pytestmark = pytest.mark.s3


@pytest.fixture
def raw_fs(s3_storage_options: dict[str, Any]) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(
        key=s3_storage_options["key"],
        secret=s3_storage_options["secret"],
        client_kwargs={"endpoint_url": s3_storage_options["endpoint_url"]},
        skip_instance_cache=True,
        use_listings_cache=False,
    )


def test_raw_s3fs_nonempty_xb_is_exclusive(raw_fs: s3fs.S3FileSystem, s3_bucket: str) -> None:
    path = f"{s3_bucket[len('s3://') :]}/_root"
    with raw_fs.open(path, "xb") as f:
        f.write(b"original")
    with pytest.raises(FileExistsError):
        with raw_fs.open(path, "xb") as f:
            f.write(b"intruder")
    with pytest.raises(FileExistsError):
        raw_fs.pipe_file(path, b"intruder", mode="create")
    assert raw_fs.cat_file(path) == b"original"


def test_raw_s3fs_empty_xb_trap_and_our_guard(
    raw_fs: s3fs.S3FileSystem, s3_bucket: str, s3_storage_options: dict[str, Any], record_property: Any
) -> None:
    path = f"{s3_bucket[len('s3://') :]}/_root"
    raw_fs.pipe_file(path, b"committed root", mode="create")

    # The trap, shown directly with s3fs: an "exclusive" create of an empty file.
    raised = False
    try:
        with raw_fs.open(path, "xb"):
            pass
    except FileExistsError:
        raised = True
    content = raw_fs.cat_file(path)
    overwrote = content == b""
    record_property("s3fs_empty_xb_overwrote", overwrote)
    record_property("s3fs_version", s3fs.__version__)
    if overwrote:
        assert not raised  # silently: no error told the writer it clobbered a commit
    else:
        assert content == b"committed root"
        warnings.warn(
            f"s3fs {s3fs.__version__} no longer overwrites on an empty 'xb' create; "
            "Storage.create_exclusive still refuses empty data",
            stacklevel=1,
        )

    # Our API refuses empty data whatever s3fs does, and leaves the object alone.
    storage = Storage(s3_bucket, s3_storage_options)
    storage.write("_root", b"committed root")
    for empty in (b"", bytearray(), memoryview(b"")):
        with pytest.raises(ValueError, match="empty"):
            storage.create_exclusive("_root", empty)
        with pytest.raises(ValueError, match="empty"):
            storage.create_exclusive("_new_marker", empty)
    assert storage.read("_root") == b"committed root"
    assert not storage.exists("_new_marker")
