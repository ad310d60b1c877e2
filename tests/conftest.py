"""Shared fixtures: one local Spark session per test run, the local S3 server, lakehouses."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # so `tests.s3server` and `bench` import from a checkout

# Processes started by the tests (CLI runs, the export's copy workers, Spark's JVM and its Python
# workers) inherit this:
# tests/support/faultsite/sitecustomize.py installs storage faults there when a test sets
# TLAKE_TEST_FAULTS (production code never reads that switch).
FAULTSITE = os.path.join(ROOT, "tests", "support", "faultsite")
if FAULTSITE not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (FAULTSITE, os.environ.get("PYTHONPATH")) if p)
if FAULTSITE not in sys.path:
    sys.path.insert(0, FAULTSITE)
import tlake_test_seams  # noqa: E402 - needs FAULTSITE on sys.path

tlake_test_seams.install()  # crash points of in-process runs, by variable

# Every Spark driver JVM the tests start reads SPARK_SUBMIT_OPTS: C1 only, the serial collector,
# and the class-data-sharing archive `make test` builds (tests/jvm_archive.py says why and what
# each one saves). Only the JVM's start-up and tuning change, never what runs; a value already
# set is kept.
from tests.jvm_archive import submit_opts  # noqa: E402

os.environ.setdefault("SPARK_SUBMIT_OPTS", submit_opts())

pytest_plugins = ["tests.s3server"]

#: The Hypothesis seed of this run (see `pytest_configure`).
HYPOTHESIS_SEED: int | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Every run tries new inputs: unless ``--hypothesis-seed`` (or ``TLAKE_HYPOTHESIS_SEED``)
    names one, a fresh random seed is drawn and handed to Hypothesis's plugin (which reads the
    option after this hook). The seed is printed in the header and, for a failure, by
    Hypothesis; replay a run with ``--hypothesis-seed=<seed>``."""
    global HYPOTHESIS_SEED
    import secrets

    given = config.getoption("--hypothesis-seed", default=None) or os.environ.get("TLAKE_HYPOTHESIS_SEED")
    seed = int(given) if given is not None else secrets.randbelow(2**32)
    config.option.hypothesis_seed = str(seed)
    # pytest-xdist's workers start after this hook and inherit the environment: the whole
    # run, every worker, replays with the one printed seed.
    os.environ["TLAKE_HYPOTHESIS_SEED"] = str(seed)
    HYPOTHESIS_SEED = seed


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first: `make test` runs the files on pytest-xdist workers (``--dist
    loadfile``: a file's module fixtures are set up once, on one worker), and a multi-minute
    file (every command on S3, the kill cases) handed out last would leave the other worker
    idle at the end. Files keep their tests together and in order; only files move.

    pytest-xdist reorders files by their number of tests unless told not to (its default
    ``--loadscope-reorder``): `make test` passes ``--no-loadscope-reorder``, without which the
    single-test file of every command on S3 started last, alone, for its 160 s."""
    def weight(item: pytest.Item) -> int:
        rel = item.path.relative_to(ROOT).as_posix()
        if rel in LONGEST_FILES:
            return 10 + len(LONGEST_FILES) - LONGEST_FILES.index(rel)
        marks = {m.name for m in item.iter_markers()}
        return 2 if "slow" in marks else 1 if marks & {"spark", "s3"} else 0

    by_file: dict[str, int] = {}
    for item in items:
        path = str(item.path)
        by_file[path] = max(by_file.get(path, 0), weight(item))
    items.sort(key=lambda item: -by_file[str(item.path)])  # stable: order within a weight stays


#: The files that take minutes, longest first (per-file sums of a `make test` run's junit times,
#: at fbfab97).
LONGEST_FILES = (
    "tests/spark/test_modes.py",
    "tests/secrets/test_channels_s3.py",
    "tests/reliability/test_oracle_kills.py",
    "tests/rest_catalog/test_rck.py", "tests/rest_catalog/test_spark_breadth.py",  # ~4 and ~3 min (issue 53)
    "tests/spark/test_orphans.py",
    "tests/integration/test_cluster_path.py",
    "tests/reliability/test_maintenance_properties.py",
    "tests/control/test_spark_delta.py",
    "tests/spark/test_expire.py",
    "tests/secrets/test_channels.py",
    "tests/control/test_spark_connect_control.py",
    "tests/rest_catalog/test_spark_sql.py",
    "tests/rest_catalog/test_views.py", "tests/rest_catalog/test_spark_v3.py",  # Spark 4.1 sessions (issue 53)
    "tests/export/test_export_execution.py",
)


#: The reliability figures of each pytest-xdist worker (tests/reliability/conftest.py).
_WORKER_RELIABILITY: list[dict] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    run = getattr(node, "workeroutput", {}).get("reliability")
    if run:
        _WORKER_RELIABILITY.append(run)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """On the pytest-xdist controller: the workers' reliability figures merged and written as
    one run's (each worker ran some of the files)."""
    if _WORKER_RELIABILITY and not hasattr(session.config, "workerinput"):
        from tests.reliability.conftest import merge_runs, write_results

        write_results(session, merge_runs(_WORKER_RELIABILITY))


def _seed_line() -> str:
    return f"hypothesis seed: {HYPOTHESIS_SEED} (replay with --hypothesis-seed={HYPOTHESIS_SEED})"


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """The seed first, flushed, whatever the verbosity: under ``-q`` (`make test`) pytest prints no
    header, and a run killed or timed out never reaches the summary that prints it last."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(session.config, "workerinput"):
        reporter.write_line(_seed_line())
        reporter.flush()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    terminalreporter.write_line(_seed_line())


@pytest.fixture(scope="session")
def spark():
    """A local Spark session shared by the whole run (sessions cost ~7 s to start here)."""
    from trinitylake.spark.session import get_spark

    session = get_spark("local[2]", app_name="trinitylake-tests", conf={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_spark():
    """A Spark Connect client session, served by a local Connect server in its own process:
    the jobs run as they do on Databricks serverless or a shared cluster (no SparkContext)."""
    import secrets
    import socket
    import subprocess

    from trinitylake.spark.session import get_spark

    token = secrets.token_hex(16)
    env = {**os.environ, "SPARK_CONNECT_AUTHENTICATE_TOKEN": token, "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_REMOTE", None)
    # A free port is only free when it is picked: until the server's JVM binds it (10-20 s),
    # any outgoing connection of another test process (the S3 engine keeps hundreds) may be
    # given it as its ephemeral port, and the server then fails to bind. Another port, then.
    for attempt in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen([sys.executable, "-m", "tests.connect_server", str(port)], cwd=ROOT, env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = server.stdout.readline()
        if line.strip() == "ready":
            break
        code = server.wait()
        if attempt == 2:
            pytest.fail(f"the Spark Connect test server did not start (exit code {code}, 3 ports tried)")
    try:
        os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
        session = get_spark(remote=f"sc://localhost:{port}")
        yield session
        session.stop()
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.fixture
def lakehouse_uri(tmp_path):
    return str(tmp_path / "lh")


@pytest.fixture
def make_lakehouse(tmp_path):
    """Factory for small lakehouses with multi-level trees (order 4, 4 KiB nodes)."""
    from trinitylake.lakehouse import Lakehouse

    counter = {"n": 0}

    def make(uri: str | None = None, **kwargs):
        counter["n"] += 1
        kwargs.setdefault("order", 4)
        kwargs.setdefault("node_max_bytes", 4096)
        kwargs.setdefault("audit", False)
        return Lakehouse.create(uri or str(tmp_path / f"lh{counter['n']}"), **kwargs)

    return make
