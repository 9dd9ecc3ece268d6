"""looper.core.keep.transfer: holds / shrinks / reverses / nothing, read from the interval at the longer budget."""

from __future__ import annotations

import pytest

from looper.core.keep import stats
from looper.core.keep.transfer import HOLDS, NOTHING, REVERSES, SHRINKS, default_steps, judge

BASE = [0.60, 0.61, 0.59, 0.60]


@pytest.mark.parametrize(("best", "night_low", "status", "words"), [
    ([0.70, 0.71, 0.69, 0.70], 0.05, HOLDS, "holds at 845 steps (5x the night's 169): weighted F1 +0.100 ["),
    ([0.70, 0.71, 0.69, 0.70], None, HOLDS, "holds at 845"),  # no night interval to compare with: above 0 holds
    ([0.70, 0.71, 0.69, 0.70], 0.20, SHRINKS, "still a gain, smaller than the night's (its interval starts at +0.200)"),
    ([0.61, 0.59, 0.62, 0.58], 0.05, SHRINKS, "the gain cannot be told from 0 when trained longer"),
    ([0.50, 0.51, 0.49, 0.50], 0.05, REVERSES, "REVERSES at 845 steps"),
])
def test_judge(best: list[float], night_low: float | None, status: str, words: str) -> None:
    t = judge(best, BASE, "weighted_f1", 845, 169, night_low)
    iv = stats.diff_interval(best, BASE)
    assert t.status == status and words in t.headline
    assert (t.diff, t.low, t.high) == (iv.diff, iv.low, iv.high)
    assert t.flagged == (status != HOLDS)
    assert "on 4 + 4 fresh seeds" in t.headline


@pytest.mark.parametrize(("best", "base", "why", "words"), [
    ([0.7], BASE, "", "1 run(s) of the best and 4 of the baseline finished at 845 steps"),
    (BASE, [0.6], "", "needs 2 a side"),
    ([], [], "the night was cut short", "transfer check: nothing: the night was cut short"),
])
def test_too_few_runs_is_nothing_never_a_verdict(best: list[float], base: list[float], why: str, words: str) -> None:
    t = judge(best, base, "weighted_f1", 845, 169, 0.05, why_nothing=why)
    assert t.status == NOTHING and words in t.headline and t.diff is None and not t.flagged


def test_without_a_night_step_budget_the_words_name_only_the_steps() -> None:
    t = judge([0.7, 0.71], [0.6, 0.61], "map50", 500, 0, None)
    assert t.headline.startswith("holds at 500 steps: map50 +0.100")


@pytest.mark.parametrize(("night", "scale", "want"), [(169, "demo", 338), (40, "tiny", 120), (100, "full", 1000),
                                                      (100, "other", 500), (0, "demo", 0)])
def test_default_steps(night: int, scale: str, want: int) -> None:
    assert default_steps(night, scale) == want
