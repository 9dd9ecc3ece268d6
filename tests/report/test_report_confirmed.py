"""The confirmed headline, the costs, and `looper history --json`'s cost and confirmations, read from a real
Store (no training: the rows are written through the store's own API)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from looper.core.verdicts.verdict import Outcome, Verdict
from looper.report import history_json, history_rows
from looper.report.confirm import morning, morning_html, morning_lines
from looper.store import Store
from looper.store.queries import confirmations, used_seeds

NOW = "2026-12-02T06:00:00+00:00"
COST = {"candidate_runs": 2, "best_runs": 1, "best_seeds_gained": [3], "runs": 3, "seeds": [0, 1], "cap": 4,
        "looks": 3, "stopped": "stopped early for success after 2 seed(s)", "seconds": 300.0, "minutes": 5.0,
        "wall_minutes": 3.1}


def _exp(store: Store, kind: str, outcome: Outcome, score: float, seeds: list[int], cost: dict | None = None) -> int:
    i = store.start_experiment(tag="t", kind=kind, config={}, source="print(1)")
    for s in seeds:
        store.add_run(i, role="main", seed=s, score=score, metrics={"weighted_f1": score})
    v = Verdict.passed({"cost": cost} if cost else {}) if outcome is Outcome.KEEP else Verdict.failed(
        "lost", metrics={"cost": cost} if cost else {})
    store.record_outcome(i, outcome=outcome, verdict=v, score=score, finished_at=NOW)
    return i


@pytest.fixture
def night(tmp_path: Path) -> tuple[Store, int, int]:
    store = Store(tmp_path / "experiments.db")
    base = _exp(store, "baseline", Outcome.KEEP, 0.40, [0, 1, 2])
    kept = _exp(store, "candidate", Outcome.KEEP, 0.47, [0, 1], COST)
    return store, base, kept


def _confirm(store: Store, base: int, kept: int, status: str, low: float, flagged: bool) -> int:
    return store.add_confirmation(
        tag="t", experiment_id=kept, baseline_id=base, trigger="night_end", status=status, score_key="weighted_f1",
        planned=3, seeds=[5, 6, 7], scores=[0.45, 0.44, 0.46], baseline_scores=[0.40, 0.41, 0.39],
        headline=f"weighted F1 +0.050 [{low:+.3f}, +0.080] over the baseline on 3 fresh seeds", runs=3,
        seconds=330.0, started_at=NOW, diff=0.05, low=low, high=0.08, selection_diff=0.07, flagged=flagged)


def test_the_headline_is_the_confirmed_difference_beside_the_selection_figure(night) -> None:
    store, base, kept = night
    cid = _confirm(store, base, kept, "confirmed", 0.02, False)
    (c,) = confirmations(store, "t")
    assert c.id == cid and c.seeds == (5, 6, 7) and c.flagged is False and used_seeds(store, "t") == [0, 1, 2]
    lines = morning_lines(morning(store, "t"))
    assert lines[0] == (f"Confirmed: weighted F1 +0.050 [+0.020, +0.080] over the baseline on 3 fresh seeds "
                        f"(best #{kept}, 3 run(s), 5.5 min of runs, night end)")
    assert lines[1].startswith("  at selection: +0.070 over the baseline")
    assert "  decisions: 1, 3 run(s) (1 of them the best gaining a seed), 5.0 min of runs, 3.1 min wall " \
           "(19.4 decisions per hour of it); per decision 3.0 run(s), 5.0 min of runs; 1 stopped early" in lines
    assert (f"    #{kept} keep: 2 run(s) + 1 of the best, 5.0 min of runs, 3.1 min wall; "
            "stopped early for success after 2 seed(s)") in lines
    assert not any(x.startswith("!!") for x in lines)
    page = morning_html(morning(store, "t"))
    assert 'class="attn ok"' in page and "<td>2</td><td>1</td><td>5.0</td><td>3.1</td>" in page


def test_a_decision_recorded_without_its_wall_clock_shows_only_the_minutes_of_its_runs(tmp_path: Path) -> None:
    store = Store(tmp_path / "experiments.db")
    _exp(store, "baseline", Outcome.KEEP, 0.40, [0, 1, 2])
    old = _exp(store, "candidate", Outcome.DISCARD, 0.35, [0, 1], {k: v for k, v in COST.items() if k != "wall_minutes"})
    lines = morning_lines(morning(store, "t"))
    assert f"    #{old} discard: 2 run(s) + 1 of the best, 5.0 min of runs; stopped early for success after 2 seed(s)" \
        in lines
    assert not [x for x in lines if "wall" in x], lines  # no sum of walls it does not have
    assert "<td>5.0</td><td></td>" in morning_html(morning(store, "t"))


def test_a_gain_that_did_not_confirm_is_flagged(night) -> None:
    store, base, kept = night
    _confirm(store, base, kept, "not_confirmed", -0.01, True)
    lines = morning_lines(morning(store, "t"))
    assert f"!! #{kept}'s kept gain did not confirm on fresh seeds: a person should look before shipping it" in lines
    assert 'class="attn"' in morning_html(morning(store, "t"))


def test_no_confirmation_says_so(night) -> None:
    store, _, _ = night
    assert morning_lines(morning(store, "t"))[0].startswith("Confirmed: nothing yet for tag t")
    assert morning_lines(morning(store, None)) == ["Confirmed: nothing yet for tag - (no confirmation recorded; "
                                                   "run `looper confirm`)"]


def test_history_json_carries_cost_and_confirmations(night) -> None:
    store, base, kept = night
    _confirm(store, base, kept, "confirmed", 0.02, False)
    rows = {r["id"]: r for r in json.loads(history_json(history_rows(store)))}
    assert rows[kept]["cost"] == COST and rows[kept]["score"] == pytest.approx(0.47)
    (c,) = rows[kept]["confirmations"]
    assert (c["status"], c["diff"], c["low"], c["selection_diff"], c["runs"], c["seconds"]) == (
        "confirmed", 0.05, 0.02, 0.07, 3, 330.0)
    took = dt.datetime.fromisoformat(c["finished_at"]) - dt.datetime.fromisoformat(c["started_at"])
    assert c["wall_seconds"] == pytest.approx(took.total_seconds(), abs=1e-3) and c["wall_seconds"] > 0
    assert rows[base]["cost"] is None and rows[base]["confirmations"] == []


def test_a_confirmation_shows_the_minutes_of_its_runs_and_its_wall_clock(night) -> None:
    """``seconds`` is the fresh runs' own time added up; the wall clock runs from the confirmation's
    start to its record (less than the runs' sum when seeds run side by side)."""
    store, base, kept = night
    started = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=150)).isoformat()
    cid = store.add_confirmation(
        tag="t", experiment_id=kept, baseline_id=base, trigger="command", status="confirmed", score_key="weighted_f1",
        planned=3, seeds=[5, 6, 7], scores=[0.45, 0.44, 0.46], baseline_scores=[0.40, 0.41, 0.39],
        headline="weighted F1 +0.050 [+0.020, +0.080] over the baseline on 3 fresh seeds", runs=3, seconds=270.0,
        started_at=started, diff=0.05, low=0.02, high=0.08, selection_diff=0.07)
    (c,) = confirmations(store, "t")
    assert 150.0 <= c.wall_seconds < 160.0, c.wall_seconds
    assert f"  confirmation #{cid}: 3 run(s), 4.5 min of runs, 2.5 min wall (confirmed)" in \
        morning_lines(morning(store, "t"))


