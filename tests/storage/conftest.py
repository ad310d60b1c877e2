"""Fixtures of the storage tests: one `Backend` per storage kind (local, memory://, S3 on moto).

The S3 server fixtures come from the `tests.s3server` plugin; the S3 backend asks for them
lazily, so ``-m "not s3"`` never starts the server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pytest

from trinitylake.storage import Storage

KINDS = ["local", "memory", pytest.param("s3", marks=pytest.mark.s3)]


def pytest_configure(config: pytest.Config) -> None:
    # tests/conftest.py loads the S3 plugin for the whole suite; this keeps `pytest tests/storage`
    # working without it (e.g. with -p no:... or a partial checkout). Never registered twice.
    if not config.pluginmanager.has_plugin("tests.s3server"):
        config.pluginmanager.import_plugin("tests.s3server")


@dataclass
class Backend:
    """Where a test's storage lives; `new()` gives an independent `Storage` on the same root."""

    kind: str
    root: str
    options: dict[str, Any] = field(default_factory=dict)

    def new(self, root: str | None = None, client: str | None = None) -> Storage:
        """A Storage on `root` (default: the backend's root).

        Storages with equal options share one filesystem per process; `client` names a separate
        S3 client (its own connections), like a writer in another process would have.
        """
        options = dict(self.options)
        if client is not None and self.kind == "s3":
            options["config_kwargs"] = {"user_agent_extra": f"tl-test-{client}"}
        return Storage(root or self.root, options)


def _make_backend(request: pytest.FixtureRequest, kind: str, tmp_path: Any) -> Iterator[Backend]:
    if kind == "local":
        yield Backend("local", str(tmp_path / "lake"))
    elif kind == "memory":
        name = f"tl-{uuid.uuid4().hex}"
        try:
            yield Backend("memory", f"memory://{name}/lake")
        finally:
            fs = fsspec.filesystem("memory")
            try:
                fs.rm(f"/{name}", recursive=True)
            except FileNotFoundError:
                pass
    elif kind == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        options = request.getfixturevalue("s3_storage_options")
        yield Backend("s3", f"{bucket}/lake", options)
    else:  # pragma: no cover - parametrization error
        raise ValueError(kind)


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    yield from _make_backend(request, request.param, tmp_path)


@pytest.fixture
def storage(backend: Backend) -> Storage:
    return backend.new()
