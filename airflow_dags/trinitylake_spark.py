"""``TrinityLakeSparkSubmitOperator``: ``SparkSubmitOperator`` for the TrinityLake jobs.

What it adds, all decided when the task runs (parsing touches neither the connection nor the
disk):

* **The job's Python, by where the driver runs** (the ``spark_default`` connection's master
  and deploy mode):

  - ``local[...]`` master: there are no executors to ship an archive to (Spark unpacks
    ``--archives`` into a temporary folder, where ``./env/bin/python`` is not). The driver and
    the Python workers run the environment of ``make dist`` unpacked once on this worker into
    ``<repo>/build/airflow-env/<sha256 of the tarball, 16 hex>/`` (a new tarball gets a new
    folder; the unpacking is atomic, so concurrent tasks never see half an environment), as
    ``spark.pyspark.python`` and ``spark.pyspark.driver.python``; no ``spark.archives``.
  - client mode on a cluster (YARN, standalone, Kubernetes): the executors get
    ``spark.archives <repo>/dist/trinitylake-env.tar.gz#env`` and run ``./env/bin/python``; the
    driver, on this worker, runs the same environment unpacked here.
  - cluster mode: driver and executors run ``./env/bin/python`` from the archive. The driver's
    container gets the job's main file and what ``--archives``/``--files`` ship, nothing of the
    checkout: the job's ``--conf <repo>/conf/<job>.yaml``, a path on this worker, is shipped
    with ``--files`` and passed by its base name (``--conf <job>.yaml``), which the driver finds
    in its working directory (:func:`ship_conf_file`; on Kubernetes spark-submit uploads the
    local files to ``spark.kubernetes.file.upload.path``, which the connection or ``conf`` sets).
    A YARN cluster-mode task without ``yarn_track_via_rm_api`` is not durable: the provider
    refuses that combination, and a retry submits the job anew.

* **spark-submit**: the ``spark-submit`` on the worker's ``PATH``; else ``$SPARK_HOME/bin``;
  else the pip-installed pyspark of ``<repo>/.venv`` (``make venv``). None of these: the task
  fails at once (no retries) saying so.

* **Environment**: ``env_vars`` that rendered empty are dropped (an unset optional setting,
  such as the export's ``TLAKE_EXPORT_TARGET_STORAGE_OPTIONS``).

* **Results and errors**: where the driver runs on this worker (local and client mode), the
  job writes its outcome to the file ``TLAKE_RESULT_FILE`` names (`trinitylake.jobs.outcome`). The
  job's result (the JSON ``tlake <job> --json`` prints) becomes the task's XCom
  ``return_value``. A permanent error (a typed error no retry can change: a missing lakehouse,
  an export name that exists, a refused unsafe operation, a bad option, ...) fails the task
  with ``AirflowFailException``: no retries. Anything else (a storage failure that outlived its
  own retries, a commit conflict, Spark or the JVM dying) raises as before and is retried. In
  cluster mode no file comes back: every failure is retried (exit code 2, a configuration
  error, is permanent everywhere spark-submit reports it).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

try:  # Airflow 3
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:  # pragma: no cover - Airflow 2
    from airflow.exceptions import AirflowException, AirflowFailException  # type: ignore[no-redef]

RESULT_FILE_ENV = "TLAKE_RESULT_FILE"  # trinitylake.jobs.outcome
ENV_CACHE = ("build", "airflow-env")
ARCHIVE_PYTHON = "./env/bin/python"
#: Exit code of a configuration error (trinitylake.jobs.runner.EXIT_CONFIG; missing packages, see
#: trinitylake.jobs.preflight).
EXIT_CONFIG = 2
_EXIT_RE = re.compile(r"Error code is: (\d+)")


def driver_location(connection: dict[str, Any]) -> str:
    """``local`` (a ``local[...]`` master), ``cluster`` (deploy mode cluster) or ``client``."""
    master = str(connection.get("master") or "")
    if master == "local" or master.startswith("local[") or master.startswith("local-cluster["):
        return "local" if not master.startswith("local-cluster[") else "client"
    return "cluster" if connection.get("deploy_mode") == "cluster" else "client"


def _landed_as(shipped: str) -> str:
    """The name a ``--files`` entry gets in the working directory (``path#alias``: the alias)."""
    path, _, alias = shipped.partition("#")
    return alias or os.path.basename(path)


def ship_conf_file(args: list[str], files: str | None) -> tuple[list[str], str | None]:
    """The job's arguments and ``--files`` for cluster mode: the ``--conf`` YAML (a path on this
    worker, which the driver's container does not have) joins ``files`` and is passed by its
    base name, where spark-submit puts it in the driver's working directory. Arguments without
    ``--conf`` come back as they are (the job then runs on its built-in defaults).

    Raises:
        AirflowFailException: the file is not on this worker (spark-submit would fail on it), or
            ``files`` ships another file of the same name.
    """
    if "--conf" not in args[:-1]:
        return args, files
    i = args.index("--conf") + 1
    path, name = args[i], os.path.basename(args[i])
    shipped = [f.strip() for f in (files or "").split(",") if f.strip()]
    if path == name and any(_landed_as(f) == name for f in shipped):
        return args, files  # shipped already (the arguments of an earlier call)
    if not os.path.isfile(path):
        raise AirflowFailException(
            f"the job's --conf file {path} is not on this worker: cluster mode ships it from here with --files")
    if any(_landed_as(f) == name and f != path for f in shipped):
        raise AirflowFailException(f"--files already ships another {name}; the job's --conf file {path} "
                                   f"would land on the same name in the driver's working directory")
    if path not in shipped:
        shipped.append(path)
    return [*args[:i], name, *args[i + 1:]], ",".join(shipped)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpacked_environment(archive: Path, cache_root: Path, log: Any = None) -> Path:
    """The venv-pack `archive` unpacked under `cache_root/<sha16>` (once per tarball); returns
    its folder. Idempotent and safe under concurrency: unpacked into a temporary sibling, then
    renamed into place."""
    if not archive.is_file():
        raise AirflowFailException(
            f"no {archive}: run `make dist` in the repository the DAG points at (the trinitylake_repo Variable)")
    key = _sha256(archive)[:16]
    target = cache_root / key
    if (target / "bin" / "python").exists():
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache_root))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="tar")
        try:
            os.rename(tmp, target)
        except OSError:  # another task unpacked the same tarball first
            if not (target / "bin" / "python").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if log is not None:
        log.info("unpacked %s into %s in %.1f s", archive, target, time.monotonic() - started)
    _prune(cache_root, keep=target)
    return target


