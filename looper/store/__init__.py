"""The SQLite memory of looper: ``experiments.db`` (CONTRACT section 4).

Use :class:`Store`; every write method is one transaction.
"""

from looper.store.migrations import LATEST_VERSION, SchemaTooNew, StoreError
from looper.store.repo import DB_NAME, ExperimentNotFound, Store, find_secrets, utc_now

__all__ = [
    "DB_NAME",
    "LATEST_VERSION",
    "ExperimentNotFound",
    "SchemaTooNew",
    "Store",
    "StoreError",
    "find_secrets",
    "utc_now",
]
