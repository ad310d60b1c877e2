"""spark-submit entry point of the TrinityLake tables_expire job, the Iceberg tables' snapshot expiry (see
`trinitylake.jobs.runner`).

    spark-submit jobs/tables_expire.py --lakehouse s3://bucket/lh --conf conf/tables_expire.yaml [--flag value ...]

This file imports nothing but ``trinitylake`` (from the environment of ``make dist``): in cluster
deploy mode it is all of the project the driver's container gets. The defaults of
``conf/tables_expire.yaml`` are built into the package; a YAML shipped with ``--files`` is found by
its base name in the working directory.

Exit status: 0 done, 1 failed or refused, 2 a configuration error, 3 partial (a table whose
metadata, manifest list or manifest cannot be read was skipped, none of its files deleted, and
the others maintained; with ``TLAKE_RESULT_FILE`` the outcome file says ``"status": "partial"``).
"""

import sys

try:
    from trinitylake.jobs.entry import run
except ModuleNotFoundError as e:  # the package checks its own dependencies, not its own absence
    if e.name != "trinitylake":
        raise
    sys.stderr.write(
        f"tlake tables_expire: missing Python packages on {sys.executable}: trinitylake and its dependencies "
        "(ship the environment from `make dist` with spark-submit --archives "
        "dist/trinitylake-env.tar.gz#env, or pip install the wheel)\n"
    )
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(run("tables_expire"))
