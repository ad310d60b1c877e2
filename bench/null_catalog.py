"""A null Iceberg REST catalog: the client's ceiling on this machine.

It answers every request of a writer (config, load-table, commit-table) at once with one
canned table, checks nothing and keeps nothing. PyIceberg writers committing against it do
all of their own work (build the request, send it, parse the metadata answered) and none of a
catalog's, on the same uvicorn HTTP stack as ``tlake catalog serve``: their rate is what the
clients and the machine allow any catalog served over HTTP here (bench/bench_catalog_commits.py).

Run: ``python -m bench.null_catalog PORT BODY_FILE``, the file a LoadTableResult as JSON (the
commit answer is its ``metadata-location`` and ``metadata``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CONFIG = b'{"defaults": {}, "overrides": {}}'
JSON = [(b"content-type", b"application/json")]


def make_app(load_body: bytes) -> Callable[..., Any]:
    """The ASGI app answering with `load_body` (a LoadTableResult)."""
    loaded = json.loads(load_body)
    commit_body = json.dumps({"metadata-location": loaded["metadata-location"], "metadata": loaded["metadata"]}).encode()

    async def app(scope: dict, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:  # the request's body, read and dropped
            more = (await receive()).get("more_body", False)
        path, method = scope["path"], scope["method"]
        body = CONFIG if path.endswith("/config") else load_body if method == "GET" else commit_body
        await send({"type": "http.response.start", "status": 200, "headers": JSON})
        await send({"type": "http.response.body", "body": body})

    return app


@contextmanager
def null_catalog(d: Path, load_body: bytes) -> Iterator[Callable[[], Any]]:
    """The null catalog in a process of its own on a free port, answering with `load_body`;
    yields what makes a PyIceberg client of it."""
    from pyiceberg.catalog.rest import RestCatalog

    from bench.objstore import free_port, wait_listening

    d.mkdir(parents=True, exist_ok=True)
    body = d / "load_table.json"
    body.write_bytes(load_body)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.null_catalog", str(port), str(body)])
    try:
        if not wait_listening(port, proc, timeout=60):
            raise RuntimeError(f"the null catalog did not start (exit code {proc.poll()})")
        yield lambda: RestCatalog("null", uri=f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(30)


def main(argv: list[str]) -> int:
    import uvicorn

    port, body = int(argv[0]), Path(argv[1]).read_bytes()
    uvicorn.run(make_app(body), host="127.0.0.1", port=port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
