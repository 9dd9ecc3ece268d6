"""A run's phases on the harness's clock: the start-up line's arrival, the fallback from train.json, and
the store keeping all four readings (looper.night.measure, looper.store; no training)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from looper.executors.base import STARTUP_MARK
from looper.night.measure import Measurement, startup_from_json, startup_watch
from looper.store import Store


def test_the_first_startup_line_is_timed_and_every_line_passes_on() -> None:
    got: list[str] = []
    sink, seen = startup_watch(got.append)
    sink("Ultralytics 8.3 ...")
    assert seen == []
    sink(f"{STARTUP_MARK} seconds=5.4")
    sink(f"{STARTUP_MARK} seconds=9.9")  # a second one does not move it
    assert got == ["Ultralytics 8.3 ...", f"{STARTUP_MARK} seconds=5.4", f"{STARTUP_MARK} seconds=9.9"]
    assert len(seen) == 1 and "T" in seen[0]


def test_the_fallback_adds_train_jsons_startup_to_the_launch() -> None:
    t0 = "2026-12-03T10:00:00.000+00:00"
    assert startup_from_json(t0, {"startup_seconds": 6.25}) == "2026-12-03T10:00:06.250+00:00"
    for bad in ({}, None, {"startup_seconds": None}, {"startup_seconds": True}, {"startup_seconds": -1},
                {"startup_seconds": "6"}, {"startup_seconds": float("nan")}):
        assert startup_from_json(t0, bad) is None, bad
    assert startup_from_json(None, {"startup_seconds": 6.0}) is None


def test_a_measurement_splits_its_time() -> None:
    m = Measurement(seed=0, started_at="2026-12-03T10:00:00+00:00", train_started_at="2026-12-03T10:00:05+00:00",
                    train_ended_at="2026-12-03T10:01:05+00:00", eval_ended_at="2026-12-03T10:01:15+00:00")
    assert (m.phases.startup, m.phases.train, m.phases.eval) == (5.0, 60.0, 10.0)
    assert Measurement(seed=0).phases.startup is None


def test_the_store_keeps_the_phases_and_migrates_an_older_database(tmp_path: Path) -> None:
    store = Store(tmp_path / "experiments.db")
    i = store.start_experiment(tag="t", kind="baseline", config={}, source="")
    store.add_run(i, "main", seed=0, started_at="2026-12-03T11:00:00+01:00",
                  train_started_at="2026-12-03T10:00:05+00:00", train_ended_at="2026-12-03T10:01:05+00:00",
                  eval_ended_at="2026-12-03T10:01:15+00:00", finished_at="2026-12-03T10:01:16+00:00")
    store.add_run(i, "rerun", seed=1)  # a run recorded without phases (e.g. before this version)
    (r, old) = store.run_records(i)
    assert r.started_at == "2026-12-03T10:00:00.000000+00:00" != r.finished_at
    assert (r.phases.startup, r.phases.train, r.phases.eval) == (5.0, 60.0, 10.0)
    assert old.train_started_at is None and old.phases.train is None
    con = sqlite3.connect(tmp_path / "experiments.db")
    try:
        con.execute("UPDATE runs SET train_started_at = 'yesterday' WHERE id = ?", (r.id,))
    except sqlite3.IntegrityError as exc:
        assert "CHECK" in str(exc)
    else:
        raise AssertionError("a phase time that is not ISO was stored")
    cols = [row[1] for row in con.execute("PRAGMA table_info(runs)")]
    assert cols[-3:] == ["train_started_at", "train_ended_at", "eval_ended_at"]
