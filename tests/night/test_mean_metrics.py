"""The record of a multi-seed experiment: what the store's class rows may hold."""

from __future__ import annotations

from looper.night.measure import mean_metrics
from looper.store import Store


def run(tp: int, fn: int, recall: float, score: float) -> dict:
    return {"weighted_f1": score, "pages": 12, "classes": {
        "thermostat": {"tp": tp, "fp": 1, "fn": fn, "support": tp + fn, "precision": 0.9, "recall": recall,
                       "f1": 0.8, "count_error": 0.0, "found": [1] * tp + [0] * fn}}}


def test_counts_stay_whole_numbers_rates_are_means_and_instance_lists_stay_per_run() -> None:
    m = mean_metrics([run(5, 5, 0.5, 0.3), run(6, 4, 0.6, 0.4), run(6, 4, 0.6, 0.5)])
    row = m["classes"]["thermostat"]
    assert row["tp"] == 6 and row["fn"] == 4 and row["support"] == 10 and row["fp"] == 1
    assert all(isinstance(row[k], int) for k in ("tp", "fp", "fn", "support"))
    assert abs(row["recall"] - (0.5 + 0.6 + 0.6) / 3) < 1e-12
    assert abs(m["weighted_f1"] - 0.4) < 1e-12 and m["runs"] == 3
    assert "found" not in row


def test_the_store_accepts_the_mean_of_seeds_that_disagree(tmp_path) -> None:
    """The demo's 3-seed baseline once halted the night: 'CHECK constraint failed: typeof(tp) = integer'."""
    from looper.core.verdicts.verdict import Outcome, Verdict

    store = Store(tmp_path / "experiments.db")
    exp = store.start_experiment(tag="t", kind="baseline", config={}, seed=0, description="b", source="",
                                 diff="")
    m = mean_metrics([run(5, 5, 0.5, 0.3), run(6, 4, 0.6, 0.4)])  # tp 5.5 on average: stored as 6
    store.record_outcome(exp, outcome=Outcome.KEEP, verdict=Verdict.passed(), score=m["weighted_f1"], metrics=m)
    assert store.class_scores(exp)["thermostat"].tp == 6
