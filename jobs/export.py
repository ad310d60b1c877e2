"""spark-submit entry point of the snapshot export job.

    spark-submit jobs/export.py --conf conf/export.yaml --lakehouse s3://bucket/lh \
        --name weekly-20261122 --target s3://backup/lh/weekly-20261122 [--mode partial --depth 1]

All logic lives in `trinitylake.spark.export` (run through the shared job runner).
"""

import sys

from trinitylake.spark.runner import main

if __name__ == "__main__":
    sys.exit(main("export", sys.argv[1:]))
