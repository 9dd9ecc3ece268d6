"""A baseline that halted before all its seeds ran: the report still shows the seeds that scored (issue 47: the
first night of a firm's drawings halted on its 8th baseline seed and its report showed none of the 7 that did)."""

from __future__ import annotations

from pathlib import Path

from looper.core.verdicts.verdict import Outcome, Verdict
from looper.report import report_text
from looper.report.facts import gather
from looper.store import Store


def test_the_seeds_a_halted_baseline_scored_are_in_the_report(tmp_path: Path) -> None:
    store = Store(tmp_path / "experiments.db")
    store.add_event("t", "start", "daemon started (pid 1)")
    bid = store.start_experiment(tag="t", kind="baseline", config={}, description="baseline")
    for seed, score in ((0, 0.1171), (1, 0.1302), (2, 0.0954)):
        store.add_run(bid, role="main", seed=seed, score=score, metrics={"weighted_f1": score})
    store.add_run(bid, role="main", seed=3, exit_code=-15, score=None)  # the one the wall clock cut
    why = "baseline seed 3: stopped by the wall clock at 145 of 169 steps"
    store.record_outcome(bid, outcome=Outcome.ERROR, score=None, verdict=Verdict.errored(why), blocking=[why])
    n = gather(store, tmp_path)
    assert n.unfinished_baselines == {bid: ((0, 0.1171), (1, 0.1302), (2, 0.0954))}
    line = f"baseline #{bid} did not finish; 3 of its seeds scored: seed 0 0.1171, seed 1 0.1302, seed 2 0.0954"
    assert any(a.text == line and a.level == "halt" for a in n.attention), [a.text for a in n.attention]
    assert line in report_text(store, tmp_path)


def test_a_finished_baseline_is_not_listed_as_unfinished(tmp_path: Path) -> None:
    store = Store(tmp_path / "experiments.db")
    store.add_event("t", "start", "daemon started (pid 1)")
    bid = store.start_experiment(tag="t", kind="baseline", config={}, description="baseline")
    store.add_run(bid, role="main", seed=0, score=0.5, metrics={"weighted_f1": 0.5})
    store.record_outcome(bid, outcome=Outcome.KEEP, score=0.5, verdict={"status": "pass"})
    assert gather(store, tmp_path).unfinished_baselines == {}