def test_the_cost_lines_and_history_split_each_decisions_time_into_its_phases(tmp_path: Path) -> None:
    store = Store(tmp_path / "experiments.db")
    _exp(store, "baseline", Outcome.KEEP, 0.40, [0, 1, 2])
    phases = {"startup_seconds": 20.0, "train_seconds": 240.0, "eval_seconds": 40.0}
    a = _exp(store, "candidate", Outcome.KEEP, 0.47, [0, 1], {**COST, "phases": phases})
    lines = morning_lines(morning(store, "t"))
    assert (f"    #{a} keep: 2 run(s) + 1 of the best, 5.0 min of runs, 3.1 min wall; "
            "stopped early for success after 2 seed(s); start-up 20 s, training 240 s, evaluation 40 s "
            "(80 % training)") in lines
    assert any(x.startswith("  decisions: 1,") and x.endswith("evaluation 40 s (80 % training)") for x in lines)
    assert json.loads(history_json(history_rows(store)))[-1]["cost"]["phases"] == phases
    b = _exp(store, "candidate", Outcome.DISCARD, 0.30, [0], {**COST, "phases": {**phases, "startup_seconds": None}})
    lines = morning_lines(morning(store, "t"))
    assert any(x.startswith(f"    #{b} discard") and x.endswith("start-up ? s, training 240 s, evaluation 40 s")
               for x in lines), lines
    old = _exp(store, "candidate", Outcome.DISCARD, 0.30, [0], COST)  # recorded before phases were
    lines = morning_lines(morning(store, "t"))
    assert any(x.startswith(f"    #{old} discard") and x.endswith("after 2 seed(s)") for x in lines), lines
    assert [x for x in lines if x.startswith("  decisions: 3,")] and not [
        x for x in lines if x.startswith("  decisions") and "start-up" in x]  # no sum over what is not known
