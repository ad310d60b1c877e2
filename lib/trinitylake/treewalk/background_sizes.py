"""The walk's background sizing lives with the storage (`trinitylake.storage.background_sizes`:
a local store's ``stat`` child process is one of its fast paths); this name stays for importers."""

from trinitylake.storage.background_sizes import START_AFTER_KEYS, BackgroundSizes

__all__ = ["START_AFTER_KEYS", "BackgroundSizes"]
