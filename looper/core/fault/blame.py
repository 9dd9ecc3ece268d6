"""Whose fault: the candidate's or the harness's? Pure decisions, no I/O.

A candidate's failure halts the night as a harness error only when the harness proves that it
is the one that broke: a canary (the last kept train.py re-run briefly, or a known-good
evaluation of the best's weights) must fail too. Words in train.py's own output never decide
it alone: a printed ``CUDA error`` or ``NVMLError`` is text the candidate wrote.

- :func:`needs_canary`: does this failure need a canary before it may halt?
- :func:`decide`: the outcome once the canary answered (or could not run).
- :func:`eval_time_limit`: how long a candidate's evaluation may run before it is the
  candidate's crash (a stated factor of the best's measured evaluation seconds plus a floor).
"""

from __future__ import annotations

from dataclasses import dataclass

from looper.core.verdicts.verdict import Outcome

_PREFIX = "harness error: "


@dataclass(frozen=True)
class Blame:
    outcome: Outcome
    reason: str


def needs_canary(outcome: Outcome, is_candidate: bool) -> bool:
    """A candidate's failure that would halt as a harness error must be proven by a canary first.

    The baseline's own failures (no kept train.py to compare with yet) keep the classifier's
    answer: ``is_candidate`` is False for them."""
    return is_candidate and outcome is Outcome.ERROR


def decide(outcome: Outcome, reason: str, canary_failed: bool | None, canary: str) -> Blame:
    """The outcome of a failure given what the canary did.

    ``canary`` names it in words ("the last kept train.py", "the best's weights through the same
    evaluator"). ``canary_failed``: None when no canary ran (or none could): the classifier's
    answer stands; True: the known-good run failed too, the harness broke (ERROR); False: the
    harness works, so an ERROR becomes the candidate's CRASH (the reason keeps what it saw)."""
    if outcome is not Outcome.ERROR or canary_failed is None:
        return Blame(outcome, reason)
    if canary_failed:
        return Blame(Outcome.ERROR, f"{reason}; {canary} (canary) failed too, so the harness is what broke")
    seen = reason[len(_PREFIX):] if reason.startswith(_PREFIX) else reason
    return Blame(Outcome.CRASH, f"the change's crash: its run looked like a harness fault ({seen}), but {canary} "
                                "(canary) ran cleanly, so the harness works and the change broke its own run")


def eval_time_limit(best_eval_seconds: float | None, factor: float, floor_seconds: float) -> float | None:
    """Seconds a candidate's evaluation may take: ``factor`` x the best's measured evaluation
    seconds + ``floor_seconds``. None when the best's evaluation time is unknown (no limit of
    this kind: the caller's general timeout applies)."""
    if best_eval_seconds is None or best_eval_seconds <= 0:
        return None
    return factor * best_eval_seconds + floor_seconds
