"""A recording HTTP proxy for request-level tests: every request a client sends through it is
logged as ``METHOD target`` before it is forwarded, whatever client sent it (botocore, s3fs,
obstore, delta-rs: they all speak HTTP/1.1 to the endpoint they are given).

Standard library only, threads: a listening thread accepts, and each connection gets two
threads, one copying the server's bytes back unchanged, one reading the client's stream
request by request (the request line and headers, then exactly the body that
``Content-Length`` or ``Transfer-Encoding: chunked`` announces) and forwarding it. Keep-alive
connections carry many requests; each is recorded when its head arrives.

    with RecordingProxy(upstream_port) as proxy:
        opts = {**storage_options, "endpoint_url": proxy.endpoint_url}
        ...  # run the code under test with `opts`
        assert not proxy.touching("bucket", "exports/full/")

Only path-style S3 addressing is understood by the helpers (`S3Request.bucket`, ``key``,
``prefix``): what clients use for an IP endpoint such as the test server's.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import parse_qs, unquote, urlsplit

_HEAD_LIMIT = 1 << 20


@dataclass(frozen=True)
class S3Request:
    """One recorded request: its method and request target (path and query, as sent)."""

    method: str
    target: str

    @property
    def path(self) -> str:
        return unquote(urlsplit(self.target).path)

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query, keep_blank_values=True)

    @property
    def bucket(self) -> str:
        return self.path.lstrip("/").partition("/")[0]

    @property
    def key(self) -> str:
        """The object key ("" for a request on the bucket itself: a listing, a bulk delete)."""
        return self.path.lstrip("/").partition("/")[2]

    @property
    def is_list(self) -> bool:
        return self.method == "GET" and not self.key and ("list-type" in self.query or "prefix" in self.query
                                                          or "delimiter" in self.query)

    @property
    def prefix(self) -> str | None:
        """The prefix a listing asks for (None for any other request)."""
        if not self.is_list:
            return None
        return self.query.get("prefix", [""])[0]

    def names(self) -> list[str]:
        """The keys or key prefixes this request names: its object key, or what a listing
        asks for (its prefix, and where it starts: ``start-after``, ``marker``)."""
        out = [self.key] if self.key else []
        if self.is_list:
            q = self.query
            out += [q.get("prefix", [""])[0]] + q.get("start-after", []) + q.get("marker", [])
        return out

    def touches(self, bucket: str, prefix: str) -> bool:
        """Whether this request names anything under `prefix` in `bucket`, or lists a prefix
        that contains it (a listing of a parent folder would show its files)."""
        if self.bucket != bucket:
            return False
        for name in self.names():
            if name.startswith(prefix):
                return True
        p = self.prefix
        return p is not None and prefix.startswith(p) and self.query.get("delimiter", [""])[0] == ""

    def __str__(self) -> str:
        return f"{self.method} {self.target}"


class RecordingProxy:
    """A TCP proxy on 127.0.0.1 in front of an HTTP server, recording every request."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1", host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.host = host
        self.port = 0
        self._requests: list[S3Request] = []
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._closing = False

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- what was sent
    @property
    def requests(self) -> list[S3Request]:
        with self._lock:
            return list(self._requests)

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    def count(self, method: str) -> int:
        return sum(r.method == method for r in self.requests)

    def touching(self, bucket: str, prefix: str) -> list[S3Request]:
        """Every request that names something under `prefix` of `bucket` (see `S3Request.touches`)."""
        return [r for r in self.requests if r.touches(bucket, prefix)]

    # -- life cycle
    def start(self) -> RecordingProxy:
        sock = socket.create_server((self.host, 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        t = threading.Thread(target=self._accept, name="recording-proxy", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._closing = True
        if self._sock is not None:
            self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            _close(c)
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._closing:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                _close(client)
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns += [client, server]
            for t in (threading.Thread(target=self._requests_of, args=(client, server), daemon=True),
                      threading.Thread(target=_copy, args=(server, client), daemon=True)):
                t.start()
                self._threads.append(t)

    # -- the client's stream, request by request
    def _requests_of(self, client: socket.socket, server: socket.socket) -> None:
        stream = _Stream(client)
        try:
            while True:
                head = stream.read_until(b"\r\n\r\n")
                if head is None:
                    return
                line, _, rest = head.partition(b"\r\n")
                method, target, _version = line.decode("latin-1").split(" ", 2)
                headers = {}
                for h in rest.split(b"\r\n"):
                    name, sep, value = h.partition(b":")
                    if sep:
                        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
                with self._lock:
                    self._requests.append(S3Request(method, target))
                server.sendall(head)
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    self._chunked(stream, server)
                else:
                    stream.forward(int(headers.get("content-length", "0") or 0), server)
        except (OSError, ValueError):
            return
        finally:
            _close(client)
            _close(server)

    @staticmethod
    def _chunked(stream: _Stream, server: socket.socket) -> None:
        while True:
            size_line = stream.read_until(b"\r\n")
            if size_line is None:
                raise OSError("connection closed inside a chunked body")
            server.sendall(size_line)
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:  # trailers, up to an empty line
                while True:
                    trailer = stream.read_until(b"\r\n")
                    if trailer is None:
                        raise OSError("connection closed inside a chunked body's trailers")
                    server.sendall(trailer)
                    if trailer == b"\r\n":
                        return
            stream.forward(size + 2, server)  # the chunk and its CRLF


class _Stream:
    """Buffered reads of one socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def read_until(self, sep: bytes) -> bytes | None:
        """Bytes up to and including `sep`; None at a clean end of the stream."""
        while sep not in self.buf:
            if len(self.buf) > _HEAD_LIMIT:
                raise ValueError("request head too long")
            data = self.sock.recv(65536)
            if not data:
                if self.buf:
                    raise OSError("connection closed inside a request head")
                return None
            self.buf += data
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def forward(self, n: int, to: socket.socket) -> None:
        """Send the next `n` bytes to `to`."""
        while n > 0:
            if not self.buf:
                self.buf = self.sock.recv(min(n, 1 << 20))
                if not self.buf:
                    raise OSError("connection closed inside a request body")
            part, self.buf = self.buf[:n], self.buf[n:]
            to.sendall(part)
            n -= len(part)


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
