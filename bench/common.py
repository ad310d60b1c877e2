"""Shared benchmark plumbing: timing, I/O counting, a local S3 server, the result files.

Every ``bench/bench_<name>.py`` module exposes ``main(argv: list[str] | None = None) -> int``
that accepts at least ``--scale small|large`` (``small`` is the default and must finish in
about a minute on a 2-core machine), runs, and writes its result file(s) with
:func:`write_result` (usually one; a module measuring two unrelated things may write one per
table, e.g. ``control_audit`` and ``control_show``). ``python -m bench.run_all`` runs each module in its own subprocess, then
renders every ``bench/results/*.json`` into ``BENCHMARKS.md`` (one table per result) and PNG
plots.

Result schema (``bench/results/<name>.json``)
---------------------------------------------
``write_result(name, title, rows, ratios, ...)`` adds the machine facts itself. Fields:

- ``name`` (str): short id, also the file stem; e.g. ``"format"``.
- ``title`` (str): heading in BENCHMARKS.md; e.g. ``"Format core: bytes and files per commit"``.
- ``description`` (str, optional): one paragraph of what was measured and how (Markdown).
- ``scale`` (str): ``"small"`` or ``"large"``. A large-scale result is stored as
  ``<name>_large`` (its own file and section), next to the small one.
- ``module`` (str, added): the ``bench_<module>.py`` that wrote it.
- ``params`` (dict, optional): the knobs of the run (tables, commits, seeds, ...).
- ``rows`` (list of flat dicts): the table. Values are numbers, strings, bools or None; every
  row should have the same keys. Every row carries ``run_id`` (the run that measured it) and
  ``commit`` (``machine.git`` of that run), added by :func:`write_result` to the rows that do not
  name them already: a benchmark that keeps rows of an earlier run (``bench_scale``,
  ``bench_objstore --merge``) keeps their own, ``None`` for rows written before rows had one. ``columns`` (list of str, optional): the columns BENCHMARKS.md
  shows, in that order (default: every key, in first-seen order); the JSON keeps them all.
- ``ratios`` (dict str -> number): the headline comparisons, each key a sentence-like label
  that states both sides, e.g. ``"bytes per commit, single-node baseline / ours, 10k tables"``.
  Ratios compare numbers measured in the SAME run (the machines are noisy): when the rows come
  from several runs, ``ratio_runs`` (dict label -> run id) names the one run each ratio's sides
  come from, and :func:`write_result` refuses (:class:`MixedRunsError`) a ratio without one.
- ``notes`` (list of str, optional): caveats rendered under the table.
- ``plot`` (dict or list of dicts, optional): scaling curves drawn by run_all into
  ``bench/results/<name>[-<id>].png``. Keys: ``x`` (column), ``ys`` (list of columns),
  optional ``id`` (file suffix when there are several plots), ``group`` (column whose values
  split each y into separate lines, e.g. ``"backend"``), ``logx``/``logy`` (bool),
  ``title``, ``xlabel``, ``ylabel``, ``kind`` (``"line"`` default, or ``"bar"``), ``where``
  (dict column -> value: plot only the rows that match, e.g. ``{"job": "walk"}``).
- ``machine`` (dict, added): ``cpu_count``, ``python``, ``platform``, ``date`` (UTC ISO),
  ``git`` (short commit, ``+dirty`` when the tree has changes).
- ``seconds`` (number, optional): wall time of the benchmark.
- ``run_id`` (str, added): the run that wrote the file (:data:`RUN_ID`).

Example::

    from bench.common import parse_args, write_result
    def main(argv=None):
        args = parse_args("demo", argv)
        rows = [{"n": 1, "seconds": 0.1}, {"n": 10, "seconds": 0.9}]
        write_result("demo", "Demo: time by n", rows, {"time at n=10 / n=1": 9.0},
                     scale=args.scale, plot={"x": "n", "ys": ["seconds"], "logx": True})
        return 0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
TMP_DIR = RESULTS_DIR / "tmp"  # git-ignored scratch space for lakehouses built by benchmarks

SCALES = ("small", "large")


# ---- arguments ------------------------------------------------------------------------------
def parse_args(name: str, argv: list[str] | None, extra: Callable[[argparse.ArgumentParser], None] | None = None):
    """Common arguments (``--scale``, ``--keep``) plus whatever `extra` adds."""
    p = argparse.ArgumentParser(prog=f"python -m bench.bench_{name}")
    p.add_argument("--scale", choices=SCALES, default="small")
    p.add_argument("--keep", action="store_true", help="keep the scratch lakehouses under bench/results/tmp")
    if extra:
        extra(p)
    return p.parse_args(argv)


# ---- timing -------------------------------------------------------------------------------
class Timer:
    """``with Timer() as t: ...; t.seconds``."""

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start


def summarize(values: list[float]) -> dict[str, float]:
    """mean, median, p95, min, max (0.0 for all when empty)."""
    if not values:
        return {"mean": 0.0, "median": 0.0, "p95": 0.0, "min": 0.0, "max": 0.0}
    s = sorted(values)
    return {
        "mean": statistics.fmean(s),
        "median": statistics.median(s),
        "p95": s[min(len(s) - 1, round(0.95 * (len(s) - 1)))],
        "min": s[0],
        "max": s[-1],
    }


def time_calls(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Seconds of `repeat` calls of `fn`."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def ratio(a: float, b: float) -> float | None:
    """a / b rounded to 3 significant decimals, None when b is 0."""
    return round(a / b, 3) if b else None


# ---- counting storage I/O -----------------------------------------------------------------
_ROOT_RE = re.compile(r"(^|/)_[01]{64}\.arrow$")


def file_kind(path: str) -> str:
    """Category of a lakehouse file path: root, node, def (object definitions), lakehouse_def, hint, other."""
    base = path.rsplit("/", 1)[-1]
    if _ROOT_RE.search(path):
        return "root"
    if base == "_latest_hint.txt":
        return "hint"
    if base.startswith("_lakehouse_def_"):
        return "lakehouse_def"
    if "-node-" in base and base.endswith(".arrow"):
        return "node"
    if base.endswith(".binpb"):
        return "def"
    return "other"


@dataclass
class IOCounter:
    """Files and bytes written and read through one Storage, by file kind."""

    files: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    read_files: dict[str, int] = field(default_factory=dict)
    read_bytes: dict[str, int] = field(default_factory=dict)
    exists_calls: int = 0

    def reset(self) -> None:
        for d in (self.files, self.bytes, self.read_files, self.read_bytes):
            d.clear()
        self.exists_calls = 0

    def requests(self) -> int:
        """Storage calls counted: writes, reads and existence checks (S3 requests, roughly)."""
        return sum(self.files.values()) + sum(self.read_files.values()) + self.exists_calls

    def _add(self, files: dict[str, int], nbytes: dict[str, int], path: str, size: int) -> None:
        k = file_kind(path)
        files[k] = files.get(k, 0) + 1
        nbytes[k] = nbytes.get(k, 0) + size

    def total_files(self, kinds: tuple[str, ...] | None = None) -> int:
        return sum(v for k, v in self.files.items() if kinds is None or k in kinds)

    def total_bytes(self, kinds: tuple[str, ...] | None = None) -> int:
        return sum(v for k, v in self.bytes.items() if kinds is None or k in kinds)

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {
            "files": dict(self.files),
            "bytes": dict(self.bytes),
            "read_files": dict(self.read_files),
            "read_bytes": dict(self.read_bytes),
            "exists_calls": self.exists_calls,
        }


def count_io(storage: Any, counter: IOCounter | None = None) -> IOCounter:
    """Count the writes (``write``, ``create_exclusive``), reads and ``exists`` calls of one
    `Storage` instance.

    Patches the instance only (bench code; the library is untouched). A failed exclusive
    create (lost race) is not counted.
    """
    c = counter or IOCounter()
    if getattr(storage, "_bench_counter", None) is not None:
        return storage._bench_counter
    write, create, read, exists = storage.write, storage.create_exclusive, storage.read, storage.exists

    def counted_write(path: str, data: Any) -> None:
        write(path, data)
        c._add(c.files, c.bytes, path, len(data))

    def counted_create(path: str, data: Any) -> None:
        create(path, data)
        c._add(c.files, c.bytes, path, len(data))

    def counted_read(path: str) -> bytes:
        data = read(path)
        c._add(c.read_files, c.read_bytes, path, len(data))
        return data

    def counted_exists(path: str) -> bool:
        c.exists_calls += 1
        return exists(path)

    storage.write = counted_write
    storage.exists = counted_exists
    storage.create_exclusive = counted_create
    storage.read = counted_read
    storage._bench_counter = c
    return c


def uncount_io(storage: Any) -> None:
    """Undo :func:`count_io` (the instance is picklable again, e.g. for Spark closures)."""
    for name in ("write", "create_exclusive", "read", "exists", "_bench_counter"):
        storage.__dict__.pop(name, None)


# ---- scratch directories --------------------------------------------------------------------
@contextlib.contextmanager
def scratch_dir(name: str, keep: bool = False) -> Iterator[Path]:
    """A fresh directory under bench/results/tmp (removed afterwards unless `keep`)."""
    TMP_DIR.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=TMP_DIR))
    try:
        yield d
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


# ---- local S3 server ----------------------------------------------------------------------------
@dataclass
class LocalS3:
    """A running moto S3 server on 127.0.0.1 (see :func:`local_s3`)."""

    endpoint_url: str
    key: str
    secret: str
    region: str
    _client: Any = None

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint_url, "key": self.key, "secret": self.secret}

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket and return its ``s3://`` URI."""
        import uuid

        import boto3

        if self._client is None:
            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint_url,
                aws_access_key_id=self.key,
                aws_secret_access_key=self.secret,
                region_name=self.region,
            )
        name = name or f"bench-{uuid.uuid4().hex[:12]}"
        self._client.create_bucket(Bucket=name)
        return f"s3://{name}"


