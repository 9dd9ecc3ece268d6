"""The schema itself refuses lies: CHECKs, score NULL rule, WAL, migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import inspect

from looper.core.verdicts.verdict import Outcome
from looper.store import LATEST_VERSION, SchemaTooNew, Store, StoreError
from looper.store import models as m
from looper.store.migrations import MIGRATIONS, migrate
from looper.store.repo import open_engine

NOW = "2025-01-01T00:00:00+00:00"


def raw(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    con.execute("PRAGMA foreign_keys = ON")
    return con


def insert_experiment(con: sqlite3.Connection, status: str, score: float | None, finished: str | None) -> None:
    con.execute(
        "INSERT INTO experiments (tag, kind, status, score, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?)",
        ("t", "candidate", status, score, NOW, finished),
    )


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    Store(tmp_path).close()
    return tmp_path / "experiments.db"


def test_unknown_status_is_rejected_by_the_schema(db: Path) -> None:
    con = raw(db)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        insert_experiment(con, "succeeded", None, NOW)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        con.execute(
            "INSERT INTO experiments (tag, kind, status, started_at) VALUES ('t', 'wild', 'running', ?)", (NOW,)
        )
    assert con.execute("SELECT COUNT(*) FROM experiments").fetchone()[0] == 0


def test_every_outcome_is_accepted_by_the_schema(db: Path) -> None:
    # if Outcome gains a value, migration 1's CHECK no longer covers it: add a migration
    con = raw(db)
    for o in Outcome:
        insert_experiment(con, o.value, 0.5 if o.has_score else None, NOW if o.is_terminal else None)
    statuses = [r[0] for r in con.execute("SELECT status FROM experiments ORDER BY id")]
    assert statuses == Outcome.values()


@pytest.mark.parametrize("status", [o.value for o in Outcome if not o.has_score])
def test_score_of_an_unmeasured_outcome_must_be_null(db: Path, status: str) -> None:
    con = raw(db)
    finished = NOW if Outcome(status).is_terminal else None
    for score in (0.0, 0.7):
        with pytest.raises(sqlite3.IntegrityError, match="score_only_when_measured"):
            insert_experiment(con, status, score, finished)
    insert_experiment(con, status, None, finished)  # NULL is fine


def test_keep_must_carry_a_score_and_finished_iff_terminal(db: Path) -> None:
    con = raw(db)
    with pytest.raises(sqlite3.IntegrityError, match="keep_has_score"):
        insert_experiment(con, "keep", None, NOW)
    with pytest.raises(sqlite3.IntegrityError, match="finished_iff_terminal"):
        insert_experiment(con, "crash", None, None)
    with pytest.raises(sqlite3.IntegrityError, match="finished_iff_terminal"):
        insert_experiment(con, "running", None, NOW)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        con.execute("INSERT INTO experiments (tag, kind, status, started_at) VALUES ('t', 'candidate', "
                    "'running', 'yesterday')")


def test_class_metrics_checks_and_foreign_key(db: Path) -> None:
    con = raw(db)
    insert_experiment(con, "discard", 0.3, NOW)
    ok = "INSERT INTO class_metrics (experiment_id, class_name, precision, recall, f1, tp, fp, fn, support) " \
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    con.execute(ok, (1, "damper", 0.5, None, None, 1, 1, 0, 0))
    for bad in [(1, "a", 1.5, 0.1, 0.1, 1, 1, 1, 1), (1, "b", 0.5, 0.1, 0.1, -1, 1, 1, 1),
                (1, "c", 0.5, 0.1, 0.1, "many", 1, 1, 1), (1, "", 0.5, 0.1, 0.1, 1, 1, 1, 1)]:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            con.execute(ok, bad)
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        con.execute(ok, (99, "x", 0.5, 0.5, 0.5, 1, 1, 1, 2))


def test_wal_foreign_keys_and_busy_timeout_are_on(tmp_path: Path) -> None:
    store = Store(tmp_path)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
    store.close()
    # WAL is persistent in the file: a plain sqlite3 connection sees it too
    assert raw(tmp_path / "experiments.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_models_mirror_the_migrated_schema(db: Path) -> None:
    read, _ = open_engine(db)
    insp = inspect(read)
    for table in m.metadata.sorted_tables:
        migrated = [c["name"] for c in insp.get_columns(table.name)]
        assert migrated == [c.name for c in table.columns], table.name
    read.dispose()


def test_migrates_from_empty_to_latest(tmp_path: Path) -> None:
    store = Store(tmp_path / "fresh.db")
    assert store.schema_version == LATEST_VERSION == MIGRATIONS[-1].version
    con = raw(tmp_path / "fresh.db")
    versions = [r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY version")]
    assert versions == [mig.version for mig in MIGRATIONS]
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"experiments", "class_metrics", "runs", "events", "tags", "schema_version"} <= tables


def test_migrates_a_version_1_database_keeping_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "experiments.db"
    read, write = open_engine(path)
    assert migrate(write, target=1) == 1
    read.dispose()
    con = raw(path)
    insert_experiment(con, "keep", 0.42, NOW)
    con.commit()
    assert con.execute("SELECT COUNT(*) FROM sqlite_master WHERE type='index' AND name LIKE 'ix_%'").fetchone()[0] == 0
    con.close()

    store = Store(path)
    assert store.schema_version == LATEST_VERSION > 1
    assert store.experiment(1).score == 0.42
    con = raw(path)
    indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='index' AND name LIKE 'ix_%'")}
    assert "ix_experiments_tag_id" in indexes
    # reopening an up-to-date database changes nothing
    Store(path).close()
    assert con.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == LATEST_VERSION


def test_newer_schema_is_refused_untouched(db: Path) -> None:
    con = raw(db)
    con.execute("INSERT INTO schema_version VALUES (?, 'from the future', ?)", (LATEST_VERSION + 5, NOW))
    con.commit()
    before = db.read_bytes()
    with pytest.raises(SchemaTooNew) as info:
        Store(db)
    msg = str(info.value)
    assert f"version {LATEST_VERSION + 5}" in msg and f"latest {LATEST_VERSION}" in msg and str(db) in msg
    assert con.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == LATEST_VERSION + 5
    assert len(db.read_bytes()) == len(before)


def test_foreign_database_and_garbage_file_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE experiments (x)")
    con.commit()
    with pytest.raises(StoreError, match="not a looper database"):
        Store(other)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="junk.db"):
        Store(junk)
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "missing-dir" / "experiments.db")
