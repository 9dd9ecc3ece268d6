"""Intensification rules (looper.core.keep.race) and the morning's confirmation (looper.core.keep.confirm)."""

from __future__ import annotations

import pytest
from scipy.stats import t as scipy_t

from looper.core.keep import confirm as core_confirm
from looper.core.keep import race as core_race
from looper.core.keep import stats
from looper.core.keep.race import Step


@pytest.mark.parametrize(("cap", "expected"), [
    (1, (1,)), (2, (1, 2)), (3, (1, 2, 3)), (4, (1, 2, 4)), (5, (1, 2, 4, 5)), (8, (1, 2, 4, 8)),
    (9, (1, 2, 4, 8, 9)),
])
def test_the_schedule_doubles_up_to_the_cap(cap: int, expected: tuple[int, ...]) -> None:
    assert core_race.schedule(cap) == expected
    assert core_race.looks(cap) == len(expected)


def test_a_cap_below_one_seed_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 seed"):
        core_race.schedule(0)


@pytest.mark.parametrize(("done", "cap", "left"), [(0, 4, 3), (1, 4, 2), (2, 4, 1), (3, 4, 1), (4, 4, 0), (5, 4, 0)])
def test_looks_left(done: int, cap: int, left: int) -> None:
    assert core_race.looks_left(done, cap) == left


@pytest.mark.parametrize(("best", "count", "expected"), [
    ([0, 1, 2], 1, [0]),
    ([0, 1, 2], 3, [0, 1, 2]),
    ([0, 1, 2], 5, [0, 1, 2, 3, 4]),            # beyond the best's seeds: new ones above them
    ([7, 3, 5], 4, [7, 3, 5, 8]),               # the best's own order; new seeds above its highest
    ([0, 0, 1], 3, [0, 1, 2]),                  # a repeated seed counts once
    ([], 2, [10, 11]),                          # the best ran none: from the first seed
    ([0, 1], 0, []),
])
def test_candidate_seeds_follow_the_best(best: list[int], count: int, expected: list[int]) -> None:
    assert core_race.candidate_seeds(best, count, 10) == expected


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match="count"):
        core_race.candidate_seeds([0], -1, 0)
    with pytest.raises(ValueError, match="count"):
        core_race.fresh_seeds([0], -1, 0)


@pytest.mark.parametrize(("best", "wanted", "needs"), [
    ([0, 1, 2], [0, 1], []), ([0], [0, 1, 2], [1, 2]), ([], [4], [4]),
])
def test_the_best_needs_the_seeds_it_never_ran(best: list[int], wanted: list[int], needs: list[int]) -> None:
    assert core_race.best_needs(best, wanted) == needs


@pytest.mark.parametrize(("outcome", "more", "done", "cap", "add", "why"), [
    ("keep", False, 1, 3, 0, "stopped early for success after 1 seed(s)"),
    ("keep", False, 3, 3, 0, "kept after 3 seed(s)"),
    ("discard", False, 2, 4, 0, "stopped early for futility after 2 seed(s)"),
    ("discard", False, 4, 4, 0, "discarded after 4 seed(s)"),
    # a discard stands on 2 seeds while the cap allows them (the low tail of the seed scores)
    ("discard", False, 1, 4, 1, "worse after 1 seed(s), but a discard stands on 2: 1 more (to 2 of at most 4)"),
    ("discard", True, 1, 2, 1, "worse after 1 seed(s), but a discard stands on 2: 1 more (to 2 of at most 2)"),
    ("discard", False, 1, 1, 0, "discarded after 1 seed(s)"),  # a cap of 1: no second seed to ask for
    ("error", False, 1, 4, 0, "ended (error) after 1 seed(s)"),
    ("inconclusive", True, 1, 4, 1, "inconclusive after 1 seed(s): 1 more (to 2 of at most 4)"),
    ("inconclusive", True, 2, 4, 2, "inconclusive after 2 seed(s): 2 more (to 4 of at most 4)"),
    ("inconclusive", True, 2, 3, 1, "inconclusive after 2 seed(s): 1 more (to 3 of at most 3)"),
    ("inconclusive", True, 4, 4, 0, "inconclusive after 4 seed(s) (the cap)"),
    ("inconclusive", False, 1, 4, 0, "inconclusive after 1 seed(s)"),  # the gate says more cannot settle it
])
def test_the_step_rule(outcome: str, more: bool, done: int, cap: int, add: int, why: str) -> None:
    s = core_race.step(outcome, more, done, cap)
    assert s == Step(add, why) and s.stops is (add == 0)