@contextlib.contextmanager
def local_s3() -> Iterator[LocalS3]:
    """moto's ThreadedMotoServer on 127.0.0.1 and a free port, as the tests start it
    (tests/s3server.py): fake credentials in the environment (inherited by subprocesses),
    no AWS profile or proxy, werkzeug quiet. It enforces ``If-None-Match: *``.

    The server runs in a thread of THIS process: keep this process idle (e.g. waiting on
    worker processes) while measuring, or its GIL competes with the server.
    """
    from moto.server import ThreadedMotoServer

    try:  # one source of truth for the fake credentials and scrubbed variables
        from tests.s3server import _SCRUBBED_ENV, ACCESS_KEY, REGION, SECRET_KEY
    except Exception:  # noqa: BLE001 - tests/ not importable: same values
        ACCESS_KEY, SECRET_KEY, REGION = "testing", "testing", "us-east-1"
        _SCRUBBED_ENV = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE")
    saved = dict(os.environ)
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
    )
    for k in _SCRUBBED_ENV:
        os.environ.pop(k, None)
    no_proxy = ",".join(x for x in (os.environ.get("NO_PROXY", ""), "127.0.0.1,localhost") if x)
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = no_proxy
    wlog = logging.getLogger("werkzeug")
    old_level = wlog.level
    wlog.setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield LocalS3(f"http://{host}:{port}", ACCESS_KEY, SECRET_KEY, REGION)
    finally:
        server.stop()
        wlog.setLevel(old_level)
        os.environ.clear()
        os.environ.update(saved)


