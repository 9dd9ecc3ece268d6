"""Versioned migrations of ``experiments.db``.

``schema_version`` holds one row per applied migration; the database's version is the
highest. Each migration runs in its own ``BEGIN IMMEDIATE`` transaction together with
its ``schema_version`` row, so a process killed mid-migration leaves the previous
version intact. A database newer than this code knows is refused, never touched.

Migrations are frozen once released: change the schema by appending a new one (SQLite
cannot alter a CHECK constraint in place; rebuild the table in the new migration).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

from looper.core.verdicts.verdict import Outcome
from looper.errors import HarnessError

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "Migration",
    "SchemaTooNew",
    "StoreError",
    "current_version",
    "migrate",
]


class StoreError(HarnessError):
    """experiments.db could not be opened, migrated or written (a harness error)."""


class SchemaTooNew(StoreError):
    """The database was written by a newer looper; this one refuses to touch it."""


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _quoted(values: list[str] | tuple[str, ...]) -> str:
    for v in values:
        if "'" in v:
            raise ValueError(f"refusing to quote {v!r} into DDL")
    return ", ".join(f"'{v}'" for v in values)


def _m1_create(conn: Connection) -> None:
    statuses = _quoted(Outcome.values())
    open_statuses = _quoted([o.value for o in Outcome if not o.is_terminal])
    scored = _quoted([o.value for o in Outcome if o.has_score])
    iso = "'[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T*'"
    ddl = [
        f"""
        CREATE TABLE experiments (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            tag TEXT NOT NULL CHECK (length(tag) > 0),
            kind TEXT NOT NULL CHECK (kind IN ('baseline', 'candidate', 'rerun', 'canary', 'verify')),
            "commit" TEXT,
            parent TEXT,
            status TEXT NOT NULL DEFAULT 'running' CHECK (status IN ({statuses})),
            score REAL CHECK (score IS NULL OR typeof(score) = 'real'),
            description TEXT NOT NULL DEFAULT '',
            rationale TEXT NOT NULL DEFAULT '',
            source TEXT NOT NULL DEFAULT '',
            diff TEXT NOT NULL DEFAULT '',
            config_json TEXT NOT NULL DEFAULT '{{}}' CHECK (json_valid(config_json)),
            seed INTEGER,
            metrics_json TEXT CHECK (metrics_json IS NULL OR json_valid(metrics_json)),
            verdict_json TEXT CHECK (verdict_json IS NULL OR json_valid(verdict_json)),
            blocking_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(blocking_json)),
            failure_signature TEXT,
            exit_code INTEGER,
            phase TEXT NOT NULL DEFAULT '',
            worker TEXT NOT NULL DEFAULT '',
            agent_seconds REAL CHECK (agent_seconds IS NULL OR agent_seconds >= 0),
            train_seconds REAL CHECK (train_seconds IS NULL OR train_seconds >= 0),
            eval_seconds REAL CHECK (eval_seconds IS NULL OR eval_seconds >= 0),
            harness_seconds REAL CHECK (harness_seconds IS NULL OR harness_seconds >= 0),
            gpu_json TEXT CHECK (gpu_json IS NULL OR json_valid(gpu_json)),
            train_json TEXT CHECK (train_json IS NULL OR json_valid(train_json)),
            started_at TEXT NOT NULL CHECK (started_at GLOB {iso}),
            finished_at TEXT CHECK (finished_at IS NULL OR finished_at GLOB {iso}),
            -- the score of anything not measured (vacuous, error, crash, interrupted,
            -- not yet finished) is NULL, never 0
            CONSTRAINT score_only_when_measured CHECK (score IS NULL OR status IN ({scored})),
            CONSTRAINT keep_has_score CHECK (status <> 'keep' OR score IS NOT NULL),
            CONSTRAINT finished_iff_terminal CHECK ((status IN ({open_statuses})) = (finished_at IS NULL))
        )
        """,
        """
        CREATE TABLE class_metrics (
            experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
            class_name TEXT NOT NULL CHECK (length(class_name) > 0),
            precision REAL CHECK (precision IS NULL OR (typeof(precision) = 'real' AND precision BETWEEN 0 AND 1)),
            recall REAL CHECK (recall IS NULL OR (typeof(recall) = 'real' AND recall BETWEEN 0 AND 1)),
            f1 REAL CHECK (f1 IS NULL OR (typeof(f1) = 'real' AND f1 BETWEEN 0 AND 1)),
            count_error REAL CHECK (count_error IS NULL OR typeof(count_error) = 'real'),
            tp INTEGER NOT NULL CHECK (typeof(tp) = 'integer' AND tp >= 0),
            fp INTEGER NOT NULL CHECK (typeof(fp) = 'integer' AND fp >= 0),
            fn INTEGER NOT NULL CHECK (typeof(fn) = 'integer' AND fn >= 0),
            support INTEGER NOT NULL CHECK (typeof(support) = 'integer' AND support >= 0),
            PRIMARY KEY (experiment_id, class_name)
        )
        """,
        f"""
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('main', 'rerun', 'canary')),
            seed INTEGER,
            exit_code INTEGER,
            score REAL,
            metrics_json TEXT CHECK (metrics_json IS NULL OR json_valid(metrics_json)),
            train_json TEXT CHECK (train_json IS NULL OR json_valid(train_json)),
            log_tail TEXT NOT NULL DEFAULT '',
            started_at TEXT NOT NULL CHECK (started_at GLOB {iso}),
            finished_at TEXT CHECK (finished_at IS NULL OR finished_at GLOB {iso})
        )
        """,
        f"""
        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at TEXT NOT NULL CHECK (at GLOB {iso}),
            tag TEXT NOT NULL,
            experiment_id INTEGER REFERENCES experiments(id) ON DELETE SET NULL,
            kind TEXT NOT NULL CHECK (kind IN ('start', 'stop', 'halt', 'page', 'page_failed', 'recover',
                                               'interrupted', 'stuck', 'baseline', 'note')),
            message TEXT NOT NULL,
            data_json TEXT CHECK (data_json IS NULL OR json_valid(data_json))
        )
        """,
        f"""
        CREATE TABLE tags (
            tag TEXT PRIMARY KEY CHECK (length(tag) > 0),
            branch TEXT NOT NULL,
            base_commit TEXT NOT NULL,
            fixed_hashes_json TEXT NOT NULL CHECK (json_valid(fixed_hashes_json)),
            data_hash TEXT NOT NULL,
            noise_json TEXT CHECK (noise_json IS NULL OR json_valid(noise_json)),
            started_at TEXT NOT NULL CHECK (started_at GLOB {iso})
        )
        """,
    ]
    for stmt in ddl:
        conn.exec_driver_sql(stmt)


def _m2_indexes(conn: Connection) -> None:
    for stmt in (
        "CREATE INDEX ix_experiments_tag_id ON experiments (tag, id)",
        "CREATE INDEX ix_experiments_status ON experiments (status)",
        "CREATE INDEX ix_runs_experiment ON runs (experiment_id)",
        "CREATE INDEX ix_events_tag_id ON events (tag, id)",
    ):
        conn.exec_driver_sql(stmt)


def _m3_confirmations(conn: Connection) -> None:
    iso = "'[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T*'"
    conn.exec_driver_sql(f"""
        CREATE TABLE confirmations (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            tag TEXT NOT NULL CHECK (length(tag) > 0),
            experiment_id INTEGER REFERENCES experiments(id) ON DELETE SET NULL,
            baseline_id INTEGER REFERENCES experiments(id) ON DELETE SET NULL,
            trigger TEXT NOT NULL CHECK (trigger IN ('night_end', 'command', 'cut_short')),
            status TEXT NOT NULL CHECK (status IN ('confirmed', 'not_confirmed', 'nothing')),
            score_key TEXT NOT NULL,
            planned INTEGER NOT NULL CHECK (planned >= 0),
            seeds_json TEXT NOT NULL CHECK (json_valid(seeds_json)),
            scores_json TEXT NOT NULL CHECK (json_valid(scores_json)),
            baseline_scores_json TEXT NOT NULL CHECK (json_valid(baseline_scores_json)),
            diff REAL, low REAL, high REAL,
            selection_diff REAL,
            flagged INTEGER NOT NULL DEFAULT 0 CHECK (flagged IN (0, 1)),
            headline TEXT NOT NULL,
            runs INTEGER NOT NULL CHECK (runs >= 0),
            seconds REAL NOT NULL CHECK (seconds >= 0),
            started_at TEXT NOT NULL CHECK (started_at GLOB {iso}),
            finished_at TEXT NOT NULL CHECK (finished_at GLOB {iso})
        )
        """)
    conn.exec_driver_sql("CREATE INDEX ix_confirmations_tag_id ON confirmations (tag, id)")


def _m4_run_weights(conn: Connection) -> None:
    """Each run's weights as the harness found them right after its evaluation: the file (relative
    to the workspace) and its sha256, so ``looper export`` ships only weights the harness scored."""
    conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN weights_path TEXT")
    conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN weights_sha256 TEXT")


def _m5_transfers(conn: Connection) -> None:
    """The transfer check: the confirmed best and the baseline trained longer on fresh seeds
    (looper/night/transfer.py, the rule in looper/core/keep/transfer.py; rows read by looper/store/transfers.py)."""
    iso = "'[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T*'"
    conn.exec_driver_sql(f"""
        CREATE TABLE transfers (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            tag TEXT NOT NULL,
            confirmation_id INTEGER REFERENCES confirmations(id) ON DELETE SET NULL,
            experiment_id INTEGER REFERENCES experiments(id) ON DELETE SET NULL,
            baseline_id INTEGER REFERENCES experiments(id) ON DELETE SET NULL,
            trigger TEXT NOT NULL CHECK (trigger IN ('night_end', 'command', 'cut_short')),
            status TEXT NOT NULL CHECK (status IN ('holds', 'shrinks', 'reverses', 'nothing')),
            score_key TEXT NOT NULL,
            steps INTEGER NOT NULL CHECK (steps >= 0),
            night_steps INTEGER NOT NULL CHECK (night_steps >= 0),
            seeds_json TEXT NOT NULL CHECK (json_valid(seeds_json)),
            scores_json TEXT NOT NULL CHECK (json_valid(scores_json)),
            baseline_scores_json TEXT NOT NULL CHECK (json_valid(baseline_scores_json)),
            diff REAL, low REAL, high REAL,
            flagged INTEGER NOT NULL DEFAULT 0 CHECK (flagged IN (0, 1)),
            headline TEXT NOT NULL,
            runs INTEGER NOT NULL CHECK (runs >= 0),
            seconds REAL NOT NULL CHECK (seconds >= 0),
            started_at TEXT NOT NULL CHECK (started_at GLOB {iso}),
            finished_at TEXT NOT NULL CHECK (finished_at GLOB {iso})
        )
        """)
    conn.exec_driver_sql("CREATE INDEX ix_transfers_tag_id ON transfers (tag, id)")


def _m6_run_phases(conn: Connection) -> None:
    iso = "'[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T*'"
    for column in ("train_started_at", "train_ended_at", "eval_ended_at"):
        conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column} TEXT "
                             f"CHECK ({column} IS NULL OR {column} GLOB {iso})")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "create experiments, class_metrics, runs, events, tags", _m1_create),
    Migration(2, "indexes for per-tag history, status and journal queries", _m2_indexes),
    Migration(3, "confirmations: the night's best re-run on fresh seeds", _m3_confirmations),
    Migration(4, "runs.weights_path, runs.weights_sha256: the weights each run left, hashed by the harness",
              _m4_run_weights),
    Migration(5, "transfers: the confirmed best and the baseline trained longer on fresh seeds", _m5_transfers),
    Migration(6, "runs: phase times (training started, training ended, evaluation ended)", _m6_run_phases),
)
LATEST_VERSION: int = MIGRATIONS[-1].version

_SCHEMA_VERSION_DDL = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at TEXT NOT NULL
)
"""


