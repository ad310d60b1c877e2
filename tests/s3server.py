"""Pytest plugin: a local S3 (moto) server for the tests that need S3.

Loaded from ``tests/conftest.py`` with ``pytest_plugins = ["tests.s3server"]`` (or on the command
line with ``-p tests.s3server``). Fixtures:

- ``s3_server`` (session): a real HTTP moto server on 127.0.0.1 and a free port. It enforces
  ``If-None-Match: *`` and ``If-Match`` like AWS S3. For the whole session the environment holds
  fake credentials (``testing``/``testing``) and ``AWS_DEFAULT_REGION=us-east-1``, and no AWS
  profile, session token or config file of the machine can leak in.
- ``s3_bucket`` (function): a fresh, uniquely named bucket; returns ``"s3://<bucket>"``.
- ``s3_storage_options`` (function): ``{"endpoint_url", "key", "secret"}`` for
  ``Storage(uri, options)``.
- ``slow_s3`` (function): the same server behind a proxy that delays every request by 20 ms
  (`bench.objstore.DelayProxy`, standard library only), and a fresh bucket: an object store
  with latency. Another delay: ``@pytest.mark.parametrize("slow_s3", [100], indirect=True)``.

``make_s3_storage(root_uri, endpoint_url)`` builds such a Storage directly. Mark the tests that
use these fixtures with ``@pytest.mark.s3`` so that ``-m "not s3"`` skips the server entirely.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"

# Variables that would point boto at real credentials or another endpoint during the session.
_SCRUBBED_ENV = (
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@dataclass
class S3Server:
    """A running moto server: where it listens and how to log in."""

    endpoint_url: str
    key: str = ACCESS_KEY
    secret: str = SECRET_KEY
    region: str = REGION
    _client: Any = field(default=None, repr=False)

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint_url, "key": self.key, "secret": self.secret}

    @property
    def client(self) -> Any:
        """A boto3 S3 client on this server (built once)."""
        if self._client is None:
            import boto3

            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint_url,
                aws_access_key_id=self.key,
                aws_secret_access_key=self.secret,
                region_name=self.region,
            )
        return self._client

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a unique name unless given) and return its name."""
        name = name or f"tl-{uuid.uuid4().hex[:16]}"
        # No LocationConstraint: us-east-1 takes none, and s3fs trips over one on moto.
        self.client.create_bucket(Bucket=name)
        return name


def make_s3_storage(root_uri: str, endpoint_url: str) -> Any:
    """A `trinitylake.storage.Storage` on the moto server at `endpoint_url`."""
    from trinitylake.storage import Storage

    return Storage(root_uri, {"endpoint_url": endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY})


def _atomic_conditional_puts(mp: pytest.MonkeyPatch) -> None:
    """Make moto's PutObject check-then-write atomic, as S3's conditional writes are, and its
    CopyObject honour ``If-None-Match: *`` as S3 does.

    moto checks ``If-None-Match: *`` / ``If-Match`` and then stores the object, and its threaded
    server runs requests concurrently: two processes racing for the same key could both succeed
    (test_seq's concurrent S3 allocation saw a duplicate txn_seq about one run in three). AWS S3
    decides a conditional write atomically; one lock around moto's PutObject does the same here
    (unconditional PUTs go through it too: the test server needs no throughput)."""
    import threading

    from moto.s3.exceptions import PreconditionFailed
    from moto.s3.responses import S3Response

    lock = threading.Lock()
    put = S3Response.put_object
    copy = S3Response.copy_object

    def put_object(self: Any) -> Any:
        with lock:
            return put(self)

    def copy_object(self: Any) -> Any:
        # moto 5.2.5 ignores If-None-Match on CopyObject and overwrites; S3 refuses an
        # existing key with 412, as for a PUT (AWS's conditional writes). Patched here, in the
        # test server's own process, so an exclusive server-side copy is tested as S3 runs it.
        with lock:
            if (self.headers.get("If-None-Match") == "*"
                    and self.backend.get_object(self.bucket_name, self.parse_key_name()) is not None):
                raise PreconditionFailed("If-None-Match")
            return copy(self)

    mp.setattr(S3Response, "put_object", put_object)
    mp.setattr(S3Response, "copy_object", copy_object)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """Start moto's threaded server once per session and point the AWS environment at fakes."""
    from moto.server import ThreadedMotoServer

    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    mp.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    mp.setenv("AWS_DEFAULT_REGION", REGION)
    for name in _SCRUBBED_ENV:
        mp.delenv(name, raising=False)
    # No ~/.aws files of the machine, and never a proxy for the local server.
    mp.setenv("AWS_CONFIG_FILE", os.devnull)
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    no_proxy = ",".join(x for x in (os.environ.get("NO_PROXY", ""), "127.0.0.1,localhost") if x)
    mp.setenv("NO_PROXY", no_proxy)
    mp.setenv("no_proxy", no_proxy)
    # werkzeug logs every request to stderr; keep only its errors.
    werkzeug_log = logging.getLogger("werkzeug")
    old_level = werkzeug_log.level
    werkzeug_log.setLevel(logging.ERROR)

    _atomic_conditional_puts(mp)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield S3Server(endpoint_url=f"http://{host}:{port}")
    finally:
        server.stop()
        werkzeug_log.setLevel(old_level)
        mp.undo()


SLOW_S3_DELAY_MS = 20.0


@dataclass
class SlowS3:
    """The moto server behind a delaying proxy (see the ``slow_s3`` fixture)."""

    endpoint_url: str  # through the proxy
    bucket: str  # "s3://<bucket>", created for the test
    delay_ms: float
    proxy: Any  # bench.objstore.DelayProxy: stats(), reset_stats(), delay_ms
    server: S3Server  # the moto server itself (no delay)

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint_url, "key": self.server.key, "secret": self.server.secret}


@pytest.fixture
def slow_s3(s3_server: S3Server, request: pytest.FixtureRequest) -> Iterator[SlowS3]:
    """The moto server behind a proxy adding `request.param` ms (default 20) to each request:
    every chunk a client sends is forwarded that much later (a request pays it once)."""
    from bench.objstore import DelayProxy

    delay = float(getattr(request, "param", SLOW_S3_DELAY_MS))
    port = int(s3_server.endpoint_url.rsplit(":", 1)[1])
    with DelayProxy(port, delay) as proxy:
        yield SlowS3(proxy.endpoint_url, f"s3://{s3_server.create_bucket()}", delay, proxy, s3_server)


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A new empty bucket for this test, as ``s3://<bucket>``."""
    return f"s3://{s3_server.create_bucket()}"


@pytest.fixture
def s3_storage_options(s3_server: S3Server) -> dict[str, Any]:
    """Storage options for the moto server (a fresh dict: tests may change it)."""
    return s3_server.storage_options
