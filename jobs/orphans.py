"""spark-submit entry point of the TrinityLake orphans job (see `trinitylake.jobs.runner`).

    spark-submit jobs/orphans.py --lakehouse s3://bucket/lh --conf conf/orphans.yaml [--flag value ...]
"""

import os
import sys

# _preflight sits beside this file; runpy and some launchers do not put this folder on sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _preflight import require  # noqa: E402

require("orphans")

from _outcome import main  # noqa: E402 - after the dependency check (the runner's main, plus $TLAKE_RESULT_FILE)

if __name__ == "__main__":
    sys.exit(main("orphans", sys.argv[1:]))