def _user_tables(conn: Connection) -> set[str]:
    rows = conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).all()
    return {r[0] for r in rows}


def current_version(conn: Connection) -> int:
    """The database's schema version: 0 for an empty database."""
    tables = _user_tables(conn)
    if "schema_version" not in tables:
        if tables:
            raise StoreError(
                f"not a looper database: it has tables ({', '.join(sorted(tables))}) but no schema_version"
            )
        return 0
    v = conn.exec_driver_sql("SELECT MAX(version) FROM schema_version").scalar()
    return int(v or 0)


def migrate(write_engine: Engine, target: int | None = None, *, where: str = "experiments.db") -> int:
    """Bring the database up to ``target`` (default: the latest); returns the version reached.

    ``write_engine`` must begin its transactions with ``BEGIN IMMEDIATE`` (see
    :func:`looper.store.values.open_engine`), so two processes never migrate at once.
    """
    goal = LATEST_VERSION if target is None else target
    if not 0 <= goal <= LATEST_VERSION:
        raise ValueError(f"migration target {goal} out of range 0..{LATEST_VERSION}")
    while True:
        with write_engine.begin() as conn:
            version = current_version(conn)
            if version > LATEST_VERSION:
                raise SchemaTooNew(
                    f"{where}: database schema version {version} is newer than this looper knows "
                    f"(latest {LATEST_VERSION}); upgrade looper, or point it at another workspace"
                )
            if version >= goal:
                return version
            step = next(m for m in MIGRATIONS if m.version == version + 1)
            conn.exec_driver_sql(_SCHEMA_VERSION_DDL)
            step.apply(conn)
            conn.execute(
                text("INSERT INTO schema_version (version, description, applied_at) VALUES (:v, :d, :at)"),
                {"v": step.version, "d": step.description, "at": _now()},
            )


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat()
