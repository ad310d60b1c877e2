"""An independent oracle for the destructive jobs: a small TrinityLake reader written from the
spec (docs/format/storage-layout.md, key-encoding.md, definitions/*.md and ../shared/FORMAT.md)
with pyarrow and its own protobuf wire reader only: it imports nothing of the library, not even
its generated protobuf module (`tests/oracle_check` asserts that, and checks the wire reader's
decoding against the library's on real files).

It shares no code with the library's tree, walk or storage layers (no `node_references`,
`Locator`, `Reader`, `expand_node`, the walk job, `Storage` or `NodeStore`): a wrong rule
about what counts as a reference would have to be made twice, independently, to go unnoticed.
"""

from tests.oracle.reader import Oracle, OracleReach, Snapshot, oracle_reach

__all__ = ["Oracle", "OracleReach", "Snapshot", "oracle_reach"]
