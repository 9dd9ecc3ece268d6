"""The gate's score test: keep, discard, or another seed inside the measured noise; simpler wins a tie;
unmeasured noise decides nothing on the score; every verdict names its baseline.

The class gates: test_core_gate.py; the score test paired by seed: test_core_gate_paired.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from gate_cases import APPROVED, BASE, CFG, band, gate, hits, inputs, run
from hypothesis import given, settings
from hypothesis import strategies as st

from looper.core.keep.gate import GateConfig, GateInput, decide
from looper.core.verdicts.verdict import Outcome, Status

# -- outcomes ----------------------------------------------------------------------------------


def test_a_clear_win_is_kept() -> None:
    d = gate(run(0.50, BASE))
    assert d.outcome is Outcome.KEEP and d.verdict.ok and d.verdict.blocking == []
    assert d.score == pytest.approx(0.50) and d.needs_reruns == 0
    m = d.verdict.metrics
    assert m["baseline"] == "tag-start" and m["dead_gates"] == []
    assert m["best_score"] == pytest.approx(0.40) and m["diff"] == pytest.approx(0.10)
    assert m["noise_band"] == pytest.approx(band()) and m["noise_sigma"] == pytest.approx(0.01)
    assert m["noise_df"] == 2 and m["looks"] == 3 and m["alpha_per_look"] == pytest.approx(0.05 / 3)
    assert m["score_test"]["p_better"] < 0.05 / 3 < m["score_test"]["p_worse"]


def test_a_win_inside_the_measured_noise_is_not_kept_at_once() -> None:
    # +0.05 would have been kept by the old 2-sigma band (0.02); three seeds of noise say wait.
    d = gate(run(0.45, BASE))
    assert d.outcome is Outcome.INCONCLUSIVE and d.needs_reruns == 1
    assert 0.05 < d.verdict.metrics["noise_band"] == pytest.approx(band())


def test_a_clear_loss_is_discarded_with_the_numbers() -> None:
    d = gate(run(0.30, BASE))
    assert d.outcome is Outcome.DISCARD
    # t = -0.1 / (0.01 * sqrt(1 + 1/3)) = -8.66 on 2 df: p = 0.0065 < 0.05 / 3 looks.
    assert d.verdict.blocking == [
        "weighted_f1 0.3000 is below the current best 0.4000 by 0.1000: p = 0.0065 < 0.017 "
        f"(one-sided Student t, pooled seed variance; noise band {band():.4f})"]


def test_a_seed_change_that_only_moves_noise_asks_for_one_more_seed() -> None:
    d = gate(run(0.41, BASE))
    assert d.outcome is Outcome.INCONCLUSIVE and d.verdict.status is Status.FAIL
    assert d.needs_reruns == 1 and d.verdict.metrics["needs_reruns"] == 1
    assert d.verdict.blocking[0].endswith("needs 1 more seed (2 left)")
    one = gate(run(0.41, BASE), reruns_left=1)
    assert one.needs_reruns == 1 and one.verdict.blocking[0].endswith("needs 1 more seed (1 left)")


def test_after_reruns_the_mean_decides_and_the_band_narrows() -> None:
    first = gate(run(0.445, BASE))
    assert first.outcome is Outcome.INCONCLUSIVE
    runs = [run(s, BASE) for s in (0.445, 0.442, 0.448)]
    d = gate(runs, reruns_left=0)
    assert d.outcome is Outcome.KEEP, d.verdict.metrics
    assert d.verdict.metrics["runs"] == 3 and d.score == pytest.approx(0.445)
    # the candidate's own seeds join the pooled noise: sigma^2 = (0.0002 + 0.000018) / 4
    sigma = ((0.0002 + 0.000018) / 4) ** 0.5
    assert d.verdict.metrics["noise_sigma"] == pytest.approx(sigma) and d.verdict.metrics["noise_df"] == 4
    assert d.verdict.metrics["noise_band"] == pytest.approx(band(3, 3, 3, sigma, 4))
    assert d.verdict.metrics["noise_band"] < first.verdict.metrics["noise_band"]


def test_still_inside_after_reruns_is_inconclusive_for_good() -> None:
    runs = [run(s, BASE) for s in (0.401, 0.399, 0.402)]
    d = gate(runs, reruns_left=0)
    assert d.outcome is Outcome.INCONCLUSIVE and d.needs_reruns == 0
    assert "stayed inside the noise band" in d.verdict.blocking[0] and "after 3 run(s)" in d.verdict.blocking[0]


@pytest.mark.parametrize(
    ("score", "reruns_left", "outcome"),
    [
        (0.405, 2, Outcome.KEEP),  # simpler and not worse: simpler wins at once
        (0.400, 2, Outcome.KEEP),
        (0.395, 2, Outcome.INCONCLUSIVE),  # simpler but a little worse: rerun first
        (0.395, 0, Outcome.KEEP),  # still a tie after reruns: simpler wins
        (0.350, 0, Outcome.DISCARD),  # simpler but significantly worse (p = 0.025 < 0.05)
    ],
)
def test_inside_the_noise_simpler_wins(score: float, reruns_left: int, outcome: Outcome) -> None:
    d = gate(run(score, BASE), simpler=True, reruns_left=reruns_left)
    assert d.outcome is outcome
    if outcome is Outcome.KEEP:
        assert any("simpler wins" in n for n in d.verdict.metrics["notes"])


def test_without_a_current_best_the_baseline_is_the_best() -> None:
    d = gate(run(0.50, BASE), best=[])
    assert d.outcome is Outcome.KEEP and d.verdict.metrics["best_score"] == pytest.approx(0.40)


def test_another_score_key() -> None:
    cand, base = run(0.45, BASE), run(0.4, BASE)
    cand["macro_f1"], base["macro_f1"] = 0.30, 0.50
    seeds = [{**base, "macro_f1": v} for v in (0.49, 0.50, 0.51)]
    d = decide(GateInput([cand], seeds, base, "tag-start", baseline_runs=seeds),
               GateConfig(score="macro_f1"), 2)
    assert d.outcome is Outcome.DISCARD and d.verdict.blocking[0].startswith("macro_f1 0.3000")


# -- the noise: unmeasured, or measured otherwise ----------------------------------------------


@pytest.mark.parametrize("score", [0.30, 0.405, 0.90])
def test_unmeasured_noise_never_keeps_or_discards_on_the_score(score: float) -> None:
    d = gate(run(score, BASE), base_runs=[])  # one baseline run, which is also the best
    m = d.verdict.metrics
    assert m["noise_measured"] is False and m["noise_sigma"] is None and m["noise_band"] is None
    assert any(n.startswith("noise unmeasured") for n in m["notes"])
    assert d.outcome is Outcome.INCONCLUSIVE and d.needs_reruns == 0
    assert "the seed noise is unmeasured" in d.verdict.blocking[0]
    assert gate(run(score, BASE), base_runs=[], simpler=True).outcome is Outcome.INCONCLUSIVE


def test_unmeasured_noise_still_discards_a_failed_class() -> None:
    base = run(0.40, BASE, found={"return_grille": hits(20, 20)})
    d = gate(run(0.90, BASE, found={"return_grille": hits(20, 0)}), baseline=base, base_runs=[])
    assert d.outcome is Outcome.DISCARD and d.verdict.blocking[0].startswith("recall.return_grille: 20 of 20")


def test_two_runs_of_the_best_measure_the_noise_without_baseline_seeds() -> None:
    base = run(0.40, BASE)
    d = gate(run(0.60, BASE), best=[run(0.41, BASE), run(0.43, BASE)], baseline=base, base_runs=[],
             reruns_left=0)
    assert d.verdict.metrics["noise_measured"] is True and d.verdict.metrics["noise_df"] == 1
    assert d.outcome is Outcome.KEEP


def test_zero_measured_spread_makes_any_difference_decide() -> None:
    seeds = [run(0.40, BASE)] * 3
    for cfg in (CFG, GateConfig(alpha=0.2)):
        assert gate(run(0.4001, BASE), base_runs=seeds, cfg=cfg).outcome is Outcome.KEEP
        assert gate(run(0.3999, BASE), base_runs=seeds, cfg=cfg).outcome is Outcome.DISCARD
        tie = gate(run(0.40, BASE), base_runs=seeds, cfg=cfg)
        assert tie.outcome is Outcome.INCONCLUSIVE and tie.verdict.metrics["noise_band"] == 0.0
        assert tie.verdict.metrics["score_test"]["t"] == 0.0
    certain = gate(run(0.4001, BASE), base_runs=seeds)
    assert certain.verdict.metrics["score_test"]["t"] is None  # infinite: not a JSON number
    json.dumps(certain.verdict.to_json_dict(), allow_nan=False)


# -- the baseline named in every verdict -------------------------------------------------------


@pytest.mark.parametrize(
    "candidate",
    [run(0.50, BASE), run(0.30, BASE), run(0.41, BASE), run(None, BASE)],
    ids=["keep", "discard", "inconclusive", "error"],
)
def test_every_verdict_names_its_baseline(candidate: dict[str, Any]) -> None:
    d = gate(candidate, source=APPROVED)
    assert d.outcome.value == d.verdict.metrics.get("outcome", d.outcome.value)
    assert d.verdict.metrics["baseline"] == APPROVED
    assert "dead_gates" in d.verdict.metrics and "notes" in d.verdict.metrics


# -- properties --------------------------------------------------------------------------------

STATUS_OF = {Outcome.KEEP: Status.PASS, Outcome.DISCARD: Status.FAIL, Outcome.INCONCLUSIVE: Status.FAIL,
             Outcome.ERROR: Status.ERROR}


@settings(max_examples=60, deadline=None)
@given(inputs)
def test_outcome_and_status_agree_and_blocking_is_empty_exactly_on_pass(kw: dict[str, Any]) -> None:
    d = gate(**kw)
    assert d.verdict.status is STATUS_OF[d.outcome]
    assert (d.verdict.blocking == []) is d.verdict.ok
    assert (d.needs_reruns > 0) <= (d.outcome is Outcome.INCONCLUSIVE)
    assert (d.score is None) is (d.outcome is Outcome.ERROR)
    json.dumps(d.verdict.to_json_dict(), allow_nan=False)  # the store keeps it as strict JSON


@settings(max_examples=40, deadline=None)
@given(inputs, st.floats(0.001, 0.5))
def test_a_higher_score_never_loses_a_keep(kw: dict[str, Any], bump: float) -> None:
    before = gate(**kw)
    if before.outcome is not Outcome.KEEP:
        return
    higher = [{**m, "weighted_f1": m["weighted_f1"] + bump} for m in kw["candidate"]]
    assert gate(**{**kw, "candidate": higher}).outcome is Outcome.KEEP
