"""spark-submit entry point of the TrinityLake expire job (see `trinitylake.spark.runner`).

    spark-submit jobs/expire.py --lakehouse s3://bucket/lh --conf conf/expire.yaml [--flag value ...]
"""

import sys

from trinitylake.spark.runner import main

if __name__ == "__main__":
    sys.exit(main("expire", sys.argv[1:]))
