"""Run a maintenance job in this process and SIGKILL it at a chosen storage operation.

    python -m tests.support.killer --op delete --nth 2 --when half -- orphans --lakehouse URI ...
    python -m tests.support.killer --op create_exclusive --nth 3 --when after --root TARGET -- export ...

A kill at the storage boundary: the test wraps the call every storage operation goes through
(``Storage._io``) from outside the library, which runs its production paths unchanged, for the
jobs whose code has no named crash point at that place. The process dies like a lost driver (no
cleanup, no ``finally``), at the `nth` operation `op` of this process on a storage whose root
starts with `root` (worker processes it starts are not counted; `tests.support.faults` kills
those: ``FaultSpec(kill_op=...)``):

* ``before``: before the operation runs (e.g. between a job's plan and its first delete);
* ``half``: a bulk delete deletes the first half of its batch, then the process dies;
* ``after``: after the operation took effect (e.g. a copied file exists, the next does not).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", required=True)
    ap.add_argument("--nth", type=int, required=True)
    ap.add_argument("--when", choices=("before", "half", "after"), default="after")
    ap.add_argument("--root", default="")
    ap.add_argument("job")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)

    from trinitylake.jobs.runner import main as run_main
    from trinitylake.storage.storage import Storage

    original = Storage._io
    seen = [0]

    def die() -> None:
        sys.stderr.write(f"killer: SIGKILL at {a.op} #{a.nth} ({a.when})\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def io(self, op, path, fn, *args):
        if op != a.op or not self.root.startswith(a.root):
            return original(self, op, path, fn, *args)
        seen[0] += 1
        if seen[0] != a.nth:
            return original(self, op, path, fn, *args)
        if a.when == "before":
            die()
        if a.when == "half" and op == "delete":
            resolved = args[0]
            original(self, op, path, fn, resolved[: max(1, len(resolved) // 2)])
            die()
        out = original(self, op, path, fn, *args)
        die()
        return out

    Storage._io = io
    return run_main(a.job, a.args)


if __name__ == "__main__":
    sys.exit(main())
