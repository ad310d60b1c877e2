"""Distributed-transaction work run in spawned child processes (importable by name)."""

from __future__ import annotations

from trinitylake.errors import AlreadyExistsError, TransactionClosedError, TrinityLakeError
from trinitylake.lakehouse import Lakehouse
from trinitylake.lakehouse.distributed import DistributedTransaction


def stage_tables(uri: str, txn_id: str, worker: int, n: int, barrier, options: dict | None = None) -> list[str]:
    """Stage tables ns.w<worker>_<i> (one stage each) plus one create of ns.shared, which
    every worker attempts: exactly one may succeed. Returns what this worker staged."""
    lh = Lakehouse.open(uri, storage_options=options, audit=False)
    barrier.wait(120)
    staged = []
    for i in range(n):
        DistributedTransaction.load(lh, txn_id).stage(lambda t, i=i: t.create_table("ns", f"w{worker}_{i}"))
        staged.append(f"w{worker}_{i}")
    try:
        DistributedTransaction.load(lh, txn_id).stage(lambda t: t.create_table("ns", "shared", properties={"by": str(worker)}))
        staged.append("shared")
    except AlreadyExistsError:
        pass
    return staged


def commit(uri: str, txn_id: str, worker: int, barrier, options: dict | None = None) -> tuple[str, object]:
    """Commit the transaction; ("committed", version) or ("closed", message)."""
    lh = Lakehouse.open(uri, storage_options=options, audit=False)
    barrier.wait(120)
    try:
        return "committed", DistributedTransaction.load(lh, txn_id).commit()
    except TransactionClosedError as e:
        return "closed", str(e)
    except TrinityLakeError as e:
        return type(e).__name__, str(e)
