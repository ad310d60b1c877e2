"""Test-only start-up hook: processes the tests start (CLI runs, Spark's Python workers) inject
storage faults when ``TLAKE_TEST_FAULTS`` is set. tests/conftest.py puts this folder on
PYTHONPATH; the library itself never reads a fault switch from the environment."""

import os

if os.environ.get("TLAKE_TEST_FAULTS"):
    from trinitylake.storage.faults import install_from_env

    install_from_env()
