"""The driver of the cluster-path test's one ``spark-submit``: it runs job entry points one
after another in this driver, each exactly as ``spark-submit jobs/<job>.py ARGS`` runs it (the
file executed as ``__main__`` with its own ``sys.argv``, its exit code taken from
``SystemExit``), so that the jobs share one ``local-cluster`` (its executor JVM and the
unpacked ``./env``) instead of starting one each.

    spark-submit ... tests/integration/_cluster_jobs.py JOBS_JSON

``JOBS_JSON`` is a list of ``[job, [args...]]``. Each job's output is framed by the lines
``@@tlake-job <job>`` and ``@@tlake-exit <job> <code>``.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

JOBS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "jobs")


def main(plan: list[tuple[str, list[str]]]) -> int:
    worst = 0
    for job, args in plan:
        path = os.path.join(JOBS, f"{job}.py")
        print(f"@@tlake-job {job}", flush=True)
        sys.argv = [path, *args]
        try:
            runpy.run_path(path, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        print(f"@@tlake-exit {job} {code}", flush=True)
        worst = worst or code
    return worst


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
