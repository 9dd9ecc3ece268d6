"""The transfer check (pure): does the night's confirmed gain hold when trained longer?

Every decision of a night is made at its step budget (169 steps a run on the demo preset). A change
that wins there (a lower learning rate, say) can lose at the training a person will actually run. The
check trains the confirmed best and the baseline each at a longer step budget on fresh seeds and
compares them with the same two-sided 95 % Welch interval as the confirmation
(:func:`looper.core.keep.stats.diff_interval`). The words, read against the night's confirmed gain:

- ``holds``: the interval at the longer budget is above 0 and reaches the night's lower bound (not
  shown smaller than the gain the night confirmed);
- ``shrinks``: above 0 but entirely below the night's lower bound (a gain, shown smaller), or the
  interval reaches 0 (the gain cannot be told from nothing at the longer budget);
- ``reverses``: the interval is below 0 (the baseline is better at the longer budget);
- ``nothing``: the check did not run or too few runs finished for an interval (never a verdict).

Anything but ``holds`` is flagged: a person is told before shipping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from looper.core.keep import stats

HOLDS, SHRINKS, REVERSES, NOTHING = "holds", "shrinks", "reverses", "nothing"
#: the default longer budget, as a multiple of the night's step budget, per data preset
MULTIPLE = {"tiny": 3, "demo": 2, "full": 10}  # demo: 2 keeps a demo night with the check under 30 min on 2 cores
_NAMES = {"weighted_f1": "weighted F1", "macro_f1": "macro F1"}


@dataclass(frozen=True)
class Transfer:
    status: str  # holds | shrinks | reverses | nothing
    headline: str
    diff: float | None = None
    low: float | None = None
    high: float | None = None
    flagged: bool = False


def default_steps(night_steps: int, scale: str) -> int:
    """The longer step budget when ``[confirm] transfer_steps`` is not set: a multiple of the night's
    (0 when the night has no step budget: wall-clock runs cannot be made comparably longer)."""
    return night_steps * MULTIPLE.get(scale, 5) if night_steps > 0 else 0


def judge(best: Sequence[float], baseline: Sequence[float], key: str, steps: int, night_steps: int,
          night_low: float | None, why_nothing: str = "", confidence: float = 0.95) -> Transfer:
    """``best`` / ``baseline``: each side's scores at ``steps`` on fresh seeds; ``night_low``: the lower
    end of the night's confirmed interval (None: the night confirmed no gain to compare with)."""
    name = _NAMES.get(key, key)
    at = f"at {steps} steps ({steps / night_steps:.3g}x the night's {night_steps})" if night_steps else f"at {steps} steps"
    if len(best) < 2 or len(baseline) < 2:
        why = why_nothing or (f"{len(best)} run(s) of the best and {len(baseline)} of the baseline finished {at}; "
                              "the check needs 2 a side")
        return Transfer(NOTHING, f"transfer check: nothing: {why}")
    iv = stats.diff_interval(best, baseline, confidence)
    figure = f"{name} {iv.diff:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}] on {len(best)} + {len(baseline)} fresh seeds"
    if iv.high < 0:
        return Transfer(REVERSES, f"REVERSES {at}: {figure}: the baseline is better when trained longer",
                        iv.diff, iv.low, iv.high, flagged=True)
    if iv.low <= 0:
        return Transfer(SHRINKS, f"SHRINKS {at}: {figure}: the gain cannot be told from 0 when trained longer",
                        iv.diff, iv.low, iv.high, flagged=True)
    if night_low is not None and iv.high < night_low:
        return Transfer(SHRINKS, f"SHRINKS {at}: {figure}: still a gain, smaller than the night's "
                                 f"(its interval starts at {night_low:+.3f})", iv.diff, iv.low, iv.high, flagged=True)
    return Transfer(HOLDS, f"holds {at}: {figure}", iv.diff, iv.low, iv.high)
