"""spark-submit entry point of the snapshot export job.

    spark-submit jobs/export.py --conf conf/export.yaml --lakehouse s3://bucket/lh \
        --name weekly-20261122 --target s3://backup/lh/weekly-20261122 [--mode partial --depth 1]

A target on another store (another S3 endpoint or account) takes its own options:
``--target-storage-option endpoint_url=https://dr.example.com`` (repeatable), or
``target_storage_options:`` in the ``--conf`` file, with the credentials in
``TLAKE_TARGET_AWS_ACCESS_KEY_ID`` / ``TLAKE_TARGET_AWS_SECRET_ACCESS_KEY`` (and
``TLAKE_TARGET_S3_ENDPOINT_URL``); see `trinitylake.storage.target_options`.

All logic lives in `trinitylake.jobs.export.job` (run through the shared job runner).
"""

import os
import sys

# _preflight sits beside this file; runpy and some launchers do not put this folder on sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _preflight import require  # noqa: E402

require("export")

from _outcome import main  # noqa: E402 - after the dependency check (the runner's main, plus $TLAKE_RESULT_FILE)

if __name__ == "__main__":
    sys.exit(main("export", sys.argv[1:]))
