"""The report's "runs training" line: how much of a night's clock some run trained (looper.core.run.phases.cover).

On a GPU a stretch with no run training is a stretch the GPU had nothing to train; the line is the scheduling's
part of the GPU's idle time, on any machine. Its window is the last daemon night's runs: a later command's runs of
the same experiments (``looper confirm`` the next day) are not the night's."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from looper.core.verdicts.verdict import Outcome
from looper.report import gather, report_text, write_html
from looper.report.json_report import report_json
from looper.store import Store

T0 = datetime(2026, 12, 7, 22, 0, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="microseconds")  # the store's form


def _night(tmp_path: Path, stopped: bool) -> Store:
    store = Store(tmp_path / "experiments.db")
    events = [store.add_event("t", "start", "daemon started (pid 1, 1 worker(s))")]
    bid = store.start_experiment(tag="t", kind="baseline", config={}, description="baseline")
    for seed, (start, first_step, trained, evaluated) in enumerate([(1, 3, 13, 15), (1, 4, 12, 16), (16, 20, 30, 32)]):
        store.add_run(bid, role="main", seed=seed, score=0.5, metrics={"weighted_f1": 0.5}, started_at=at(start),
                      train_started_at=at(first_step), train_ended_at=at(trained), eval_ended_at=at(evaluated),
                      finished_at=at(evaluated))
    store.record_outcome(bid, outcome=Outcome.KEEP, score=0.5, verdict={"status": "pass"})
    if stopped:
        events.append(store.add_event("t", "stop", "daemon stopped after 0 experiment(s)"))
    # the next day's `looper confirm`: runs of the same experiment, after the daemon's night
    store.add_run(bid, role="rerun", seed=7, score=0.5, started_at=at(100), train_started_at=at(101),
                  train_ended_at=at(111), finished_at=at(112))
    con = sqlite3.connect(store.path)
    with con:
        for event, when in zip(events, (0, 40)[:len(events)], strict=True):
            con.execute("UPDATE events SET at = ? WHERE id = ?", (at(when), event))
    con.close()
    return store


def test_the_runs_training_line_covers_the_daemon_s_night_and_names_its_longest_stretch_without(tmp_path: Path) -> None:
    store = _night(tmp_path, stopped=True)
    n = gather(store, tmp_path)
    assert n.cover is not None
    # the window 1 .. 32 s; training 3-13 and 4-12 (one stretch, 3-13) and 20-30: 20 of 31 s, 28 s of runs training
    assert (n.cover.wall_s, n.cover.training_s, n.cover.longest_gap_s, n.cover.gap_starts_at) == (31.0, 20.0, 7.0, 12.0)
    line = ("runs training: 64.5% of the runs' clock (31 s from the first run's start to the last one's end), "
            "0.9 at a time on average; the longest stretch with none training 7 s, 12 s in")
    assert line in report_text(store, tmp_path, console_width=400)
    page = write_html(store, tmp_path, tmp_path / "r.html").read_text()
    assert f'<p id="runs-training">{line.replace(chr(39), "&#x27;")}</p>' in page
    assert report_json(store, tmp_path)["runs_training"] == {
        "share": round(20 / 31, 4), "wall_seconds": 31.0, "training_seconds": 20.0, "runs_at_a_time": round(28 / 31, 3),
        "longest_gap_seconds": 7.0, "longest_gap_at_seconds": 12.0}


def test_a_night_still_running_counts_every_run_since_its_start(tmp_path: Path) -> None:
    """No daemon's last entry yet: every run since the start is the night's (here the one at 100 s too)."""
    n = gather(_night(tmp_path, stopped=False), tmp_path)
    assert n.cover is not None
    assert (n.cover.wall_s, n.cover.training_s, n.cover.longest_gap_s) == (111.0, 30.0, 71.0)


def test_no_run_with_its_training_phase_no_line(tmp_path: Path) -> None:
    """Runs recorded without their phases (before migration 6, or none reached its first step): nothing is said,
    never a 0 %."""
    store = Store(tmp_path / "experiments.db")
    store.add_event("t", "start", "daemon started (pid 1, 1 worker(s))")
    bid = store.start_experiment(tag="t", kind="baseline", config={}, description="baseline")
    store.add_run(bid, role="main", seed=0, exit_code=1, score=None)
    assert gather(store, tmp_path).cover is None
    assert "runs training:" not in report_text(store, tmp_path, console_width=400)
    assert report_json(store, tmp_path)["runs_training"] is None
