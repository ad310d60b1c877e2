"""spark-submit entry point of the snapshot export job.

    spark-submit jobs/export.py --conf conf/export.yaml --lakehouse s3://bucket/lh \
        --name weekly-20261122 --target s3://backup/lh/weekly-20261122 [--mode partial --depth 1]

A target on another store (another S3 endpoint or account) takes its own options:
``--target-storage-option endpoint_url=https://dr.example.com`` (repeatable), or
``target_storage_options:`` in the ``--conf`` file, with the credentials in
``TLAKE_TARGET_AWS_ACCESS_KEY_ID`` / ``TLAKE_TARGET_AWS_SECRET_ACCESS_KEY`` (and
``TLAKE_TARGET_S3_ENDPOINT_URL``); see `trinitylake.storage.target_options`.

All logic lives in `trinitylake.jobs.export.job` (run through the shared job runner).

This file imports nothing but ``trinitylake`` (from the environment of ``make dist``): in cluster
deploy mode it is all of the project the driver's container gets. The defaults of
``conf/export.yaml`` are built into the package; a YAML shipped with ``--files`` is found by its
base name in the working directory.
"""

import sys

try:
    from trinitylake.jobs.entry import run
except ModuleNotFoundError as e:  # the package checks its own dependencies, not its own absence
    if e.name != "trinitylake":
        raise
    sys.stderr.write(
        f"tlake export: missing Python packages on {sys.executable}: trinitylake and its dependencies "
        "(ship the environment from `make dist` with spark-submit --archives "
        "dist/trinitylake-env.tar.gz#env, or pip install the wheel)\n"
    )
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(run("export"))
