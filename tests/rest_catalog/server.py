"""The catalog server as the tests run it: the real `tlake catalog serve` in a subprocess on a
free port of 127.0.0.1, its output kept in a file the tests read (tokens must never be in it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from trinitylake.lakehouse import Lakehouse

TLAKE = str(Path(sys.executable).with_name("tlake"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    token: str
    lakehouse: str
    log: Path
    proc: subprocess.Popen

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start(lakehouse: str, workdir: Path, *args: str, token: str | None = None, env: dict[str, str] | None = None,
          audit: bool = True) -> Server:
    """`tlake --lakehouse LH catalog serve --port P ARGS` with TLAKE_CATALOG_TOKEN=token; returns
    once the port answers (fails with the server's output if it exits first)."""
    token = token if token is not None else f"tok-{uuid.uuid4().hex}"
    port = free_port()
    log = workdir / f"server-{port}.log"
    full_env = {**os.environ, **(env or {})}
    if token:
        full_env["TLAKE_CATALOG_TOKEN"] = token
    cmd = [TLAKE, "--lakehouse", lakehouse, *([] if audit else ["--no-audit"]), "catalog", "serve",
           "--port", str(port), *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise AssertionError(f"the server did not listen within 60 s: {log.read_text()[-2000:]}")
    return Server(f"http://127.0.0.1:{port}", token, lakehouse, log, proc)


def new_lakehouse(path: Path, audit: bool = True) -> str:
    return Lakehouse.create(str(path), audit=audit).uri
