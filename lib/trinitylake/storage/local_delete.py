"""The orphan job's former fast delete. Every local storage now unlinks relative to each open
folder (`trinitylake.storage.local_storage.LocalBackend.delete`), so this view is the storage
itself."""

from __future__ import annotations

from trinitylake.storage.storage import Storage


class LocalDeleteStorage:
    """No longer a storage of its own: see the module docstring."""

    @classmethod
    def of(cls, storage: Storage) -> Storage:
        return storage
