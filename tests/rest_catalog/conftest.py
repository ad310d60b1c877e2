"""Fixtures of the catalog server tests: a lakehouse and the real server on it (one per module)."""

from __future__ import annotations

import pytest

from tests.rest_catalog.server import Server, new_lakehouse, start


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Server:
    base = tmp_path_factory.mktemp("rest")
    srv = start(new_lakehouse(base / "lh"), base)
    yield srv
    srv.stop()
