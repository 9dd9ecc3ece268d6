"""The morning's confirmation: the night's best on fresh seeds vs the tag's baseline (pure).

The score that won the night's selection is the maximum over many noisy candidates, biased
upwards (the winner's curse). The confirmation re-runs the final best on seeds no decision
used and compares them with the baseline's own seeds (the baseline was never selected on, so
its seeds carry no selection bias): the difference of the means with a two-sided 95 % Welch
interval, each side's own seed variance (a change can change the seed spread; one side with a single
score falls back to the pooled variance: :func:`looper.core.keep.stats.diff_interval`).

- ``confirmed``: the interval's lower end is above 0;
- ``not_confirmed``: it is not (the gain may be noise): a person should look;
- ``nothing``: no fresh run finished (turned off, cut short before the first, or every run failed),
  or the best is the baseline itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from looper.core.keep import stats

CONFIRMED, NOT_CONFIRMED, NOTHING = "confirmed", "not_confirmed", "nothing"
_NAMES = {"weighted_f1": "weighted F1", "macro_f1": "macro F1"}


@dataclass(frozen=True)
class Confirmation:
    status: str  # confirmed | not_confirmed | nothing
    headline: str
    diff: float | None = None
    low: float | None = None
    high: float | None = None
    flagged: bool = False  # a kept change whose gain did not confirm: a person should look


def judge(best: Sequence[float], baseline: Sequence[float], key: str, planned: int,
          why_nothing: str = "", confidence: float = 0.95) -> Confirmation:
    """``best``: the final best's scores on the fresh seeds that finished; ``baseline``: the tag's
    baseline scores; ``planned``: fresh seeds asked for (fewer finished: the words say so)."""
    name = _NAMES.get(key, key)
    if not best or len(best) + len(baseline) < 3 or not baseline:
        why = why_nothing or (f"{len(best)} fresh run(s) and {len(baseline)} baseline run(s) finished; "
                              "an interval needs 3 in all")
        return Confirmation(NOTHING, f"confirmed nothing: {why}")
    iv = stats.diff_interval(best, baseline, confidence)
    seeds = f"{len(best)} fresh seed{'s' if len(best) != 1 else ''}"
    if len(best) < planned:
        seeds += f" (of {planned} planned: cut short)"
    figure = f"{name} {iv.diff:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}] over the baseline on {seeds}"
    if iv.low > 0:
        return Confirmation(CONFIRMED, figure, iv.diff, iv.low, iv.high)
    return Confirmation(NOT_CONFIRMED, f"{figure}: NOT confirmed ({confidence:.0%} interval reaches 0); "
                                       "a person should look before shipping it",
                        iv.diff, iv.low, iv.high, flagged=True)
