"""The gate's score test paired by seed: the paired t where it is the more powerful, the pooled t otherwise."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy.stats import t as scipy_t
from scipy.stats import ttest_rel

from looper.core.keep import stats
from looper.core.keep.gate import GateConfig, GateInput, decide
from looper.core.keep.score import PAIRED_TEST, SCORE_TEST, choose_test
from looper.core.verdicts.verdict import Outcome

BASE = {"supply_diffuser": 0.9, "return_grille": 0.6}


def run(score: float, found: list[int] | None = None) -> dict:
    classes = {name: {"tp": round(r * 10), "fp": 1, "fn": 10 - round(r * 10), "support": 10, "recall": r}
               for name, r in BASE.items()}
    if found is not None:
        classes["return_grille"] = {"tp": sum(found), "fp": 1, "fn": len(found) - sum(found), "support": len(found),
                                    "recall": sum(found) / len(found), "found": found}
    return {"pages": 6, "predictions": 100, "weighted_f1": score, "classes": classes}


# seed effects shared by both sides (same seed = same data order and initial weights): large
SEED_EFFECT = {0: -0.05, 1: 0.04, 2: 0.01, 3: -0.02}


def runs(mean: float, seeds: list[int], jitter: float = 0.0) -> list[dict]:
    return [run(mean + SEED_EFFECT[s] + (jitter if i % 2 else -jitter)) for i, s in enumerate(seeds)]


def gate(cand: list[dict], cand_seeds: list[int], base: list[dict], base_seeds: list[int], *,
         best: list[dict] | None = None, best_seeds: list[int] | None = None, looks: int | None = 3,
         reruns_left: int = 0, simpler: bool = False, share: float | None = None, mode: str = "auto"):
    return decide(GateInput(cand, best or [], base[0], "tag-start", candidate_simpler=simpler, baseline_runs=base,
                            candidate_seeds=cand_seeds, best_seeds=best_seeds or [], baseline_seeds=base_seeds),
                  GateConfig(score_test=mode), reruns_left, looks=looks, share=share)


def test_a_gain_hidden_by_the_seed_spread_is_kept_by_the_paired_test() -> None:
    base = runs(0.40, [0, 1, 2])
    cand = runs(0.43, [0, 1, 2], jitter=0.002)
    d = gate(cand, [0, 1, 2], base, [0, 1, 2])
    m = d.verdict.metrics
    assert d.outcome is Outcome.KEEP and m["score_test_used"] == PAIRED_TEST
    assert m["paired_seeds"] == [0, 1, 2] and m["score_test_choice"].startswith("paired: its band")
    diffs = [c["weighted_f1"] - b["weighted_f1"] for c, b in zip(cand, base, strict=True)]
    assert m["paired_test"]["p_better"] == pytest.approx(
        ttest_rel([c["weighted_f1"] for c in cand], [b["weighted_f1"] for b in base], alternative="greater").pvalue)
    assert m["paired_test"]["band"] == pytest.approx(
        scipy_t.ppf(1 - 0.05 / 3 / 2, 2) * statistics.stdev(diffs) / math.sqrt(3))  # half the look: two tests
    assert m["paired_test"]["correlation"] > 0.9
    assert m["score_test_alpha"] == pytest.approx(0.05 / 3 / 2)  # each of the two tests at half the look's alpha
    # the pooled test alone would not have kept it: the seeds spread 0.045
    assert m["score_test"]["p_better"] > 0.05 / 3


def test_without_seeds_the_pooled_test_decides_as_before() -> None:
    base = runs(0.40, [0, 1, 2])
    cand = runs(0.43, [0, 1, 2], jitter=0.002)
    d = gate(cand, [], base, [0, 1, 2], reruns_left=0)
    m = d.verdict.metrics
    assert m["score_test_used"] == SCORE_TEST and m["paired_seeds"] == [] and "paired_test" not in m
    assert m["score_test_alpha"] == pytest.approx(0.05 / 3)  # one test: the whole look's alpha
    assert m["score_test_choice"] == "pooled: 0 seed(s) both ran, a paired test needs 2"
    assert d.outcome is Outcome.INCONCLUSIVE


def test_uncorrelated_pairs_leave_the_pooled_test_in_charge() -> None:
    base = [run(0.40), run(0.45), run(0.35)]
    cand = [run(0.46), run(0.36), run(0.44)]  # negatively correlated with the baseline's seeds
    d = gate(cand, [0, 1, 2], base, [0, 1, 2])
    m = d.verdict.metrics
    assert m["score_test_used"] == SCORE_TEST and m["score_test_choice"].startswith("pooled: its band")
    assert m["paired_test"]["correlation"] < 0


def test_one_pair_is_not_enough_for_a_paired_test() -> None:
    d = gate(runs(0.43, [0]), [0], runs(0.40, [0, 1, 2]), [0, 1, 2])
    assert "paired_test" not in d.verdict.metrics and d.verdict.metrics["paired_seeds"] == [0]


def test_pairs_are_matched_by_seed_not_by_position() -> None:
    base = runs(0.40, [0, 1, 2])
    cand = runs(0.43, [2, 0], jitter=0.001)  # ran seed 2 first
    d = gate(cand, [2, 0], base, [0, 1, 2])
    m = d.verdict.metrics
    assert m["paired_seeds"] == [2, 0]
    assert m["paired_test"]["diff"] == pytest.approx(0.03)


def test_a_kept_best_is_paired_on_its_own_seeds() -> None:
    base = runs(0.40, [0, 1, 2])
    best = runs(0.45, [0, 1, 2, 3])
    cand = runs(0.42, [0, 1, 2, 3], jitter=0.001)  # worse than the best by 0.03 on every seed
    d = gate(cand, [0, 1, 2, 3], base, [0, 1, 2], best=best, best_seeds=[0, 1, 2, 3])
    assert d.outcome is Outcome.DISCARD and PAIRED_TEST in d.verdict.blocking[0]
    assert d.verdict.metrics["paired_seeds"] == [0, 1, 2, 3]


def test_one_best_run_and_no_baseline_seeds_leave_the_score_unjudged() -> None:
    # an approved baseline (one METRICS.json, no seeds) is the best: one pair at most, no noise measured
    one = run(0.40)
    d = decide(GateInput(runs(0.45, [0, 1], jitter=0.001), [], one, "approved:x.json", candidate_seeds=[0, 1]),
               GateConfig(), 0, looks=2)
    m = d.verdict.metrics
    assert d.outcome is Outcome.INCONCLUSIVE and m["noise_measured"] is False and m["paired_seeds"] == []
    assert "cannot be judged" in d.verdict.blocking[0]


def test_class_gates_pair_the_seeds_both_ran() -> None:
    base = [run(0.40, found=[1] * 10), run(0.41, found=[1] * 10), run(0.42, found=[1] * 9 + [0])]
    cand = [run(0.43, found=[1] * 9 + [0]), run(0.44, found=[1] * 10)]  # seeds 2 and 0
    d = gate(cand, [2, 0], base, [0, 1, 2])
    row = next(t for t in d.verdict.metrics["class_tests"] if t["class"] == "return_grille")
    # seed 2 meets seed 2 (same instance missed on both), seed 0 meets seed 0: nothing lost
    assert (row["lost"], row["gained"], row["paired_runs"]) == (0, 0, 2)


def test_looks_split_alpha_per_batch() -> None:
    d = gate(runs(0.43, [0]), [0], runs(0.40, [0, 1, 2]), [0, 1, 2], looks=2, reruns_left=2)
    assert d.verdict.metrics["looks"] == 2 and d.verdict.metrics["alpha_per_look"] == pytest.approx(0.025)
    d = gate(runs(0.43, [0]), [0], runs(0.40, [0, 1, 2]), [0, 1, 2], looks=None, reruns_left=2)
    assert d.verdict.metrics["looks"] == 3


@pytest.mark.parametrize("share", [1 / 7, 4 / 7, 1.0])
def test_a_look_spends_its_share_of_alpha(share: float) -> None:
    d = gate(runs(0.43, [0]), [0], runs(0.40, [0, 1, 2]), [0, 1, 2], looks=3, reruns_left=3, share=share)
    m = d.verdict.metrics
    assert m["alpha_per_look"] == pytest.approx(0.05 * share)
    assert (m.get("alpha_share") == pytest.approx(share)) if share < 1 else "alpha_share" not in m
    assert any("in proportion to their seeds" in n for n in m["notes"]) is (share < 1)


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5])
def test_a_share_outside_0_1_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share of alpha"):
        gate(runs(0.43, [0]), [0], runs(0.40, [0, 1, 2]), [0, 1, 2], looks=3, reruns_left=3, share=share)


def test_a_larger_share_decides_what_a_smaller_one_cannot() -> None:
    # the same runs: at 1/15 of alpha inside the band, at 8/15 better (the share moves the threshold alone)
    base, cand = runs(0.400, [0, 1, 2, 3]), runs(0.412, [0, 1, 2, 3], jitter=0.004)
    small = gate(cand, [0, 1, 2, 3], base, [0, 1, 2, 3], looks=4, reruns_left=4, share=1 / 15)
    large = gate(cand, [0, 1, 2, 3], base, [0, 1, 2, 3], looks=4, reruns_left=4, share=8 / 15)
    assert small.outcome is Outcome.INCONCLUSIVE and large.outcome is Outcome.KEEP


@pytest.mark.parametrize(("pooled", "paired", "pairs", "corr", "which", "words"), [
    (None, None, 0, None, "pooled", "unmeasured"),
    (0.02, None, 1, None, "pooled", "pooled: 1 seed(s) both ran, a paired test needs 2"),
    (None, 0.03, 2, None, "paired", "paired: 2 seeds both ran (0.0300 band); the pooled noise is unmeasured"),
    (0.05, 0.01, 3, 0.9, "paired", "paired: its band 0.0100 on 3 seeds both ran, correlation +0.90 is narrower "
                                   "than the pooled band 0.0500"),
    (0.01, 0.05, 3, -0.2, "pooled", "pooled: its band 0.0100 is not wider than the paired band 0.0500 on 3 seeds "
                                    "both ran, correlation -0.20"),
    (0.01, 0.01, 2, None, "pooled", "pooled: its band 0.0100 is not wider than the paired band 0.0100 on 2 seeds "
                                    "both ran"),
])
def test_the_choice_of_test_is_a_stated_rule(pooled, paired, pairs, corr, which, words) -> None:
    assert choose_test(pooled, paired, pairs, corr) == (which, words)


@pytest.mark.parametrize(("mode", "pooled", "paired", "pairs", "corr", "which", "words"), [
    ("pooled", 0.05, 0.01, 3, 0.9, "pooled", 'pooled: fixed by [gate] score_test = "pooled" (band 0.0500); the paired '
                                             "band 0.0100 on 3 seeds both ran, correlation +0.90, for information"),
    ("pooled", 0.02, None, 1, None, "pooled", 'pooled: fixed by [gate] score_test = "pooled" (band 0.0200)'),
    ("pooled", None, None, 0, None, "pooled", "unmeasured"),
    ("paired", 0.01, 0.05, 3, -0.2, "paired", 'paired: fixed by [gate] score_test = "paired" (band 0.0500 on 3 seeds '
                                              "both ran, correlation -0.20)"),
    ("paired", 0.02, None, 1, None, "pooled", "pooled: 1 seed(s) both ran, a paired test needs 2"),
    ("paired", None, None, 0, None, "pooled", "unmeasured"),
])
def test_a_fixed_score_test_is_used_whatever_the_bands_say(mode, pooled, paired, pairs, corr, which, words) -> None:
    assert choose_test(pooled, paired, pairs, corr, mode) == (which, words)


def test_a_fixed_pooled_test_gets_the_whole_alpha_and_reports_the_pairing() -> None:
    base = runs(0.40, [0, 1, 2])
    cand = runs(0.43, [0, 1, 2], jitter=0.002)  # the paired test would keep this; the pooled cannot
    auto = gate(cand, [0, 1, 2], base, [0, 1, 2])
    fixed = gate(cand, [0, 1, 2], base, [0, 1, 2], mode="pooled")
    m = fixed.verdict.metrics
    assert auto.outcome is Outcome.KEEP and fixed.outcome is Outcome.INCONCLUSIVE
    assert m["score_test_used"] == SCORE_TEST and m["score_test_alpha"] == pytest.approx(0.05 / 3)  # not halved
    assert m["paired_test"]["correlation"] > 0.9 and m["score_test_choice"].startswith('pooled: fixed by')
    assert not any("two score tests to choose from" in n for n in m["notes"])


def test_the_whole_alpha_keeps_what_half_of_it_cannot() -> None:
    # uncorrelated pairs (the pooled test is the better one either way): the pooled p lies between
    # half the look's alpha and the whole of it, so only the fixed test (whole alpha) keeps
    base = [run(0.400), run(0.410), run(0.390)]
    cand = [run(0.416), run(0.411), run(0.421)]
    auto = gate(cand, [0, 1, 2], base, [0, 1, 2], looks=1)
    fixed = gate(cand, [0, 1, 2], base, [0, 1, 2], looks=1, mode="pooled")
    p = auto.verdict.metrics["score_test"]["p_better"]
    assert 0.025 < p < 0.05
    assert auto.verdict.metrics["score_test_alpha"] == pytest.approx(0.025) and auto.outcome is Outcome.INCONCLUSIVE
    assert fixed.verdict.metrics["score_test_alpha"] == pytest.approx(0.05) and fixed.outcome is Outcome.KEEP


def test_a_fixed_paired_test_decides_on_two_pairs_even_where_its_band_is_wider() -> None:
    base = [run(0.40), run(0.45), run(0.35)]
    cand = [run(0.46), run(0.36), run(0.44)]  # negatively correlated: auto picks the pooled test
    d = gate(cand, [0, 1, 2], base, [0, 1, 2], mode="paired")
    m = d.verdict.metrics
    auto = gate(cand, [0, 1, 2], base, [0, 1, 2]).verdict.metrics  # the same runs: the paired band is the wider
    assert auto["score_test_used"] == SCORE_TEST and auto["score_test_choice"].startswith("pooled: its band")
    assert m["score_test_used"] == PAIRED_TEST and m["score_test_alpha"] == pytest.approx(0.05 / 3)
    assert m["score_test_choice"].startswith('paired: fixed by [gate] score_test = "paired"')
    one = gate(runs(0.43, [0]), [0], runs(0.40, [0, 1, 2]), [0, 1, 2], mode="paired")  # one pair: pooled decides
    assert one.verdict.metrics["score_test_used"] == SCORE_TEST


def test_an_unknown_score_test_is_refused() -> None:
    with pytest.raises(ValueError, match="gate.score_test must be one of auto, pooled, paired, got 'best'"):
        GateConfig(score_test="best")


# -- stats -----------------------------------------------------------------------------------


def test_paired_score_test_matches_scipy() -> None:
    c, b = [0.45, 0.50, 0.41, 0.47], [0.40, 0.46, 0.38, 0.45]
    p = stats.paired_score_test(c, b)
    assert p.pairs == 4 and p.df == 3
    assert p.p_better == pytest.approx(ttest_rel(c, b, alternative="greater").pvalue)
    assert p.p_worse == pytest.approx(ttest_rel(c, b, alternative="less").pvalue)
    assert p.correlation == pytest.approx(statistics.correlation(c, b))


@pytest.mark.parametrize(("c", "b", "better", "worse", "t"), [
    ([0.5, 0.6], [0.4, 0.5], 0.0, 1.0, math.inf),
    ([0.4, 0.5], [0.5, 0.6], 1.0, 0.0, -math.inf),
    ([0.5, 0.6], [0.5, 0.6], 1.0, 1.0, 0.0),
])
def test_a_paired_test_without_spread_is_certain_or_a_tie(c, b, better, worse, t) -> None:
    p = stats.paired_score_test(c, b)
    assert (p.p_better, p.p_worse, p.t, p.correlation) == (better, worse, t, None)


def test_no_correlation_without_spread_on_a_side() -> None:
    assert stats.paired_score_test([0.5, 0.5, 0.5], [0.4, 0.5, 0.6]).correlation is None


@pytest.mark.parametrize(("c", "b"), [([0.5], [0.4]), ([0.5, 0.6], [0.4])])
def test_a_paired_test_needs_two_equal_pairs(c, b) -> None:
    with pytest.raises(ValueError, match="2 pairs"):
        stats.paired_score_test(c, b)


def test_paired_band() -> None:
    assert stats.paired_band(0.01, 4, 0.05) == pytest.approx(scipy_t.ppf(0.95, 3) * 0.01 / 2)
    with pytest.raises(ValueError, match="2 pairs"):
        stats.paired_band(0.01, 1, 0.05)


def test_diff_interval_and_its_refusals() -> None:
    iv = stats.diff_interval([0.5, 0.52], [0.4, 0.41, 0.42])
    assert iv.method == "welch" and iv.low < iv.diff < iv.high and iv.diff == pytest.approx(0.1)
    with pytest.raises(ValueError, match="3 in all"):
        stats.diff_interval([0.5], [0.4])
    with pytest.raises(ValueError, match="confidence"):
        stats.diff_interval([0.5, 0.6], [0.4], confidence=1.0)
