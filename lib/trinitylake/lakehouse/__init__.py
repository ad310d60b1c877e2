"""Lakehouse, versions, time travel, rollback and transactions."""

from trinitylake.lakehouse.changes import ChangeSet
from trinitylake.lakehouse.distributed import DistributedTransaction
from trinitylake.lakehouse.lakehouse import Lakehouse
from trinitylake.lakehouse.roots import RootRef
from trinitylake.lakehouse.transaction import Transaction
from trinitylake.lakehouse.view import LakehouseView

__all__ = ["ChangeSet", "DistributedTransaction", "Lakehouse", "LakehouseView", "RootRef", "Transaction"]
