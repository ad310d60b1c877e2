"""Test-only start-up hook of the processes the tests start (CLI runs, Spark's Python workers):
storage faults when ``TLAKE_TEST_FAULTS`` is set; the crash points and delete budgets of
`tlake_test_seams`, driven by their variables. tests/conftest.py puts this folder on PYTHONPATH; the
library itself never reads a fault switch from the environment."""

import os

if os.environ.get("TLAKE_TEST_FAULTS"):
    from trinitylake.storage.faults import install_from_env

    install_from_env()

# Always: a test may set the variables later in the process (forkserver workers set them
# per trial); the handlers read them when a seam is reached.
import tlake_test_seams  # noqa: E402

tlake_test_seams.install()