@pytest.mark.parametrize(("need", "outcome", "done", "cap", "add"), [
    (1, "discard", 1, 4, 0),   # one seed may discard when asked for (the last wave's rule)
    (3, "discard", 2, 4, 2),   # three seeds: the look at 2 goes on to 4
    (3, "discard", 2, 2, 0),   # ... unless the cap is reached
    (3, "keep", 1, 4, 0),      # a keep is never held back
])
def test_the_seeds_a_discard_stands_on_are_a_parameter(need: int, outcome: str, done: int, cap: int, add: int) -> None:
    assert core_race.step(outcome, False, done, cap, discard_seeds=need).add == add


@pytest.mark.parametrize(("cap", "shares"), [
    (1, {1: 1.0}), (2, {1: 1 / 3, 2: 2 / 3}), (4, {1: 1 / 7, 2: 2 / 7, 4: 4 / 7}),
    (5, {1: 1 / 12, 2: 2 / 12, 4: 4 / 12, 5: 5 / 12}), (8, {1: 1 / 15, 2: 2 / 15, 4: 4 / 15, 8: 8 / 15}),
])
def test_alpha_is_shared_over_the_looks_by_their_seeds(cap: int, shares: dict[int, float]) -> None:
    got = {n: core_race.alpha_share(n, cap) for n in core_race.schedule(cap)}
    assert got == pytest.approx(shares)
    assert sum(got.values()) == pytest.approx(1.0)  # the looks together spend alpha, no more


@pytest.mark.parametrize(("done", "cap"), [(3, 4), (0, 2), (5, 4)])
def test_a_share_off_the_schedule_is_refused(done: int, cap: int) -> None:
    with pytest.raises(ValueError, match="no look after"):
        core_race.alpha_share(done, cap)


@pytest.mark.parametrize(("used", "count", "expected"), [
    ([0, 1, 2], 3, [5, 6, 7]), ([3, 4, 9], 2, [10, 11]), ([], 3, [5, 6, 7]), ([1], 2, [5, 6]), ([0], 0, []),
])
def test_fresh_seeds_are_above_every_used_seed(used: list[int], count: int, expected: list[int]) -> None:
    assert core_race.fresh_seeds(used, count, 5) == expected


# -- one race: the rules as the loop and the benches drive them ---------------------------------

KEEP, DISCARD, INC = core_race.KEEP, core_race.DISCARD, core_race.INCONCLUSIVE


@pytest.mark.parametrize(("cap", "discard_seeds", "looks", "batches", "stops_with"), [
    # the best ran seeds 0-2; a challenger inconclusive at every look runs 1, 2, then 4 seeds, and the
    # best gains seed 3 in the last batch, before the challenger runs it
    (4, 2, [([0, 1, 2], INC, True), ([0, 1, 2], INC, True), ([0, 1, 2], INC, True)],
     [([], [0]), ([], [1]), ([3], [2, 3])], "inconclusive after 4 seed(s) (the cap)"),
    # a keep stops early for success
    (4, 2, [([0, 1, 2], INC, True), ([0, 1, 2], KEEP, False)], [([], [0]), ([], [1])],
     "stopped early for success after 2 seed(s)"),
    # a discard on one seed goes on to the next batch; on two it stops for futility
    (4, 2, [([0, 1, 2], DISCARD, False), ([0, 1, 2], DISCARD, False)], [([], [0]), ([], [1])],
     "stopped early for futility after 2 seed(s)"),
    # with discard_seeds = 1, one seed is enough to discard
    (4, 1, [([0, 1, 2], DISCARD, False)], [([], [0])], "stopped early for futility after 1 seed(s)"),
    # an inconclusive that more seeds cannot settle ends where it stands
    (4, 2, [([0, 1, 2], INC, False)], [([], [0])], "inconclusive after 1 seed(s)"),
    # a best that gained seeds 3 and 4 meanwhile (another worker's race) is followed: nothing to gain
    (5, 2, [([0, 1, 2], INC, True), ([0, 1, 2, 3, 4], INC, True), ([0, 1, 2, 3, 4], INC, True),
            ([0, 1, 2, 3, 4], INC, True)],
     [([], [0]), ([], [1]), ([], [2, 3]), ([], [4])], "inconclusive after 5 seed(s) (the cap)"),
    # a best with no seeds yet: the challenger's seeds start at first_seed, each gained by the best first
    (2, 2, [([], INC, True), ([7], INC, True)], [([7], [7]), ([8], [8])], "inconclusive after 2 seed(s) (the cap)"),
])
def test_a_race_runs_the_schedule_on_the_bests_seeds_and_stops_by_the_step_rule(
        cap: int, discard_seeds: int, looks: list[tuple[list[int], str, bool]],
        batches: list[tuple[list[int], list[int]]], stops_with: str) -> None:
    race = core_race.Race(cap, first_seed=7, discard_seeds=discard_seeds)
    assert race.looks == core_race.looks(cap)
    for i, ((best_seeds, outcome, more), (gain, run)) in enumerate(zip(looks, batches, strict=True)):
        batch = race.batch(best_seeds)
        assert (batch.best, batch.candidate) == (gain, run), i
        for seed in batch.candidate:
            race.ran(seed)
        assert race.share == core_race.alpha_share(len(race.seeds), cap)
        assert race.reruns_left == cap - len(race.seeds)
        st = race.look(outcome, more)
        assert st.stops == (i == len(looks) - 1), (i, st)
    assert st.why == stops_with
    assert race.seeds == [s for _, run in batches for s in run]


