"""What the parts of a lakehouse need of the `Lakehouse` that owns them, as Protocols.

`Lakehouse` builds its `Auditor`, its views and its transactions, so those modules must not
import `lakehouse.lakehouse`, not even for type annotations: each one is typed against the
narrow face below, which `Lakehouse` satisfies (checked by mypy where it passes itself); a
transaction's wider one, `transaction.TransactionHost`, extends `NodeSource` beside it. The
layering runs one way: ports <- audit, view <- history, transaction <- lakehouse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from trinitylake.control import VersionInfo
    from trinitylake.format import tree
    from trinitylake.lakehouse.context import AuditContext
    from trinitylake.lakehouse.roots import RootRef
    from trinitylake.storage import Storage


class NodeSource(Protocol):
    """What a view of one version reads through: node files and stored pointers."""

    @property
    def storage(self) -> Storage: ...

    def node_store(self, base: Storage) -> tree.NodeStore:
        """The (cached) node store of the files under `base`."""
        ...

    def resolve(self, path: str, base: Storage | None = None) -> tuple[Storage, str]:
        """Storage and path for a stored pointer: relative to `base`, or an absolute URI."""
        ...

    def def_file(self, uri: str) -> bytes | None:
        """The bytes of definition file `uri` when kept (they never change once created)."""
        ...

    def keep_def_file(self, uri: str, data: bytes) -> None:
        """Keep definition file `uri`'s bytes."""
        ...


class VersionSource(NodeSource, Protocol):
    """What the version history (`lakehouse.history`) reads: the versions a lakehouse keeps
    and their roots."""

    def latest_version(self) -> int: ...

    def listed_versions(self) -> list[int]: ...

    def load_root(self, version: int) -> RootRef: ...


class AuditedLakehouse(Protocol):
    """What the auditor reads of its lakehouse: the caller's command and arguments for its
    rows, and versions' roots and facts for reconciliation."""

    @property
    def storage(self) -> Storage: ...

    @property
    def context(self) -> AuditContext: ...

    def load_root(self, version: int) -> RootRef: ...

    def version_info(self, version: int) -> VersionInfo: ...
