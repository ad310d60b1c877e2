"""Fixtures of the Iceberg tests: a lakehouse on local files, the PyIceberg catalog on it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.iceberg.tables_setup import IMPL, open_catalog
from trinitylake.lakehouse import Lakehouse

__all__ = ["IMPL", "SCHEMA", "ids", "open_catalog", "rows"]

SCHEMA = pa.schema([("id", pa.int64()), ("amount", pa.float64())])


def rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "amount": [i * 1.5 for i in ids]}, schema=SCHEMA)


def ids(table) -> list[int]:
    return sorted(table.scan().to_arrow().column("id").to_pylist())


@pytest.fixture
def lakehouse(tmp_path) -> Lakehouse:
    return Lakehouse.create(str(tmp_path / "src" / "lh"), audit=False)


@pytest.fixture
def catalog(lakehouse):
    return open_catalog(lakehouse.uri)