def test_a_race_refuses_a_cap_below_one_seed() -> None:
    with pytest.raises(ValueError, match="at least 1 seed"):
        core_race.Race(0, first_seed=0)


@pytest.mark.parametrize(("cap", "slots", "expected"), [
    (4, 1, (1, 2, 4)),       # one slot: today's schedule
    (4, 2, (2, 4)),          # the demo (seed_jobs 2, noise_reruns 3): no look at one seed alone
    (8, 2, (2, 4, 8)),
    (5, 2, (2, 4, 5)),       # the cap ends the last batch short of a whole slot
    (8, 3, (3, 6, 8)),       # 2 x 3 = 6 is whole slots; then the cap
    (9, 4, (4, 8, 9)),
    (7, 4, (4, 7)),          # 2 x 4 = 8 is past the cap
    (2, 4, (2,)),            # more slots than seeds: one look at the cap
    (1, 2, (1,)),
    (12, 5, (5, 10, 12)),
    (20, 3, (3, 6, 12, 20)),  # 2 x 6 = 12 is whole slots (4 of 3)
    (16, 6, (6, 12, 16)),
])
def test_the_first_look_fills_the_slots_and_every_batch_after_it_is_whole_slots(
        cap: int, slots: int, expected: tuple[int, ...]) -> None:
    plan = core_race.schedule(cap, slots)
    assert plan == expected and core_race.looks(cap, slots) == len(expected)
    assert all((b - a) % slots == 0 for a, b in zip((0, *plan), plan[:-1], strict=False))  # whole slots but the last
    assert sum(core_race.alpha_share(n, cap, slots) for n in plan) == pytest.approx(1.0)
    assert core_race.looks_left(0, cap, slots) == len(expected)


def test_slots_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 slot"):
        core_race.schedule(4, 0)
    with pytest.raises(ValueError, match="at least 1 slot"):
        core_race.Race(4, first_seed=0, slots=0)


@pytest.mark.parametrize(("outcome", "more", "done", "add", "why"), [
    (DISCARD, False, 2, 2, "worse after 2 seed(s), but a discard stands on 3: 2 more (to 4 of at most 4)"),
    (DISCARD, False, 4, 0, "discarded after 4 seed(s)"),
    (INC, True, 2, 2, "inconclusive after 2 seed(s): 2 more (to 4 of at most 4)"),
    (KEEP, False, 2, 0, "stopped early for success after 2 seed(s)"),
    (INC, True, 4, 0, "inconclusive after 4 seed(s) (the cap)"),
])
def test_the_step_rule_with_two_slots(outcome: str, more: bool, done: int, add: int, why: str) -> None:
    assert core_race.step(outcome, more, done, 4, slots=2) == Step(add, why)


@pytest.mark.parametrize(("done", "cap", "slots", "add"), [
    (2, 8, 2, 2),   # the first look's seeds never discard alone
    (4, 8, 2, 0),   # the second look may
    (3, 8, 3, 3),
    (2, 2, 2, 0),   # the first look is the cap: nothing more to ask
    (1, 4, 1, 1),   # one slot: discard_seeds (2) as before
    (2, 4, 1, 0),
])
def test_a_discard_waits_past_the_first_look(done: int, cap: int, slots: int, add: int) -> None:
    assert core_race.step(DISCARD, False, done, cap, slots=slots).add == add


def test_a_race_with_two_slots_runs_two_seeds_at_its_first_look() -> None:
    race = core_race.Race(4, first_seed=7, slots=2)
    assert race.looks == 2
    batch = race.batch([0, 1, 2])
    assert (batch.best, batch.candidate) == ([], [0, 1])
    for seed in batch.candidate:
        race.ran(seed)
    assert race.share == pytest.approx(2 / 6)
    assert race.look(INC, True) == Step(2, "inconclusive after 2 seed(s): 2 more (to 4 of at most 4)")
    batch = race.batch([0, 1, 2])
    assert (batch.best, batch.candidate) == ([3], [2, 3])
    for seed in batch.candidate:
        race.ran(seed)
    assert race.share == pytest.approx(4 / 6)
    assert race.look(INC, True).stops and race.reruns_left == 0


# -- the confirmation ------------------------------------------------------------------------


