"""spark-submit entry point of the TrinityLake orphans job (see `trinitylake.spark.runner`).

    spark-submit jobs/orphans.py --lakehouse s3://bucket/lh --conf conf/orphans.yaml [--flag value ...]
"""

import sys

from trinitylake.spark.runner import main

if __name__ == "__main__":
    sys.exit(main("orphans", sys.argv[1:]))