# ---- results --------------------------------------------------------------------------------
#: This process's run: every row it writes carries it, so that a ratio, a crossover or a fit is
#: computed from rows of one run only (a result file may keep rows of earlier runs).
RUN_ID = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


class MixedRunsError(ValueError):
    """Figures of different bench runs were about to be compared (the machines are noisy: a
    ratio of two runs measures the machine's other work as much as ours)."""


def run_of(row: dict[str, Any]) -> str | None:
    """The run a row was measured in; None for rows written before rows carried one."""
    run = row.get("run_id")
    return str(run) if run else None


def one_run(rows: list[dict[str, Any]], what: str) -> str:
    """The run id every one of `rows` carries; :class:`MixedRunsError` when they come from
    several runs or one of them has no run id (`what` names the figure refused)."""
    runs = {run_of(r) for r in rows}
    if not rows or None in runs or len(runs) != 1:
        shown = ", ".join(sorted(r or "no run id" for r in runs)) or "no rows"
        raise MixedRunsError(f"refusing {what}: its rows come from {shown}, not from one run")
    return str(runs.pop())


_COMMIT: list[str | None] = []


def commit() -> str | None:
    """The commit measured (``machine_info()['git']``), looked up once per process."""
    if not _COMMIT:
        _COMMIT.append(machine_info().get("git"))
    return _COMMIT[0]


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        # The benchmarks' own outputs do not make the measured code dirty: their result files (a
        # benchmark that writes its result after each size would otherwise call its own second
        # write dirty) and BENCHMARKS.md, which run_all re-renders after each benchmark (every
        # benchmark after the first of a run was stamped +dirty for it).
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", ".", ":(exclude)bench/results", ":(exclude)BENCHMARKS.md"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        info["git"] = sha + ("+dirty" if dirty else "") if sha else None
    except (OSError, subprocess.SubprocessError):
        info["git"] = None
    return info


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    return v


