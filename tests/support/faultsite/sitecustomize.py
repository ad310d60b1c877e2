"""Test-only start-up hook of the processes the tests start (CLI runs, the export's copy worker
processes, Spark's Python workers): storage faults and kills (`tests.support.faults`) when
``TLAKE_TEST_FAULTS`` is set; the crash points of `tlake_test_seams`, driven by their variable.
tests/conftest.py puts this folder on PYTHONPATH; the library itself never reads a fault switch
from the environment."""

import os
import sys

if os.environ.get("TLAKE_TEST_FAULTS"):
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if _root not in sys.path:
        sys.path.append(_root)  # after the library: `tests.support.faults` comes from this checkout
    from tests.support.faults import install_from_env

    install_from_env()

# Always: a test may set the variables later in the process (forkserver workers set them
# per trial); the handlers read them when a seam is reached.
import tlake_test_seams  # noqa: E402

tlake_test_seams.install()
