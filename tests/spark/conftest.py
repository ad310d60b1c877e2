"""Helpers of the Spark job tests: run a job in-process on the session `spark` fixture."""

from __future__ import annotations

import os
import time

import pytest

from tests.oracle.expect import is_owned
from trinitylake.config import load_job_config
from trinitylake.format.paths import hashed_path, lakehouse_def_name
from trinitylake.jobs.runner import run_job

TTL_MS = 1000  # lakehouses of these tests use a 1 s transaction TTL so that ages pass quickly


def job_config(job: str, uri: str, **overrides):
    return load_job_config(job, overrides={"lakehouse": uri, **overrides}, env={})


def run(spark, job: str, lh_or_uri, *, audit: bool = False, **overrides):
    uri = lh_or_uri if isinstance(lh_or_uri, str) else lh_or_uri.uri
    return run_job(job, job_config(job, uri, **overrides), spark=spark, audit=audit)


def owned_files(storage) -> set[str]:
    """Files present whose names the format owns, by the oracle's pattern (not the library's)."""
    return {f.path for f in storage.list("") if is_owned(f.path)}


def reach(lh, versions, extra_roots=()):
    """The files `versions` (and `extra_roots`: (version, root URI)) reach, by the independent
    oracle (`tests.oracle`: a spec-written reader sharing no code with the library's walk), so
    that the jobs' expected sets do not come from the code under test."""
    from tests.oracle import oracle_reach

    return oracle_reach(lh, versions, extra_roots)


def plant(storage, names_and_ages: dict[str, float | None]) -> dict[str, str]:
    """Create files named like the format's (hash-prefixed) with a given age in seconds
    (None = now; local storage only for ages). Returns name -> relative path."""
    out = {}
    for name, age in names_and_ages.items():
        rel = name if name.startswith(("_", "notes/")) or "/" in name else hashed_path(name)
        storage.write(rel, b"orphan")
        if age is not None and storage.scheme == "file":
            t = time.time() - age
            os.utime(storage.root[len("file://"):] + "/" + rel, (t, t))
        out[name] = rel
    return out


def orphan_names() -> dict[str, str]:
    return {
        "node": "node-00000000-0000-4000-8000-00000000dead.arrow",
        "def": "m-ghost-00000000-0000-4000-8000-00000000beef.binpb",
        "ldef": lakehouse_def_name("00000000-0000-4000-8000-0000000000cc"),
        "young": "node-00000000-0000-4000-8000-0000000young.arrow",
    }


@pytest.fixture
def s3_lakehouse_uri(s3_bucket):
    return f"{s3_bucket}/wh/lh"