def write_result(
    name: str,
    title: str,
    rows: list[dict[str, Any]],
    ratios: dict[str, float | None],
    *,
    scale: str = "small",
    description: str | None = None,
    params: dict[str, Any] | None = None,
    columns: list[str] | None = None,
    notes: list[str] | None = None,
    plot: dict[str, Any] | list[dict[str, Any]] | None = None,
    seconds: float | None = None,
    module: str | None = None,
    ratio_runs: dict[str, str] | None = None,
) -> Path:
    """Write ``bench/results/<name>.json`` in the schema of this module's docstring.

    Results of a non-default scale go to ``<name>_<scale>.json`` (name and title say so), so
    that ``make bench`` and ``make bench-large`` results sit side by side in BENCHMARKS.md.
    `module` is the ``bench_<module>.py`` that produced it (default: `name`). Rows without a
    ``run_id``/``commit`` get this run's; when the rows span several runs, every ratio must be
    named in `ratio_runs` with a run of the rows (:class:`MixedRunsError` otherwise).
    """
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise ValueError(f"benchmark name must be [a-z0-9_]+, got {name!r}")
    rows = [{**r, "run_id": r.get("run_id", RUN_ID), "commit": r.get("commit", commit())} for r in rows]
    runs = {run_of(r) for r in rows}
    if ratios and len(runs) > 1:
        unnamed = [k for k in ratios if (ratio_runs or {}).get(k) not in runs - {None}]
        if unnamed:
            raise MixedRunsError(
                f"{name}: rows of {len(runs)} runs and no one run named for the ratio(s) {'; '.join(unnamed[:3])}"
            )
    module = module or name
    if scale != SCALES[0]:
        name, title = f"{name}_{scale}", f"{title} ({scale} scale)"
    doc: dict[str, Any] = {
        "name": name,
        "module": module,
        "title": title,
        "description": description,
        "scale": scale,
        "params": params or {},
        "columns": columns,
        "rows": rows,
        "ratios": ratios,
        "ratio_runs": {k: v for k, v in (ratio_runs or {}).items() if k in ratios} or None,
        "notes": notes or [],
        "plot": plot,
        "machine": machine_info(),
        "seconds": seconds,
        "run_id": RUN_ID,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_clean(doc), indent=2, default=str) + "\n")
    os.replace(tmp, path)
    print(f"wrote {os.path.relpath(path, REPO_ROOT)}")
    return path


def load_results() -> list[dict[str, Any]]:
    """Every result file, sorted by name (files that do not parse are skipped with a warning)."""
    out = []
    for p in sorted(RESULTS_DIR.glob("*.json")):
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"skipping {p}: {e}")
            continue
        if isinstance(doc, dict) and "rows" in doc:
            doc.setdefault("name", p.stem)
            out.append(doc)
    return out
