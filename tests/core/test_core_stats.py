"""The gate's statistics: exact McNemar, Fisher fallback, Holm, the pooled t-test, bands, intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest, fisher_exact, norm, ttest_ind

from looper.core.keep import stats
from looper.core.keep.stats import ClassCounts

# -- exact McNemar --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lost", "gained", "p"),
    [
        (0, 0, 1.0),  # no discordant pair: nothing to see
        (10, 0, 0.5 ** 10),  # 10 of 10 found -> 0 of 10
        (0, 10, 1.0),  # only gains: a loss is not in question
        (1, 0, 0.5),
        (3, 1, 5 / 16),  # P(X >= 3), X ~ Bin(4, 1/2)
        (6, 6, 0.6128),
    ],
)
def test_mcnemar_table(lost: int, gained: int, p: float) -> None:
    assert stats.mcnemar_exact(lost, gained) == pytest.approx(p, abs=1e-4)


def test_mcnemar_rejects_negative_counts() -> None:
    with pytest.raises(ValueError, match="counts must be >= 0"):
        stats.mcnemar_exact(-1, 2)


@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_is_the_one_sided_binomial_test_on_the_discordant_pairs(lost: int, gained: int) -> None:
    expected = binomtest(lost, lost + gained, 0.5, alternative="greater").pvalue if lost + gained else 1.0
    assert stats.mcnemar_exact(lost, gained) == pytest.approx(expected, rel=1e-12)


@given(st.integers(0, 40), st.integers(0, 40))
def test_more_losses_never_make_a_loss_less_significant(lost: int, gained: int) -> None:
    assert stats.mcnemar_exact(lost + 1, gained) <= stats.mcnemar_exact(lost, gained)
    assert stats.mcnemar_exact(lost, gained + 1) >= stats.mcnemar_exact(lost, gained)


# -- Fisher fallback and counting --------------------------------------------------------------


def test_fisher_fallback_table() -> None:
    assert stats.lost_found_unpaired(10, 10, 0, 10) == pytest.approx(1 / math.comb(20, 10))
    assert stats.lost_found_unpaired(5, 10, 5, 10) > 0.5  # same counts: nothing
    assert stats.lost_found_unpaired(0, 0, 0, 10) == 1.0 and stats.lost_found_unpaired(3, 10, 0, 0) == 1.0
    expected = fisher_exact([[20, 10], [3, 7]], alternative="greater").pvalue
    assert stats.lost_found_unpaired(20, 30, 3, 10) == pytest.approx(expected)
    with pytest.raises(ValueError, match="found counts must lie in"):
        stats.lost_found_unpaired(11, 10, 0, 10)
    with pytest.raises(ValueError, match="found counts must lie in"):
        stats.lost_found_unpaired(1, 10, -1, 10)


def test_paired_counts_pair_run_j_with_run_j_and_leave_extra_runs_out() -> None:
    ref = [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    cand = [[0, 1, 1, 0], [1, 0, 1, 1]]
    c = stats.paired_counts(ref, cand)
    assert c == ClassCounts(ref_found=6, ref_total=8, cand_found=5, cand_total=8, paired=True, runs=2,
                            lost=2, gained=1)
    assert c.drop == pytest.approx(1 / 8)
    assert stats.class_p_value(c) == stats.mcnemar_exact(2, 1)


def test_paired_counts_refuse_what_cannot_be_paired() -> None:
    with pytest.raises(ValueError, match="at least one run"):
        stats.paired_counts([], [[1]])
    with pytest.raises(ValueError, match="different instances"):
        stats.paired_counts([[1, 0]], [[1, 0, 1]])


def test_unpaired_counts_pool_every_run() -> None:
    c = stats.unpaired_counts([10, 9, 10], [0], support=10)
    assert (c.ref_found, c.ref_total, c.cand_found, c.cand_total, c.paired) == (29, 30, 0, 10, False)
    assert c.drop == pytest.approx(29 / 30)
    assert stats.class_p_value(c) == stats.lost_found_unpaired(29, 30, 0, 10)
    assert ClassCounts(0, 0, 0, 0, False).drop == 0.0
    with pytest.raises(ValueError, match="at least one run"):
        stats.unpaired_counts([], [1], support=3)


@given(st.lists(st.lists(st.integers(0, 1), min_size=5, max_size=5), min_size=1, max_size=4))
def test_identical_runs_have_no_discordant_pair(runs: list[list[int]]) -> None:
    c = stats.paired_counts(runs, runs)
    assert c.lost == c.gained == 0 and stats.class_p_value(c) == 1.0 and c.drop == 0.0


# -- Holm ----------------------------------------------------------------------------------------


def holm_reference(p: list[float], alpha: float) -> list[bool]:
    """Holm via adjusted p-values: p_adj(i) = max over j <= i of min(1, (m - j) p_(j)); reject p_adj <= alpha."""
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (m - j) * p[i]))
        adjusted[i] = running
    return [bool(a <= alpha) for a in adjusted]


@settings(max_examples=200)
@given(st.lists(st.one_of(st.floats(0, 1), st.sampled_from([0.0, 0.001, 0.01, 0.0125, 0.025, 0.05, 1.0])),
                max_size=30),
       st.sampled_from([0.01, 0.05, 0.1, 0.5]))
def test_holm_matches_a_reference_implementation(p: list[float], alpha: float) -> None:
    got = stats.holm(p, alpha)
    assert [r.rejected for r in got] == holm_reference(p, alpha)
    assert [r.p for r in got] == p
    ranks = sorted(range(len(p)), key=lambda i: p[i])
    assert [got[i].threshold for i in ranks] == [alpha / (len(p) - k) for k in range(len(p))]


def test_holm_table() -> None:
    # sorted 0.001 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2: stop; 0.04 accepted too
    got = stats.holm([0.04, 0.001, 0.03, 0.01], 0.05)
    assert [r.rejected for r in got] == [False, True, False, True]
    assert [r.threshold for r in got] == pytest.approx([0.05, 0.0125, 0.025, 0.05 / 3])
    assert stats.holm([], 0.05) == []


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, float("nan")])
def test_holm_rejects_a_bad_alpha(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha must be in"):
        stats.holm([0.1], alpha)


# -- the score test --------------------------------------------------------------------------------


def test_pooled_sigma() -> None:
    sigma, df = stats.pooled_sigma([[0.39, 0.40, 0.41], [0.5], []])
    assert sigma == pytest.approx(0.01) and df == 2
    sigma, df = stats.pooled_sigma([[1.0, 3.0], [10.0, 14.0]])
    assert sigma == pytest.approx(math.sqrt((2 + 8) / 2)) and df == 2
    sigma, df = stats.pooled_sigma([[0.4], [0.5]])
    assert math.isnan(sigma) and df == 0
    assert stats.pooled_sigma([[0.4] * 3]) == (0.0, 2)  # identical runs: exactly no spread


scores = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=6)


@pytest.mark.filterwarnings("ignore:Precision loss occurred")  # scipy's reference, on near-equal data
@settings(max_examples=100)
@given(scores, scores)
def test_the_score_test_is_students_t_test(cand: list[float], best: list[float]) -> None:
    sigma, df = stats.pooled_sigma([cand, best])
    t = stats.score_test(cand, best, sigma, df)
    if t.se > 1e-6:
        ref = ttest_ind(cand, best, equal_var=True, alternative="greater")
        assert t.p_better == pytest.approx(ref.pvalue, rel=1e-6, abs=1e-12)
        assert t.p_worse == pytest.approx(1 - ref.pvalue, rel=1e-6, abs=1e-12)


def test_the_score_test_with_one_candidate_run_uses_the_baselines_noise() -> None:
    t = stats.score_test([0.5], [0.39, 0.40, 0.41], 0.01, 2)
    assert t.diff == pytest.approx(0.1) and t.se == pytest.approx(0.01 * math.sqrt(4 / 3))
    assert t.t == pytest.approx(0.1 / t.se) and t.p_better < 0.01 and t.p_worse > 0.99


@pytest.mark.parametrize(
    ("cand", "p_better", "p_worse", "t"),
    [([0.41], 0.0, 1.0, math.inf), ([0.39], 1.0, 0.0, -math.inf), ([0.40], 1.0, 1.0, 0.0)],
)
def test_zero_noise_makes_any_difference_certain(cand: list[float], p_better: float, p_worse: float,
                                                  t: float) -> None:
    got = stats.score_test(cand, [0.40, 0.40], 0.0, 1)
    assert (got.p_better, got.p_worse, got.t, got.se) == (p_better, p_worse, t, 0.0)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([], [0.4], 0.01, 2), "at least one score"),
        (([0.4], [], 0.01, 2), "at least one score"),
        (([0.4], [0.4], 0.01, 0), "must be measured"),
        (([0.4], [0.4], float("nan"), 2), "must be measured"),
        (([0.4], [0.4], -0.1, 2), "must be measured"),
    ],
)
def test_the_score_test_refuses_unmeasured_noise(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        stats.score_test(*args)


def test_the_band_is_where_the_test_turns_significant() -> None:
    b = stats.score_band(0.01, 2, 1, 3, 0.05)
    assert b == pytest.approx(2.919986 * 0.01 * math.sqrt(4 / 3), rel=1e-5)
    # just above the band is significant, just below is not (same runs the band was computed for)
    at = stats.score_test([0.4 + b * 1.0001], [0.39, 0.40, 0.41], 0.01, 2)
    below = stats.score_test([0.4 + b * 0.9999], [0.39, 0.40, 0.41], 0.01, 2)
    assert at.p_better < 0.05 < below.p_better
    with pytest.raises(ValueError, match="a band needs"):
        stats.score_band(0.01, 0, 1, 3, 0.05)
    with pytest.raises(ValueError, match="a band needs"):
        stats.score_band(0.01, 2, 0, 3, 0.05)


@settings(max_examples=200)
@given(st.floats(0.0, 0.2), st.integers(1, 30), st.integers(1, 10), st.integers(1, 10),
       st.sampled_from([0.01, 0.05 / 3, 0.05, 0.1]), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3))
def test_more_seeds_never_widen_the_band(sigma: float, df: int, n_cand: int, n_best: int, alpha: float,
                                         more_df: int, more_cand: int, more_best: int) -> None:
    before = stats.score_band(sigma, df, n_cand, n_best, alpha)
    after = stats.score_band(sigma, df + more_df, n_cand + more_cand, n_best + more_best, alpha)
    assert after <= before + 1e-12


# -- recall intervals ---------------------------------------------------------------------------


def wilson(found: int, total: int, z: float) -> tuple[float, float]:
    p = found / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z / (1 + z * z / total) * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return centre - half, centre + half


@pytest.mark.parametrize(("found", "total"), [(0, 10), (10, 10), (3, 7), (29, 30), (1, 1)])
def test_recall_interval_is_wilsons(found: int, total: int) -> None:
    lo, hi = stats.recall_interval(found, total)
    ref = wilson(found, total, norm.ppf(0.975))
    assert (lo, hi) == pytest.approx((max(0.0, ref[0]), min(1.0, ref[1])), abs=1e-9)
    assert 0.0 <= lo <= found / total <= hi <= 1.0


def test_recall_interval_edges() -> None:
    assert stats.recall_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="found must lie in"):
        stats.recall_interval(4, 3)


@settings(max_examples=200)
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))), st.integers(1, 6),
       st.integers(1, 4), st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_more_seeds_of_the_same_result_never_widen_a_recall_interval(
        fn: tuple[int, int], seeds: int, more: int, confidence: float) -> None:
    found, n = fn
    lo1, hi1 = stats.recall_interval(found * seeds, n * seeds, confidence)
    lo2, hi2 = stats.recall_interval(found * (seeds + more), n * (seeds + more), confidence)
    assert hi2 - lo2 <= hi1 - lo1 + 1e-12


# -- seed overdispersion --------------------------------------------------------------------------


def test_dispersion_of_independent_looking_runs_is_one() -> None:
    assert stats.dispersion([]) == (1.0, 0)
    assert stats.dispersion([[(5, 10)]]) == (1.0, 0)  # one run: nothing replicated
    assert stats.dispersion([[(10, 10), (10, 10)], [(0, 10), (0, 10)]]) == (1.0, 0)  # all or none: no spread
    assert stats.dispersion([[(5, 10), (5, 10), (5, 10)]]) == (1.0, 2)  # less spread than chance: floored at 1
    assert stats.dispersion([[(5, 0), (5, 0)]]) == (1.0, 0)


def test_dispersion_of_a_class_learned_or_missed_as_a_whole() -> None:
    phi, df = stats.dispersion([[(10, 10), (0, 10), (10, 10)]])
    # recalls 1, 0, 1: variance 1/3; pooled p = 2/3: binomial variance (2/9)/10
    assert df == 2 and phi == pytest.approx((1 / 3) / ((2 / 9) / 10))
    phi2, df2 = stats.dispersion([[(10, 10), (0, 10), (10, 10)], [(5, 10), (6, 10), (4, 10)]])
    assert df2 == 4 and phi2 == pytest.approx((2 * (1 / 3) + 2 * 0.01) / (2 * (2 / 9) / 10 + 2 * 0.025))


def test_dispersion_reads_each_instance_where_runs_list_them() -> None:
    # 20 instances of one class over 4 seeds: 8 always found, 8 never, 4 found together in two runs
    # and missed together in two. Their counts 12, 12, 8, 8 look binomial at the pooled rate 1/2
    # (variance 5.33 against 20 x 1/4 = 5: phi 1.07), yet every move is the 4 instances moving
    # as one: against the instances' own variances (4 x 1/3) the counts vary 4 times more, and
    # 4 is what a paired McNemar test on these instances must be deflated by.
    swing = [tuple([1] * 8 + [1] * 4 + [0] * 8)] * 2 + [tuple([1] * 8 + [0] * 12)] * 2
    listed = [(sum(f), 20, f) for f in swing]
    assert stats.dispersion([listed]) == (pytest.approx(4.0), 3)
    assert stats.dispersion([[r[:2] for r in listed]]) == (pytest.approx(16 / 15), 3)  # counts only: binomial
    # runs that list different instance counts, or a sample where one run lacks its list: binomial
    assert stats.dispersion([[listed[0], listed[1], (8, 20, (1,) * 8), listed[3]]])[0] == pytest.approx(16 / 15)
    assert stats.dispersion([[listed[0], listed[1], (8, 20), listed[3]]])[0] == pytest.approx(16 / 15)
    # every instance steady (found in every run or in none): nothing to measure
    assert stats.dispersion([[(12, 20, swing[0])] * 3]) == (1.0, 0)


@given(st.integers(0, 40), st.integers(0, 40), st.sampled_from([1.0, 1.5, 2.0, 4.0, 10.0]))
def test_overdispersion_never_makes_a_loss_more_significant(lost: int, gained: int, phi: float) -> None:
    # deflating moves p towards 1/2: a loss looks less certain (p above 1/2 is never a loss anyway)
    assert min(stats.mcnemar_exact(lost, gained, phi), 0.5) >= min(stats.mcnemar_exact(lost, gained), 0.5) - 1e-12
    if phi == 2.0 and lost % 2 == 0 and gained % 2 == 0:  # whole counts: the binomial tail itself
        assert stats.mcnemar_exact(lost, gained, phi) == pytest.approx(
            stats.mcnemar_exact(lost // 2, gained // 2), rel=1e-9)


def test_overdispersion_deflates_the_fisher_fallback_too() -> None:
    c = ClassCounts(20, 20, 0, 20, False)
    assert stats.class_p_value(c, 4.0) == stats.lost_found_unpaired(5, 5, 0, 5) > stats.class_p_value(c)
    for bad in (0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="dispersion must be >= 1"):
            stats.class_p_value(c, bad)
        with pytest.raises(ValueError, match="dispersion must be >= 1"):
            stats.mcnemar_exact(3, 1, bad)
