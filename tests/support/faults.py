"""Storage fault injection, for the reliability tests and benchmarks only.

Faults are injected at `Storage._io`, the single seam through which every attempt of every
storage operation goes (``read``, ``exists``, ``info``, ``write``, ``create_exclusive``,
``delete``, ``list``, ``list_dirs``), *below* the storage's own retries. So a transient fault
exercises the retry policy exactly as a real one would, and a permanent fault reaches the
caller as the typed error it would get in production.

Three ways to use it:

* ``FaultyStorage(root, options, spec=FaultSpec(...))``: one storage that injects faults
  (``Lakehouse(FaultyStorage(...))`` for commits);
* ``with injected(FaultSpec(...)) as inj:``: every Storage of this process;
* ``TLAKE_TEST_FAULTS`` with `install_from_env`, for other processes (CLI runs, Spark's Python
  workers, which inherit the variable through ``SparkContext.environment``): the tests' start-up
  hook ``tests/support/faultsite/sitecustomize.py`` calls it; the library never does. Its
  value is a JSON spec, or the path of a JSON spec file that is re-read whenever it changes
  (a test switches faults on and off for long-lived Python workers by rewriting the file; a
  missing or empty file means no faults).

Fault kinds, shaped like the real errors of each layer:

* transient: ``connection`` (ConnectionResetError), ``timeout`` (TimeoutError), ``eio``
  (OSError EIO), ``slowdown`` (what s3fs raises for an S3 503 SlowDown: OSError EBUSY caused
  by a botocore ClientError with code SlowDown and status 503). A share of them
  (``after_share``) is raised *after* the operation took effect: the ambiguous failure of a
  write or exclusive create whose answer was lost. At most ``max_consecutive`` transient
  faults hit one (operation, path) in a row, like a real blip.
* permanent: ``denied`` (PermissionError EACCES, an S3 403 AccessDenied), ``enospc``
  (OSError ENOSPC); always raised before the operation takes effect.

Every injected fault is counted (``FaultInjector.counts``) and, with ``log_dir``, appended as
one line to ``<log_dir>/faults-<pid>.log`` so that faults injected in other processes can be
counted too (`count_logged`).
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
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

    def __post_init__(self) -> None:
        for name in ("ops", "transient_kinds", "permanent_kinds", "permanent_ops"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        unknown = (set(self.ops) | set(self.permanent_ops)) - set(OPS)
        if unknown:
            raise ValueError(f"unknown storage operations {sorted(unknown)}; expected some of {OPS}")
        bad = set(self.transient_kinds) - set(TRANSIENT_KINDS) | set(self.permanent_kinds) - set(PERMANENT_KINDS)
        if bad:
            raise ValueError(f"unknown fault kinds {sorted(bad)}")
        if not (0 <= self.transient_rate <= 1 and 0 <= self.permanent_rate <= 1 and 0 <= self.after_share <= 1):
            raise ValueError("rates and after_share must be probabilities in [0, 1]")

    @property
    def active(self) -> bool:
        return bool(self.transient_rate or self.permanent_rate or self.permanent_paths)

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

    def call(self, op: str, path: str, fn: Callable[..., Any], args: tuple) -> Any:
        targets = [str(p) for p, _ in args[0]] if op == "delete" and args and isinstance(args[0], list) else [path]
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
        if self.spec.log_dir:
            try:
                os.makedirs(self.spec.log_dir, exist_ok=True)
                with open(os.path.join(self.spec.log_dir, f"faults-{os.getpid()}.log"), "a") as f:
                    f.write(f"{family}\t{kind}\t{op}\t{when}\t{path}\n")
            except OSError:
                pass


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


def install(spec: FaultSpec | str) -> FaultInjector | None:
    """Inject faults into every Storage of this process: a spec, or the path of a spec file."""
    global _source
    if isinstance(spec, FaultSpec):
        _source = _Source(injector=FaultInjector(spec))
    else:
        _source = _Source(path=spec)
    Storage._io = _process_io  # type: ignore[method-assign]
    return _source.current()


def uninstall() -> None:
    global _source
    _source = None
    Storage._io = _ORIGINAL_IO  # type: ignore[method-assign]


def install_from_env() -> None:
    """Install from ``TLAKE_TEST_FAULTS`` (a JSON spec, or a spec file path)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return
    install(FaultSpec.from_json(value) if value.startswith("{") else value)


def current_injector() -> FaultInjector | None:
    return _source.current() if _source is not None else None


@contextmanager
def injected(spec: FaultSpec) -> Iterator[FaultInjector]:
    """``with injected(spec) as inj:`` every Storage of this process injects faults."""
    previous = _source
    inj = install(spec)
    assert inj is not None
    try:
        yield inj
    finally:
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
                out[f"{family}:{kind}"] += 1
                out[f"op:{op}"] += 1
                out["total"] += 1
                if when == "after":
                    out["after"] += 1
    return out
