"""Set-up shared by the tables' maintenance tests (tests/iceberg, tests/reliability) and its
benchmark (``bench/bench_tables_maintenance.py``): the PyIceberg catalog on a lakehouse, many
tables with many snapshots, the lakehouse's own expire down to its latest version, and old
planted files."""

from __future__ import annotations

import os
import time
from typing import Any

import pyarrow as pa

from trinitylake.config import load_job_config
from trinitylake.jobs.runner import run_job

IMPL = "trinitylake.iceberg.TrinityLakeCatalog"
DAY_S = 86400


def open_catalog(lakehouse_uri: str, name: str = "tl", storage: dict[str, Any] | None = None, **props: str) -> Any:
    """PyIceberg's catalog on the lakehouse; `storage`: the lakehouse's S3 options (also given
    to PyIceberg's FileIO)."""
    from pyiceberg.catalog import load_catalog

    from trinitylake.storage.options import fileio_properties

    extra: dict[str, str] = {}
    if storage:
        extra = {f"lakehouse.storage.{k}": v for k, v in storage.items()} | fileio_properties(storage)
    return load_catalog(name, **{"py-catalog-impl": IMPL, "lakehouse": lakehouse_uri, "audit": "false", **extra, **props})


def build_tables(
    uri: str,
    names: list[str],
    snapshots: int,
    schema: pa.Schema,
    storage: dict[str, Any] | None = None,
    chunk: int = 5,
) -> None:
    """Create `names` (``NS.TABLE``, their namespaces too) and append one row to each
    `snapshots` times, `chunk` tables per multi-table transaction (one lakehouse version)."""
    cat = open_catalog(uri, storage=storage)
    for ns in sorted({n.split(".", 1)[0] for n in names}):
        cat.create_namespace(ns)
    chunks = [names[i : i + chunk] for i in range(0, len(names), chunk)]
    for part in chunks:
        with cat.multi_table_transaction() as mtx:
            for n in part:
                mtx.create_table(n, schema=schema)
    for r in range(snapshots):
        batch = pa.table({f.name: [r if pa.types.is_integer(f.type) else f"r{r}"] for f in schema}, schema=schema)
        for part in chunks:
            with cat.multi_table_transaction() as mtx:
                for n in part:
                    mtx.load_table(n).append(batch)


def expire_lakehouse(uri: str, ttl_ms: int = 1000, storage: dict[str, Any] | None = None) -> None:
    """The lakehouse's own expire, keeping only its latest version: its clock is set past the
    transaction TTL `ttl_ms` the lakehouse was created with (the job accepts minutes of skew),
    so the versions just made count as old without waiting."""
    cfg = load_job_config(
        "expire",
        overrides={
            "lakehouse": uri,
            "reference_time": int(time.time() * 1000) + ttl_ms + 1000,
            "execution": "local",
            "max_version_age": 0,
            "clock_skew_margin": 0,
            "min_versions_to_keep": 1,
            "storage_options": storage or {},
        },
        env={},
    )
    result = run_job("expire", cfg, audit=False)
    assert result.status == "succeeded", result.error


def plant(folder: str, name: str, age_days: float) -> str:
    """A junk file `name` in `folder`, modified `age_days` ago."""
    os.makedirs(folder, exist_ok=True)
    p = os.path.join(folder, name)
    with open(p, "wb") as f:
        f.write(b"PAR1junkPAR1")
    t = time.time() - age_days * DAY_S
    os.utime(p, (t, t))
    return p
