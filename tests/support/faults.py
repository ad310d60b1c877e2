"""Storage fault injection and process kills, for the reliability tests and benchmarks only
(test code: the library has no switch, parameter or branch for it).

Faults are injected at the storage boundary, *below* the storage's own retries, so a transient
fault exercises the retry policy exactly as a real one would, and a permanent fault reaches the
caller as the typed error it would get in production:

* `Storage._io`, the single call through which every attempt of every storage operation goes
  (``read``, ``exists``, ``info``, ``write``, ``create_exclusive``, ``delete``, ``list``,
  ``list_dirs``), wrapped from here;
* the operating system's ``os.open`` and ``os.stat`` relative to a directory descriptor
  (``dir_fd``), which the library's bulk local paths call without the storage (node reads of
  the walk, local sizing): a fault there is what the disk would answer, and the library's own
  handling (asking the storage again, with its retries and typed errors) takes it from there.

The stat worker of `maintenance.background_sizes` runs isolated (``python -I``): nothing of the
tests reaches it, and the tests kill it instead.

Three ways to use it:

* ``FaultyStorage(root, options, spec=FaultSpec(...))``: one storage that injects faults into
  its own `_io` (``Lakehouse(FaultyStorage(...))`` for commits);
* ``with injected(FaultSpec(...)) as inj:``: every Storage of this process, and of the
  processes it starts meanwhile (``TLAKE_TEST_FAULTS`` is set for them: the export's copy
  worker processes, CLI runs);
* ``TLAKE_TEST_FAULTS`` with `install_from_env`, for other processes (CLI runs, copy workers,
  Spark's Python workers, which inherit the variable through ``SparkContext.environment``):
  the tests' start-up hook ``tests/support/faultsite/sitecustomize.py`` calls it. Its value is a
  JSON spec, or the path of a JSON spec file that is re-read whenever it changes (a test
  switches faults on and off for long-lived Python workers by rewriting the file; a missing or
  empty file means no faults).

Fault kinds, shaped like the real errors of each layer:

* transient: ``connection`` (ConnectionResetError), ``timeout`` (TimeoutError), ``eio``
  (OSError EIO), ``slowdown`` (what s3fs raises for an S3 503 SlowDown: OSError EBUSY caused
  by a botocore ClientError with code SlowDown and status 503). A share of them
  (``after_share``) is raised *after* the operation took effect: the ambiguous failure of a
  write or exclusive create whose answer was lost. At most ``max_consecutive`` transient
  faults hit one (operation, path) in a row, like a real blip.
* permanent: ``denied`` (PermissionError EACCES, an S3 403 AccessDenied), ``enospc``
  (OSError ENOSPC); always raised before the operation takes effect.
* kill: ``kill_op``: the process SIGKILLs itself (no cleanup, no ``finally``) at its
  ``kill_nth`` storage operation ``kill_op`` (on a path matching ``kill_paths``): ``before``
  it runs, ``after`` it took effect, or (a bulk delete) after the first ``half`` of its batch.
  With ``kill_token`` (a file path) only the first process to get there dies: the one that
  creates the token file; the others go on.

Every injected fault is counted (``FaultInjector.counts``) and, with ``log_dir``, appended as
one line to ``<log_dir>/faults-<pid>.log`` so that faults injected in other processes can be
counted too (`count_logged`); a kill is logged there as ``kill`` before the process dies.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from trinitylake.storage.storage import Storage

ENV = "TLAKE_TEST_FAULTS"
OPS = ("read", "exists", "info", "write", "create_exclusive", "delete", "list", "list_dirs")
MUTATING_OPS = ("write", "create_exclusive", "delete")
TRANSIENT_KINDS = ("connection", "timeout", "eio", "slowdown")
PERMANENT_KINDS = ("denied", "enospc")


@dataclass(frozen=True)
class FaultSpec:
    """What to inject. Rates are probabilities per attempt (transient) or per call (permanent)."""

    transient_rate: float = 0.0
    permanent_rate: float = 0.0
    ops: tuple[str, ...] = OPS
    transient_kinds: tuple[str, ...] = TRANSIENT_KINDS
    permanent_kinds: tuple[str, ...] = ("denied",)
    #: Share of transient faults raised after the operation took effect (ambiguous outcome).
    after_share: float = 0.3
    #: At most this many transient faults in a row for one (operation, path).
    max_consecutive: int = 2
    #: Only paths matching this regex (``re.search``) get random faults; None = every path.
    paths: str | None = None
    #: Every call of `permanent_ops` on a path matching this regex fails permanently.
    permanent_paths: str | None = None
    permanent_ops: tuple[str, ...] = MUTATING_OPS
    seed: int | None = None
    log_dir: str | None = None
    #: SIGKILL this process at its `kill_nth` operation `kill_op` (on a path matching
    #: `kill_paths`), `kill_when` "before", "after" or (a bulk delete) "half".
    kill_op: str | None = None
    kill_nth: int = 1
    kill_when: str = "after"
    kill_paths: str | None = None
    #: Only the process that creates this file first is killed (None: every process).
    kill_token: str | None = None

    def __post_init__(self) -> None:
        for name in ("ops", "transient_kinds", "permanent_kinds", "permanent_ops"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        unknown = (set(self.ops) | set(self.permanent_ops)) - set(OPS)
        if unknown:
            raise ValueError(f"unknown storage operations {sorted(unknown)}; expected some of {OPS}")
        bad = set(self.transient_kinds) - set(TRANSIENT_KINDS) | set(self.permanent_kinds) - set(PERMANENT_KINDS)
        if bad:
            raise ValueError(f"unknown fault kinds {sorted(bad)}")
        if self.kill_op is not None and (self.kill_op not in OPS or self.kill_when not in ("before", "after", "half")
                                         or self.kill_nth < 1):
            raise ValueError(f"bad kill: {self.kill_op!r} #{self.kill_nth} {self.kill_when!r}")
        if not (0 <= self.transient_rate <= 1 and 0 <= self.permanent_rate <= 1 and 0 <= self.after_share <= 1):
            raise ValueError("rates and after_share must be probabilities in [0, 1]")

    @property
    def active(self) -> bool:
        return bool(self.transient_rate or self.permanent_rate or self.permanent_paths or self.kill_op)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FaultSpec:
        text = text.strip()
        return cls(**json.loads(text)) if text else cls()

    def with_(self, **changes: Any) -> FaultSpec:
        return replace(self, **changes)


def make_error(kind: str, op: str, path: str) -> BaseException:
    """An exception shaped like the real one of fault `kind` (see the module docstring)."""
    where = f"injected {kind} fault in {op} {path}"
    if kind == "connection":
        return ConnectionResetError(errno.ECONNRESET, f"Connection reset by peer ({where})")
    if kind == "timeout":
        return TimeoutError(errno.ETIMEDOUT, f"Read timed out ({where})")
    if kind == "eio":
        return OSError(errno.EIO, f"Input/output error ({where})")
    if kind == "slowdown":
        err = OSError(errno.EBUSY, f"SlowDown: Please reduce your request rate. ({where})")
        err.__cause__ = _client_error("SlowDown", 503, "Please reduce your request rate.", op)
        return err
    if kind == "denied":
        err = PermissionError(errno.EACCES, f"Access Denied ({where})")
        err.__cause__ = _client_error("AccessDenied", 403, "Access Denied", op)
        return err
    if kind == "enospc":
        return OSError(errno.ENOSPC, f"No space left on device ({where})")
    raise ValueError(f"unknown fault kind {kind!r}")


def _client_error(code: str, status: int, message: str, op: str) -> BaseException | None:
    try:
        from botocore.exceptions import ClientError
    except ImportError:  # pragma: no cover - botocore comes with s3fs
        return None
    return ClientError({"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       op)


class FaultInjector:
    """Decides, per attempt, whether to fail it, and counts what it injected. Thread-safe."""

    def __init__(self, spec: FaultSpec):
        self.spec = spec
        self._lock = threading.Lock()
        seed = spec.seed if spec.seed is not None else random.randrange(1 << 30)
        self._rng = random.Random(seed * 1_000_003 + os.getpid())
        self._paths = re.compile(spec.paths) if spec.paths else None
        self._permanent = re.compile(spec.permanent_paths) if spec.permanent_paths else None
        self._kill_paths = re.compile(spec.kill_paths) if spec.kill_paths else None
        self._kill_seen = 0
        self._streak: dict[tuple[str, str], int] = {}
        self.counts: Counter[str] = Counter()  # "transient:<kind>", "permanent:<kind>", "after", "calls"

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        FaultInjector.__init__(self, state["spec"])

    @property
    def injected(self) -> int:
        return sum(n for k, n in self.counts.items() if k.startswith(("transient:", "permanent:")))

    def _decide(self, op: str, path: str, targets: list[str]) -> tuple[str, str] | None:
        """(kind, "before"|"after") for this attempt, or None. `targets`: the paths the regexes
        are matched against (every file of a bulk delete)."""
        s = self.spec
        with self._lock:
            self.counts["calls"] += 1
            if (self._permanent is not None and op in s.permanent_ops
                    and any(self._permanent.search(t) for t in targets)):
                return s.permanent_kinds[0] if s.permanent_kinds else "denied", "before"
            if op not in s.ops or (self._paths is not None and not any(self._paths.search(t) for t in targets)):
                return None
            r = self._rng.random()
            if s.permanent_rate and r < s.permanent_rate and s.permanent_kinds:
                return self._rng.choice(s.permanent_kinds), "before"
            key = (op, path)
            streak = self._streak.get(key, 0)
            if s.transient_rate and streak < s.max_consecutive and self._rng.random() < s.transient_rate \
                    and s.transient_kinds:
                self._streak[key] = streak + 1
                when = "after" if self._rng.random() < s.after_share else "before"
                return self._rng.choice(s.transient_kinds), when
            self._streak.pop(key, None)
            return None

    def _kill_now(self, op: str, targets: list[str]) -> bool:
        """Whether this operation is the one to die at (counted per process)."""
        s = self.spec
        if s.kill_op != op or (self._kill_paths is not None and not any(self._kill_paths.search(t) for t in targets)):
            return False
        with self._lock:
            self._kill_seen += 1
            if self._kill_seen != s.kill_nth:
                return False
        if s.kill_token is not None:
            try:
                os.close(os.open(s.kill_token, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return False  # another process died already
        return True

    def _die(self, op: str, path: str) -> None:
        self._log_line(f"kill\tsigkill\t{op}\t{self.spec.kill_when}\t{path}")
        sys.stderr.write(f"faults: SIGKILL of pid {os.getpid()} at {op} #{self.spec.kill_nth} "
                         f"({self.spec.kill_when}) {path}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def call(self, op: str, path: str, fn: Callable[..., Any], args: tuple) -> Any:
        targets = [str(p) for p, _ in args[0]] if op == "delete" and args and isinstance(args[0], list) else [path]
        if self.spec.kill_op is not None and self._kill_now(op, targets):
            when = self.spec.kill_when
            if when == "before":
                self._die(op, path)
            if when == "half" and op == "delete" and args and isinstance(args[0], list):
                fn(args[0][: max(1, len(args[0]) // 2)], *args[1:])
                self._die(op, path)
            fn(*args)
            self._die(op, path)
        decision = self._decide(op, path, targets)
        if decision is None:
            return fn(*args)
        kind, when = decision
        if when == "after":
            fn(*args)
        self._record(kind, op, path, when)
        raise make_error(kind, op, path)

    def _record(self, kind: str, op: str, path: str, when: str) -> None:
        family = "permanent" if kind in PERMANENT_KINDS else "transient"
        with self._lock:
            self.counts[f"{family}:{kind}"] += 1
            self.counts[f"op:{op}"] += 1
            if when == "after":
                self.counts["after"] += 1
        self._log_line(f"{family}\t{kind}\t{op}\t{when}\t{path}")

    def _log_line(self, line: str) -> None:
        if self.spec.log_dir:
            try:
                os.makedirs(self.spec.log_dir, exist_ok=True)
                with open(os.path.join(self.spec.log_dir, f"faults-{os.getpid()}.log"), "a") as f:
                    f.write(line + "\n")
            except OSError:
                pass

    def os_call(self, op: str, path: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """An operating-system call of a bulk local path (``os.open``/``os.stat`` relative to a
        directory): a fault is raised before it (the disk's answer); nothing is left open."""
        decision = self._decide(op, path, [path])
        if decision is None:
            return fn(*args, **kwargs)
        kind = decision[0]
        self._record(kind, op, path, "before")
        raise make_error(kind, op, path)


class FaultyStorage(Storage):
    """A Storage that injects the faults of `spec` into its own operations (and is picklable,
    so Spark executors that receive it inject them too)."""

    def __init__(self, root: str, options: dict[str, Any] | None = None, *, spec: FaultSpec | None = None):
        super().__init__(root, options)
        self.injector = FaultInjector(spec or FaultSpec())

    def __repr__(self) -> str:
        return f"FaultyStorage({self.root!r})"

    def _io(self, op: str, path: str, fn: Any, *args: Any) -> Any:
        return self.injector.call(op, path, fn, args)


# ---- process-wide injection --------------------------------------------------------------------
_ORIGINAL_IO = Storage._io


@dataclass
class _Source:
    """Where the process-wide injector comes from: a fixed spec, or a spec file re-read on change."""

    injector: FaultInjector | None = None
    path: str | None = None
    stamp: tuple[int, int, int] | None = field(default=None)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self) -> FaultInjector | None:
        if self.path is None:
            return self.injector
        try:
            st = os.stat(self.path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp != self.stamp:
            with self.lock:
                if stamp != self.stamp:
                    spec = None
                    if stamp is not None:
                        try:
                            with open(self.path) as f:
                                spec = FaultSpec.from_json(f.read())
                        except (OSError, ValueError, TypeError):
                            spec = None
                    self.injector = FaultInjector(spec) if spec is not None and spec.active else None
                    self.stamp = stamp
        return self.injector


_source: _Source | None = None


def _process_io(self: Storage, op: str, path: str, fn: Any, *args: Any) -> Any:
    src = _source
    inj = src.current() if src is not None else None
    if inj is None:
        return fn(*args)
    return inj.call(op, path, fn, args)


_REAL_OPEN, _REAL_STAT = os.open, os.stat


def _os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
    src = _source
    inj = src.current() if dir_fd is not None and src is not None else None
    if inj is None:
        return _REAL_OPEN(path, flags, mode, dir_fd=dir_fd)
    return int(inj.os_call("read", os.fsdecode(path), _REAL_OPEN, (path, flags, mode), {"dir_fd": dir_fd}))


def _os_stat(path: Any, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result:
    src = _source
    inj = src.current() if dir_fd is not None and src is not None else None
    if inj is None:
        return _REAL_STAT(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    return inj.os_call("info", os.fsdecode(path), _REAL_STAT, (path,),  # type: ignore[no-any-return]
                       {"dir_fd": dir_fd, "follow_symlinks": follow_symlinks})


def install(spec: FaultSpec | str) -> FaultInjector | None:
    """Inject faults into every Storage of this process, and into the operating-system calls of
    its bulk local paths: a spec, or the path of a spec file."""
    global _source
    if isinstance(spec, FaultSpec):
        _source = _Source(injector=FaultInjector(spec))
    else:
        _source = _Source(path=spec)
    Storage._io = _process_io  # type: ignore[method-assign]
    os.open = _os_open  # type: ignore[assignment]
    os.stat = _os_stat  # type: ignore[assignment]
    return _source.current()


def uninstall() -> None:
    global _source
    _source = None
    Storage._io = _ORIGINAL_IO  # type: ignore[method-assign]
    os.open = _REAL_OPEN
    os.stat = _REAL_STAT


def install_from_env() -> None:
    """Install from ``TLAKE_TEST_FAULTS`` (a JSON spec, or a spec file path)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return
    install(FaultSpec.from_json(value) if value.startswith("{") else value)


def current_injector() -> FaultInjector | None:
    return _source.current() if _source is not None else None


@contextmanager
def injected(spec: FaultSpec, *, children: bool = True) -> Iterator[FaultInjector]:
    """``with injected(spec) as inj:`` every Storage of this process injects faults, and (with
    `children`) so do the processes started meanwhile (``TLAKE_TEST_FAULTS`` holds the spec:
    each child counts and logs its own faults)."""
    previous = _source
    previous_env = os.environ.get(ENV)
    inj = install(spec)
    assert inj is not None
    if children:
        os.environ[ENV] = spec.to_json()
    try:
        yield inj
    finally:
        if children:
            if previous_env is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = previous_env
        if previous is None:
            uninstall()
        else:
            globals()["_source"] = previous


def write_spec_file(path: str, spec: FaultSpec | None) -> None:
    """Atomically replace the spec file that processes installed with `install(path)` watch
    (None: no faults)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(spec.to_json() if spec is not None else "")
    os.replace(tmp, path)


def count_logged(log_dir: str) -> Counter[str]:
    """Faults logged under `log_dir` by every process: counts by "<family>:<kind>", "op:<op>",
    "after" and "total"."""
    out: Counter[str] = Counter()
    if not os.path.isdir(log_dir):
        return out
    for name in os.listdir(log_dir):
        if not name.startswith("faults-"):
            continue
        with open(os.path.join(log_dir, name)) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 4:
                    continue
                family, kind, op, when = parts[:4]
                if family == "kill":
                    out["kills"] += 1
                    continue
                out[f"{family}:{kind}"] += 1
                out[f"op:{op}"] += 1
                out["total"] += 1
                if when == "after":
                    out["after"] += 1
    return out


@contextmanager
def in_spark_workers(spark: Any, spec: FaultSpec, folder: str) -> Iterator[str]:
    """``with in_spark_workers(spark, spec, folder) as log_dir:`` Spark's Python workers started
    meanwhile inject `spec` (kills included); this process does not. The spec file named by
    ``TLAKE_TEST_FAULTS`` in ``SparkContext.environment`` gives the workers a Python daemon of
    their own; it is emptied on the way out (no faults for any worker still alive)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "faults.json")
    log_dir = spec.log_dir or os.path.join(folder, "log")
    write_spec_file(path, spec.with_(log_dir=log_dir))
    env = spark.sparkContext.environment
    previous = env.get(ENV)
    env[ENV] = path
    try:
        yield log_dir
    finally:
        write_spec_file(path, None)
        if previous is None:
            env.pop(ENV, None)
        else:
            env[ENV] = previous


def kill_pids(log_dir: str) -> set[int]:
    """The processes that SIGKILLed themselves (a ``kill`` line in their fault log)."""
    out: set[int] = set()
    if not os.path.isdir(log_dir):
        return out
    for name in os.listdir(log_dir):
        if name.startswith("faults-") and name.endswith(".log"):
            with open(os.path.join(log_dir, name)) as f:
                if any(line.startswith("kill\t") for line in f):
                    out.add(int(name[len("faults-"):-len(".log")]))
    return out
