"""The SQLite memory of looper: ``experiments.db`` (docs/REFERENCE.md section 4).

Use :class:`Store`; every write method is one transaction. Reads hand out the frozen
records of :mod:`looper.store.records`; :mod:`looper.store.queries` holds the read-only
queries of the report, the history and the status (lean rows, the running best).
Nothing outside this package touches the table models or the engine.
"""

from looper.store.migrations import LATEST_VERSION, SchemaTooNew, StoreError
from looper.store.records import (
    TIME_PARTS,
    ClassMetrics,
    ConfirmationRecord,
    EventRecord,
    ExperimentRecord,
    ExperimentRow,
    RunRecord,
    TagRecord,
)
from looper.store.repo import DB_NAME, ExperimentNotFound, Store, find_secrets, to_utc_iso, utc_now

__all__ = [
    "DB_NAME",
    "LATEST_VERSION",
    "TIME_PARTS",
    "ClassMetrics",
    "ConfirmationRecord",
    "EventRecord",
    "ExperimentNotFound",
    "ExperimentRecord",
    "ExperimentRow",
    "RunRecord",
    "SchemaTooNew",
    "Store",
    "StoreError",
    "TagRecord",
    "find_secrets",
    "to_utc_iso",
    "utc_now",
]
