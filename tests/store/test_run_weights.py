"""Migration 4 (runs.weights_path, runs.weights_sha256) and looper export's refusals that need no torch:
the weights shipped are only those the harness hashed when it recorded the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from looper.core.verdicts.verdict import Outcome
from looper.ship.export import ExportError, WeightsChanged, choose, verified_weights
from looper.store import Store
from looper.store.migrations import migrate
from looper.store.repo import open_engine
from looper.workspace.hashes import file_sha256

W = "runs/t/00001/main-s0/out/weights.pt"


def test_a_version_3_database_gains_the_columns_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "experiments.db"
    read, write = open_engine(path)
    assert migrate(write, target=3) == 3
    read.dispose()
    write.dispose()
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("INSERT INTO experiments (tag, kind, status, started_at) VALUES ('t', 'baseline', 'running', "
                "'2026-01-01T00:00:00+00:00')")
    con.execute("INSERT INTO runs (experiment_id, role, seed, score, log_tail, started_at, finished_at) VALUES "
                "(1, 'main', 0, 0.5, '', '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:01+00:00')")
    con.commit()
    con.close()
    store = Store(path)
    (old,) = store.run_records(1)
    assert (old.score, old.weights_path, old.weights_sha256) == (0.5, None, None)
    store.add_run(1, role="rerun", seed=1, score=0.6, weights_path=W, weights_sha256="ab" * 32)
    new = store.run_records(1)[1]
    assert (new.weights_path, new.weights_sha256) == (W, "ab" * 32)
    assert new.to_dict()["weights_sha256"] == "ab" * 32


def _recorded(tmp_path: Path, *, hashed: bool = True) -> tuple[Path, Store]:
    root = tmp_path / "ws"
    (root / W).parent.mkdir(parents=True)
    (root / W).write_bytes(b"weights")
    store = Store(root / "experiments.db")
    eid = store.start_experiment(tag="t", kind="baseline", config={})
    store.record_outcome(eid, outcome=Outcome.KEEP, score=0.5, verdict={"status": "pass"})
    store.add_run(eid, role="main", seed=0, score=0.5, metrics={"weighted_f1": 0.5},
                  weights_path=W if hashed else None, weights_sha256=file_sha256(root / W) if hashed else None)
    return root, store


def test_the_recorded_file_ships_and_a_changed_one_is_refused_naming_both_hashes(tmp_path: Path) -> None:
    root, store = _recorded(tmp_path)
    exp, run, why = choose(store, "t", None, None)
    assert exp.id == 1 and run.seed == 0 and "seed 0 scored 0.5000" in why
    assert verified_weights(root, run) == root / W
    recorded = file_sha256(root / W)
    (root / W).write_bytes(b"weights, retrained after the run")
    with pytest.raises(WeightsChanged, match=f"the harness recorded {recorded[:12]}.*refusing to export it"):
        verified_weights(root, run)


def test_a_missing_or_linked_weights_file_is_refused(tmp_path: Path) -> None:
    root, store = _recorded(tmp_path)
    _, run, _ = choose(store, "t", None, None)
    other = tmp_path / "elsewhere.pt"
    os.replace(root / W, other)
    with pytest.raises(WeightsChanged, match="gone or not a plain file"):
        verified_weights(root, run)
    (root / W).symlink_to(other)  # the same bytes, through a link: still refused
    with pytest.raises(WeightsChanged, match="gone or not a plain file"):
        verified_weights(root, run)


def test_nothing_to_ship_is_a_usage_error_that_says_why(tmp_path: Path) -> None:
    root, store = _recorded(tmp_path, hashed=False)
    with pytest.raises(ExportError, match="#1 .*1 scored run\\(s\\), none with weights the harness hashed"):
        choose(store, "t", None, None)
    with pytest.raises(ExportError, match="tag 'other' has no best yet"):
        choose(store, "other", None, None)
    with pytest.raises(ExportError, match="--experiment 9: no such experiment"):
        choose(store, "t", 9, None)
    with pytest.raises(ExportError, match="no run of seed 3"):
        choose(store, "t", 1, 3)