def _interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """The 95 % Welch interval of mean(a) - mean(b), from its definition (Welch-Satterthwaite df)."""
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = float(scipy_t.ppf(0.975, df)) * (va + vb) ** 0.5
    return ma - mb, ma - mb - half, ma - mb + half


def test_a_gain_that_holds_on_fresh_seeds_is_confirmed_with_its_interval() -> None:
    best, base = [0.52, 0.50, 0.51], [0.40, 0.41, 0.42]
    c = core_confirm.judge(best, base, "weighted_f1", 3)
    diff, low, high = _interval(best, base)
    assert c.status == core_confirm.CONFIRMED and not c.flagged
    assert (c.diff, c.low, c.high) == pytest.approx((diff, low, high)) and low > 0
    assert c.headline == f"weighted F1 {diff:+.3f} [{low:+.3f}, {high:+.3f}] over the baseline on 3 fresh seeds"


def test_a_calm_change_against_a_noisy_baseline_is_weighed_by_each_sides_own_spread() -> None:
    """The demo's regime (bench/RESULTS.md): LR0 0.003 spreads its seeds a third as much as the
    baseline's LR0 0.01. Pooling the calm 3 fresh seeds with the noisy 5 baseline seeds (the demo's
    night of 2026-12-03) overstates the difference's noise: the pooled interval reaches 0 where each
    side's own spread confirms."""
    best, base = [0.884, 0.888, 0.882], [0.862, 0.850, 0.885, 0.869, 0.871]
    c = core_confirm.judge(best, base, "weighted_f1", 3)
    diff, low, high = _interval(best, base)
    assert (c.diff, c.low, c.high) == pytest.approx((diff, low, high))
    assert c.status == core_confirm.CONFIRMED and low > 0
    ma, mb = sum(best) / 3, sum(base) / 5
    ss = sum((x - ma) ** 2 for x in best) + sum((x - mb) ** 2 for x in base)
    pooled_low = (ma - mb) - float(scipy_t.ppf(0.975, 6)) * (ss / 6) ** 0.5 * (1 / 3 + 1 / 5) ** 0.5
    assert pooled_low < 0  # what the pooled interval would have said: not confirmed


def test_welch_interval_matches_scipy_and_falls_back_to_pooled_with_one_seed_a_side() -> None:
    from scipy import stats as scipy_stats

    a, b = [0.5, 0.52, 0.55], [0.4, 0.41, 0.42, 0.3]
    iv = stats.diff_interval(a, b)
    want = scipy_stats.ttest_ind(a, b, equal_var=False)
    assert iv.method == "welch" and iv.df == pytest.approx(want.df)
    assert (iv.low, iv.high) == pytest.approx(tuple(want.confidence_interval(0.95)))
    one = stats.diff_interval([0.6], [0.4, 0.41, 0.42])  # one fresh seed: no spread of its own
    assert one.method == "pooled" and one.df == 2
    half = float(scipy_t.ppf(0.975, 2)) * 0.01 * (1 + 1 / 3) ** 0.5
    assert (one.low, one.high) == pytest.approx((0.19 - half, 0.19 + half))
    exact = stats.diff_interval([0.5, 0.5], [0.4, 0.4])  # both sides reproduce exactly
    assert exact.method == "welch" and exact.df == 2 and exact.low == exact.high == pytest.approx(0.1)


def test_a_gain_that_does_not_hold_is_flagged_for_a_person() -> None:
    c = core_confirm.judge([0.42, 0.39, 0.41], [0.40, 0.41, 0.42], "macro_f1", 3)
    assert c.status == core_confirm.NOT_CONFIRMED and c.flagged and c.low is not None and c.low <= 0
    assert c.headline.startswith("macro F1 ") and "NOT confirmed" in c.headline and "a person should look" in c.headline


def test_a_cut_short_confirmation_says_how_many_seeds_it_had() -> None:
    c = core_confirm.judge([0.60], [0.40, 0.41, 0.42], "weighted_f1", 3)
    assert "on 1 fresh seed (of 3 planned: cut short)" in c.headline


@pytest.mark.parametrize(("best", "base", "why", "words"), [
    ([], [0.4, 0.41], "", "0 fresh run(s) and 2 baseline run(s) finished"),
    ([0.5], [0.4], "", "1 fresh run(s) and 1 baseline run(s) finished"),
    ([0.5, 0.6], [], "", "2 fresh run(s) and 0 baseline run(s)"),
    ([], [0.4, 0.41], "the night was stopped by a signal", "the night was stopped by a signal"),
])
def test_nothing_confirmed_says_why(best: list[float], base: list[float], why: str, words: str) -> None:
    c = core_confirm.judge(best, base, "weighted_f1", 3, why_nothing=why)
    assert c.status == core_confirm.NOTHING and c.diff is None and not c.flagged
    assert c.headline.startswith("confirmed nothing: ") and words in c.headline
