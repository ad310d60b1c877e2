"""spark-submit entry point of the TrinityLake walk job (see `trinitylake.spark.runner`).

    spark-submit jobs/walk.py --lakehouse s3://bucket/lh --conf conf/walk.yaml [--flag value ...]
"""

import sys

from trinitylake.spark.runner import main

if __name__ == "__main__":
    sys.exit(main("walk", sys.argv[1:]))
