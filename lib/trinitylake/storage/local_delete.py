"""Bulk delete of local files relative to each open folder (the orphan job's fast path)."""

from __future__ import annotations

import os

from trinitylake.storage.storage import Storage


class LocalDeleteStorage(Storage):
    """A plain local `Storage` whose bulk delete unlinks relative to each open folder. Retries
    and the fault-injection seam are the parent's."""

    def _delete_once(self, resolved: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """``unlink`` relative to an open folder (one path component to resolve per file, not
        the whole path: most of an unlink's cost on sandboxed filesystems)."""
        if os.unlink not in os.supports_dir_fd:
            return super()._delete_once(resolved)
        failures: list[tuple[str, str]] = []
        by_dir: dict[str, list[tuple[str, str]]] = {}
        for p, fp in resolved:
            d, _, name = fp.rpartition("/")
            by_dir.setdefault(d or "/", []).append((p, name))
        for d, items in by_dir.items():
            try:
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                continue  # the folder is gone, so are its files
            except OSError as e:
                failures.extend((p, str(e)) for p, _ in items)
                continue
            try:
                for p, name in items:
                    try:
                        os.unlink(name, dir_fd=fd)
                    except FileNotFoundError:
                        pass
                    except OSError as e:
                        failures.append((p, str(e)))
            finally:
                os.close(fd)
        return failures

    @classmethod
    def of(cls, storage: Storage) -> Storage:
        """`storage` itself unless it is a plain local `Storage` (subclasses, e.g. the tests'
        fault-injecting one, keep their own behaviour); else one at the same root with the
        same options (the filesystem objects are shared per process)."""
        if type(storage) is not Storage or not storage.is_local:
            return storage
        return cls(storage.root, storage.options)
