"""Running the Spark maintenance jobs from the reliability tests, with faults in every process.

`ExecutorFaults` switches storage faults on and off for the driver *and* the Spark executors:
``TLAKE_TEST_FAULTS`` in ``SparkContext.environment`` names a spec file, so new Python workers
install the injector when they import the library, and rewriting the file changes what the
(reused) workers inject. Every injected fault is logged to a folder and counted afterwards,
whichever process injected it.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

from tests.support.faults import ENV, FaultSpec, count_logged, install, uninstall, write_spec_file
from trinitylake.config import load_job_config
from trinitylake.lakehouse import Lakehouse
from trinitylake.runs.results import JobResult


class ExecutorFaults:
    def __init__(self, spark: Any, folder: str):
        self.spark = spark
        self.folder = folder
        self.spec_path = os.path.join(folder, "faults.json")
        self.phase = 0
        self.log_dirs: list[str] = []
        os.makedirs(folder, exist_ok=True)
        write_spec_file(self.spec_path, None)
        env = spark.sparkContext.environment
        self._previous = env.get(ENV)
        env[ENV] = self.spec_path

    def on(self, spec: FaultSpec) -> str:
        """Inject `spec` everywhere from now on; returns the folder its faults are logged to."""
        self.phase += 1
        log_dir = os.path.join(self.folder, f"log-{self.phase}")
        self.log_dirs.append(log_dir)
        write_spec_file(self.spec_path, spec.with_(log_dir=log_dir))
        install(self.spec_path)
        return log_dir

    def off(self) -> None:
        write_spec_file(self.spec_path, None)
        uninstall()

    @staticmethod
    def counted(log_dir: str) -> Counter:
        return count_logged(log_dir)

    def processes(self, log_dir: str) -> int:
        """How many processes injected faults (the driver and each executor worker)."""
        return len(self.pids(log_dir))

    @staticmethod
    def pids(log_dir: str) -> set[int]:
        """The processes that injected faults (one ``faults-<pid>.log`` each)."""
        if not os.path.isdir(log_dir):
            return set()
        return {int(n[len("faults-"):-len(".log")]) for n in os.listdir(log_dir)
                if n.startswith("faults-") and n.endswith(".log")}

    def close(self) -> None:
        self.off()
        env = self.spark.sparkContext.environment
        if self._previous is None:
            env.pop(ENV, None)
        else:
            env[ENV] = self._previous


DEFAULTS: dict[str, dict[str, Any]] = {
    "walk": {},
    "expire": {"max_version_age": "1ms", "min_versions_to_keep": 3, "clock_skew_margin": "0ms",
               "compact_control_table": False},
    "orphans": {},
    "export": {"batch_size": 8},
}


def run(spark: Any, job: str, uri: str, options: dict | None = None, **overrides: Any) -> tuple[JobResult, float]:
    """Run `job` on the lakehouse at `uri` through the job runner (audit off); returns the
    result and the wall time. Raises JobFailedError (a TrinityLakeError) when the job fails."""
    from trinitylake.jobs.runner import run_job

    ov = {"lakehouse": uri, **DEFAULTS[job], **overrides}
    if options:
        ov["storage_options"] = dict(options)
    cfg = load_job_config(job, overrides=ov, env={})
    lh = Lakehouse.open(uri, storage_options=options, audit=False)
    t0 = time.perf_counter()
    result = run_job(job, cfg, spark=spark, audit=False, lakehouse=lh)
    return result, time.perf_counter() - t0
