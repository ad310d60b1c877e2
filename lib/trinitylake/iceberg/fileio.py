"""`TrinityLakeFileIO`: PyIceberg's FileIO on the project's own storage and I/O engine.

The Iceberg tables' files (metadata JSON, manifest lists, manifests, data and delete files) go
through the same `trinitylake.storage.Storage` as the lakehouse's own files: one storage per
store (bucket, or the local filesystem), its retries, typed errors and attempt seam, and on S3
the asynchronous engine (`trinitylake.storage.object_io`). `TrinityLakeCatalog` uses it unless
its properties name another ``py-io-impl``; the REST server's catalog and the tables'
maintenance with it.

Besides PyIceberg's three methods (`new_input`, `new_output`, `delete`) it has batches, each
file's result or error, their requests in flight together on S3: `read_many`, `create_many`
(each file only if absent), `delete_many`.

Options, from the catalog's properties:

* ``lakehouse.storage.<key>``: the lakehouse's storage options (`check_storage_options`), for
  the stores of the lakehouse's scheme (``lakehouse``: its URI; S3 when not given);
* PyIceberg's S3 properties, for ``s3://`` stores, winning over the former: ``s3.endpoint``,
  ``s3.access-key-id``, ``s3.secret-access-key``, ``s3.session-token``, ``s3.region``,
  ``s3.profile-name``, ``s3.anonymous`` (and their ``client.*`` forms). The timeouts and
  ``s3.resolve-region`` are the engine's own business; a property this engine cannot honour
  (a signer, a proxy, a role to assume, server-side encryption) is a `ConfigError` naming it
  (``py-io-impl=pyiceberg.io.pyarrow.PyArrowFileIO`` serves those).

Credentials are never shown: neither `repr` nor an error message names a property's value.

Differences from PyIceberg's FileIOs, by design: ``create(overwrite=False)`` is one atomic
create-if-absent (``If-None-Match: *`` on S3, a hard link locally), its FileExistsError raised
when the stream is closed; `delete` of a missing file succeeds (a re-run's delete is
idempotent); `InputFile.open` reads the whole file once and serves it from memory.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import pyarrow as pa
from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream
from pyiceberg.typedef import EMPTY_DICT, Properties

from trinitylake.errors import StorageError
from trinitylake.storage import Storage, parse_uri
from trinitylake.storage.iceberg_properties import storage_options_of
from trinitylake.storage.options import StorageOptions

#: The property naming this class (PyIceberg's ``py-io-impl``), `TrinityLakeCatalog`'s default.
FILE_IO_IMPL = "trinitylake.iceberg.fileio.TrinityLakeFileIO"

class TrinityLakeFileIO(FileIO):
    """PyIceberg's FileIO through `Storage` (see the module doc). Thread-safe and picklable."""

    def __init__(self, properties: Properties = EMPTY_DICT):
        super().__init__(properties)
        self._lock = threading.Lock()
        self._stores: dict[str, Storage] = {}  # store root with its trailing slash -> storage
        self._options: dict[str, StorageOptions] = {}  # scheme -> options
        self._base: Storage | None = None  # `on`: the storage whose store cache serves its scheme

    @classmethod
    def on(cls, storage: Storage) -> TrinityLakeFileIO:
        """A FileIO reaching the stores of `storage`'s scheme with its options (and its own
        store through `storage` itself)."""
        fio = cls({"lakehouse": storage.root})
        fio._options[storage.scheme] = dict(storage.options)
        fio._base = storage
        return fio

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self._stores)} stores)"  # never the properties: credentials

    def __getstate__(self) -> dict[str, Any]:
        return {"properties": dict(self.properties), "_options": dict(self._options), "_base": self._base}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["properties"])  # type: ignore[misc]
        self._options.update(state["_options"])
        self._base = state["_base"]

    # ---- where a location lies ---------------------------------------------------------------
    def store(self, location: str) -> tuple[Storage, str]:
        """The storage of `location`'s store (bucket; the local filesystem) and its path there.

        Raises:
            InvalidURIError: `location` is not a valid location.
        """
        for prefix, st in self._stores.items():  # a handful of stores: a prefix test beats a parse
            if location.startswith(prefix):
                return st, location[len(prefix):]
        p = parse_uri(location)
        for prefix, st in self._stores.items():
            if p.uri.startswith(prefix):
                return st, p.uri[len(prefix):]
        if self._base is not None and self._base.reaches(p):
            st = self._base.for_store_of(p)  # the storage's own cache: one storage per store
        else:
            options = self._options.get(p.scheme)
            if options is None:
                options = self._options[p.scheme] = storage_options_of(self.properties, p.scheme)
            st = Storage(p.store_uri, options or None)
        prefix = st.root if st.root.endswith("/") else st.root + "/"
        with self._lock:
            st = self._stores.setdefault(prefix, st)
        if not p.uri.startswith(prefix):
            raise StorageError(f"{p.uri} is not under its store {st.root}")
        return st, p.uri[len(prefix):]

    # ---- PyIceberg's FileIO ------------------------------------------------------------------
    def new_input(self, location: str) -> StorageInputFile:
        return StorageInputFile(location, self)

    def new_output(self, location: str) -> StorageOutputFile:
        return StorageOutputFile(location, self)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        """Delete the file at `location`; a missing file counts as deleted.

        Raises:
            StorageError: the store refused or kept failing (naming the location).
        """
        loc = location if isinstance(location, str) else location.location
        failed = self.delete_many([loc])
        if failed:
            raise StorageError(f"could not delete {failed[0][0]}: {failed[0][1]}")

    # ---- batches: many files a call, their requests in flight together on S3 ------------------
    def _by_store(self, locations: Iterable[str]) -> dict[str, tuple[Storage, list[tuple[int, str]]]]:
        out: dict[str, tuple[Storage, list[tuple[int, str]]]] = {}
        for i, loc in enumerate(locations):
            st, rel = self.store(loc)
            out.setdefault(st.root, (st, []))[1].append((i, rel))
        return out

    def read_many(self, locations: Sequence[str]) -> list[bytes | BaseException]:
        """The bytes of each location, or its error (FileNotFoundError naming a missing one)."""
        out: list[bytes | BaseException] = [b""] * len(locations)
        for st, items in self._by_store(locations).values():
            for (i, _), got in zip(items, st.read_many([r for _, r in items]), strict=True):
                out[i] = got
        return out

    def create_many(self, items: Sequence[tuple[str, bytes]]) -> list[BaseException | None]:
        """Create each ``(location, bytes)`` only if absent (never overwriting): per file None, or
        its error (FileExistsError: a file is there already)."""
        out: list[BaseException | None] = [None] * len(items)
        for st, where in self._by_store(loc for loc, _ in items).values():
            got = st.create_exclusive_many([(rel, items[i][1]) for i, rel in where])
            for (i, _), r in zip(where, got, strict=True):
                out[i] = r if isinstance(r, BaseException) else None
        return out

    def delete_many(self, locations: Iterable[str]) -> list[tuple[str, str]]:
        """Delete files in bulk (missing ones count as deleted); ``(location, error)`` per failure."""
        locs = list(locations)
        failed: list[tuple[str, str]] = []
        for st, items in self._by_store(locs).values():
            failed.extend((st.uri(p), e) for p, e in st.delete([r for _, r in items]))
        return failed