def _prune(cache_root: Path, keep: Path, older_than_s: float = 86_400) -> None:
    """Environments of earlier tarballs, unused for a day (a task of an older tarball that is
    still running keeps its folder for that long)."""
    now = time.time()
    for entry in cache_root.iterdir():
        if entry != keep and entry.is_dir() and now - entry.stat().st_mtime > older_than_s:
            shutil.rmtree(entry, ignore_errors=True)


def find_spark_submit(binary: str, repo: Path) -> str | None:
    """The folder to put on PATH for `binary` (None: it is on PATH already). Raises
    AirflowFailException when there is none."""
    if shutil.which(binary):
        return None
    candidates = []
    if os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "bin")
    candidates += [Path(p).parent for p in sorted(glob.glob(str(repo / ".venv/lib/python3*/site-packages/pyspark/bin"
                                                                     / binary)))]
    for folder in candidates:
        if (folder / binary).is_file():
            return str(folder)
    raise AirflowFailException(
        f"{binary} is not on this worker's PATH, nor in $SPARK_HOME/bin or {repo}/.venv (make venv): install Spark "
        f"(or pip install pyspark) on the worker and put its bin/ on PATH, or set SPARK_HOME")


def read_outcome(path: str | None) -> dict[str, Any] | None:
    if not path or not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    try:
        with open(path) as f:
            outcome = json.load(f)
    except (OSError, ValueError):
        return None
    return outcome if isinstance(outcome, dict) else None


# SparkSubmitHook keeps what it resolved from the Airflow connection (master, deploy mode, binary)
# in protected attributes only; these two adapters are the one place that reads them.
def _resolved_connection(hook: Any) -> dict[str, Any]:
    """The hook's resolved connection settings (``master``, ``deploy_mode``, ``spark_binary``)."""
    return hook._connection  # noqa: SLF001 - the Spark provider has no public accessor


def _on_kubernetes(hook: Any) -> bool:
    """Whether the hook submits to Kubernetes (there env_vars reach only a driver pod)."""
    return bool(hook._is_kubernetes)  # noqa: SLF001 - the Spark provider has no public accessor


class TrinityLakeSparkSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator of one TrinityLake job (see the module docstring).

    Args:
        repo: the checkout with jobs/, conf/ and dist/ (templated: the trinitylake_repo Variable).
        env_archive: the tarball of ``make dist``, relative to ``repo``.
    """

    template_fields = (*SparkSubmitOperator.template_fields, "repo")

    def __init__(self, *, repo: str, env_archive: str = "dist/trinitylake-env.tar.gz", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.repo = repo
        self.env_archive = env_archive

    def _prepare(self) -> str | None:
        """Set the interpreter, the archive, PATH and the result file for where the driver
        runs; returns the result file's path (None where none comes back)."""
        # A templated variable that rendered empty (the export's target storage options when no
        # param or Variable gives any) is left out: the job reads an empty variable as unset, and
        # spark-submit's standalone cluster mode refuses any env_vars.
        self.env_vars = {k: v for k, v in (self.env_vars or {}).items() if str(v).strip()} or None
        repo = Path(self.repo)
        probe = self._get_hook()  # resolves the connection: master and deploy mode
        conn = _resolved_connection(probe)
        where = driver_location(conn)
        binary = conn.get("spark_binary") or "spark-submit"
        folder = find_spark_submit(binary, repo)
        if folder:
            self.log.info("spark-submit from %s", folder)
            os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
        conf = dict(self.conf or {})
        self.log.info("master %s, deploy mode %s: the driver runs %s", conn.get("master"),
                      conn.get("deploy_mode") or "client",
                      "here" if where != "cluster" else "on the cluster")
        result_file = None
        if where == "cluster":
            args, self.files = ship_conf_file([str(a) for a in self.application_args or []], self.files)
            if args != list(self.application_args or []):
                self.log.info("cluster mode: --files %s, the job reads --conf %s in the driver's working directory",
                              self.files, args[args.index("--conf") + 1])
            self.application_args = args
            on_yarn = str(conn.get("master") or "").startswith("yarn")
            if on_yarn and getattr(self, "durable", False) and not getattr(self, "_yarn_track_via_rm_api", False):
                # The provider refuses a durable YARN cluster-mode task that does not poll the
                # ResourceManager's REST API (set yarn_track_via_rm_api to reconnect on a retry
                # instead): a retry then submits the job anew, which every job allows (a re-run
                # completes what a failed run began).
                self.log.info("YARN cluster mode without yarn_track_via_rm_api: a retry submits the job anew")
                self.durable = False
        else:
            python = str(unpacked_environment(repo / self.env_archive, repo.joinpath(*ENV_CACHE), self.log)
                         / "bin" / "python")
            conf["spark.pyspark.driver.python"] = python
            if where == "local":  # no executors to ship the archive to
                conf.pop("spark.archives", None)
                conf["spark.pyspark.python"] = python
            if not _on_kubernetes(probe):  # k8s client mode passes env_vars only to a driver pod
                fd, result_file = tempfile.mkstemp(prefix=f"tlake-{self.task_id}-", suffix=".json")
                os.close(fd)
                os.unlink(result_file)  # the job creates it; an empty leftover never reads as an outcome
                self.env_vars = {**(self.env_vars or {}), RESULT_FILE_ENV: result_file}
        self.conf = conf
        self._hook = self._get_hook()  # with the final conf and environment
        return result_file

    def execute(self, context: Any) -> Any:
        result_file = self._prepare()
        try:
            super().execute(context)
        except AirflowException as e:
            outcome = read_outcome(result_file)
            self._raise_for(outcome, e, context)
            raise
        finally:
            outcome = read_outcome(result_file)
            if result_file and os.path.exists(result_file):
                os.unlink(result_file)
        return (outcome or {}).get("result")

    def _raise_for(self, outcome: dict[str, Any] | None, error: AirflowException, context: Any) -> None:
        """AirflowFailException (no retries) for a permanent error; else nothing (the caller re-raises)."""
        if outcome is not None and outcome.get("result") is not None:
            try:
                context["ti"].xcom_push(key="failed_result", value=outcome["result"])
            except Exception as push_error:  # noqa: BLE001 - the job's own failure matters more
                self.log.warning("could not push the failed result to XCom: %s", push_error)
        match = _EXIT_RE.search(str(error))
        exit_code = outcome.get("exit_code") if outcome else int(match.group(1)) if match else None
        permanent = bool(outcome.get("permanent")) if outcome else exit_code == EXIT_CONFIG
        what = (f"{outcome.get('error_type') or 'error'}: {outcome.get('error') or 'see the log above'}" if outcome
                else f"spark-submit exit code {exit_code}")
        if permanent:
            self.log.error("%s failed with a permanent error, not retried: %s", self.task_id, what)
            raise AirflowFailException(f"{self.task_id}: {what} (permanent: not retried; fix it, then clear the task)")
        self.log.warning("%s failed with a transient error, retried while retries remain: %s", self.task_id, what)
