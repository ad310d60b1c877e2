"""Worker processes for a driver-local export copy of local files (no Spark).

Copying small files is per-file Python plus system calls: one process is bound by its
interpreter (threads only add GIL contention), so a big local-to-local copy runs its plan parts
in one worker process per core. Each worker is ``python -m trinitylake.jobs.export.copy_workers``,
started by `CopyWorkers`, fed one plan part name at a time over its stdin and answering with
that part's stats over its stdout (pickle frames on our own pipes).

Plain child processes rather than `multiprocessing`: its spawn and forkserver methods re-import
the caller's ``__main__`` in every worker, which re-runs any user script that calls us without a
``if __name__ == "__main__"`` guard; forking the driver itself could copy a lock held by one of
pyarrow's threads. A worker gets the driver's ``sys.path`` (``--py-files`` and notebooks add to it
at run time) and nothing else of its state.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any

from trinitylake.errors import StorageError
from trinitylake.storage import Storage

if TYPE_CHECKING:
    from trinitylake.jobs.export.rules import ExportSpec

_OK, _FAILED = "ok", "failed"


class CopyWorkers:
    """`n` worker processes (started at once: their imports overlap the driver's planning) that
    copy plan parts given to `map`."""

    def __init__(self, n: int):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._procs: list[subprocess.Popen] = []
        if not sys.executable:
            raise StorageError("cannot start export copy workers: this interpreter has no sys.executable")
        try:
            for _ in range(n):
                self._procs.append(subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                                    stdout=subprocess.PIPE, env=env))
        except OSError as e:
            self.close()
            raise StorageError(f"cannot start export copy workers ({sys.executable}): {e}") from e

    @property
    def size(self) -> int:
        return len(self._procs)

    def map(self, names: Iterable[str], setup: tuple[Any, ...]) -> list[dict[str, Any]]:
        """Each part's stats (dicts) from ``copy_part_in_worker(name, *setup)``, in completion
        order; the first failure raises a typed error after every worker stopped taking parts.
        Call once per pool."""
        todo = iter(names)
        setup_bytes = pickle.dumps(setup)
        lock = threading.Lock()
        results: list[dict[str, Any]] = []
        failures: list[str] = []

        def next_name() -> str | None:
            with lock:
                return None if failures else next(todo, None)

        def drive(proc: subprocess.Popen) -> None:
            assert proc.stdin is not None and proc.stdout is not None
            name = None
            try:
                _send(proc.stdin, setup_bytes, raw=True)
                while (name := next_name()) is not None:
                    _send(proc.stdin, name)
                    status, payload = pickle.load(proc.stdout)
                    if status != _OK:
                        raise StorageError(f"plan part {name}: {payload}")
                    with lock:
                        results.append(payload)
            except EOFError:
                with lock:
                    failures.append(f"the copy worker (pid {proc.pid}) died while copying plan part {name}")
            except Exception as e:  # noqa: BLE001 - collected, raised once below
                with lock:
                    failures.append(f"{e}")

        threads = [threading.Thread(target=drive, args=(p,), daemon=True) for p in self._procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failures:
            raise StorageError(f"export copy failed: {failures[0]}"
                               + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""))
        return results

    def close(self) -> None:
        """End every worker (EOF on its stdin), killing any that does not exit."""
        for p in self._procs:
            try:
                if p.stdin is not None:
                    p.stdin.close()
            except OSError:
                pass
        # Blocking waits in a helper thread: Popen.wait(timeout) polls with sleeps of up to
        # 50 ms, which cost an export ~0.1 s per worker at its end.
        waiter = threading.Thread(target=lambda: [p.wait() for p in self._procs], daemon=True)
        waiter.start()
        waiter.join(timeout=30)
        for p in self._procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()

    def __enter__(self) -> CopyWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Per worker process: the lean views of the two storages (their directory caches persist across
# the parts this process copies).
_VIEWS: dict[tuple[str, str], tuple[Storage, Storage]] = {}


def copy_part_in_worker(name: str, source: Storage, target: Storage, spec: ExportSpec, export_dir: str, checksum: bool,
                        resumed: bool) -> dict[str, Any]:
    """Body of a copy worker process: one plan part, its stats as a dict."""
    # In the worker, after `main` redirected stdout (what an import prints must not reach the pipe).
    from trinitylake.jobs.export.copying import copy_part
    from trinitylake.storage.local_files import LocalFiles

    views = _VIEWS.get((source.root, target.root))
    if views is None:
        views = _VIEWS[(source.root, target.root)] = (LocalFiles.of(source), LocalFiles.of(target))
    return copy_part(name, views[0], views[1], spec, export_dir, checksum, resumed).to_dict()


def _send(stream: IO[bytes], obj: Any, raw: bool = False) -> None:
    stream.write(obj if raw else pickle.dumps(obj))
    stream.flush()


def main() -> None:
    """Worker loop: the setup, then part names until EOF; one (status, stats|error) per part."""
    # Our answers go to the pipe the driver reads; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    import trinitylake.jobs.export.copying  # noqa: F401 - imported now, after the redirection (imports may print)

    setup = pickle.load(inp)
    while True:
        try:
            name = pickle.load(inp)
        except EOFError:
            return
        answer: tuple[str, Any]
        try:
            answer = (_OK, copy_part_in_worker(name, *setup))
        except Exception as e:  # noqa: BLE001 - reported to the driver, which raises a typed error
            answer = (_FAILED, f"{type(e).__name__}: {e}")
        out.write(pickle.dumps(answer))
        out.flush()


if __name__ == "__main__":
    main()