class StorageInputFile(InputFile):
    """A file to read, through its store's `Storage`."""

    def __init__(self, location: str, fio: TrinityLakeFileIO):
        super().__init__(location)
        self._store, self._path = fio.store(location)

    def __len__(self) -> int:
        return self._store.info(self._path).size

    def exists(self) -> bool:
        return self._store.exists(self._path)

    def open(self, seekable: bool = True) -> InputStream:
        """The file's bytes as a seekable stream (read whole, once).

        Raises:
            FileNotFoundError: no file at the location (named).
        """
        return pa.BufferReader(self._store.read(self._path))


class StorageOutputFile(OutputFile):
    """A file to write, through its store's `Storage`; the bytes are sent when its stream closes."""

    def __init__(self, location: str, fio: TrinityLakeFileIO):
        super().__init__(location)
        self._fio = fio
        self._store, self._path = fio.store(location)
        self._size: int | None = None

    def __len__(self) -> int:
        return self._size if self._size is not None else self._store.info(self._path).size

    def exists(self) -> bool:
        return self._store.exists(self._path)

    def to_input_file(self) -> StorageInputFile:
        return StorageInputFile(self.location, self._fio)

    def create(self, overwrite: bool = False) -> OutputStream:
        """A stream whose bytes are stored when it is closed: replacing any file there with
        `overwrite`, else only if absent (FileExistsError from ``close``)."""
        return _Upload(self, overwrite)

    def store_bytes(self, data: bytes, overwrite: bool) -> None:
        if overwrite:
            self._store.write(self._path, data)
        elif data:
            self._store.create_exclusive(self._path, data)
        else:  # an empty file cannot be an exclusive create (`Storage.create_exclusive`)
            if self._store.exists(self._path):
                raise FileExistsError(f"already exists: {self._store.uri(self._path)}")
            self._store.write(self._path, data)
        self._size = len(data)


class _Upload(io.BytesIO):
    """The bytes written, sent to the store once when closed (a failed send raises from ``close``)."""

    def __init__(self, target: StorageOutputFile, overwrite: bool):
        super().__init__()
        self._target, self._overwrite, self._sent = target, overwrite, False

    def close(self) -> None:
        if not self.closed and not self._sent:
            self._sent = True
            data = self.getvalue()
            super().close()
            self._target.store_bytes(data, self._overwrite)
            return
        super().close()

    def __exit__(self, exctype: type[BaseException] | None, excinst: BaseException | None,
                 exctb: TracebackType | None) -> None:
        if exctype is not None:  # the writer failed: store nothing
            self._sent = True
        self.close()
