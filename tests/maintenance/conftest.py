"""Fixtures of the maintenance tests."""

from __future__ import annotations

import pytest

from tests.maintenance.helpers import build_history


@pytest.fixture
def history_lakehouse(make_lakehouse):
    lh = make_lakehouse()
    build_history(lh, seed=7, ops=25)
    return lh
