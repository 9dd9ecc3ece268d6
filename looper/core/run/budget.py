"""The step budget of a tag (pure: no files, no clock).

A wall-clock budget alone lets a busy machine shrink a run silently: the same train.py and seed
fitted 455 to 591 optimizer steps into the same 150 s, and the score followed the steps
(bench/RESULTS-archive.md, "Noise at the source"). With ``[loop] max_steps = "auto"`` a tag starts with a
warm-up run of its baseline train.py under the wall clock alone (it also takes the cold start:
caches, page cache, settings); the tag's step budget is :func:`step_budget` of the steps that
run fitted, stored with the tag, and every later run of the tag trains exactly that many steps
(``LOOPER_MAX_STEPS``) while the wall clock is still enforced from outside. A run the wall clock
ended before its step budget did not train what the others trained: :func:`cut_short` says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

#: The share of the warm-up's steps the tag's runs get: room for a machine up to 25 % slower (or a
#: change up to 25 % slower per step) before the wall clock cuts a run short. Measured (bench/RESULTS.md,
#: "A pretrained start"): one train.py's step rate spread by 0.77 (455 vs 591 steps in 150 s), which 80 %
#: covers; on a 2-core machine whose load rose from 1 to 5 after the warm-up, runs ran at 0.60 to 0.66 of
#: its rate and were cut short (flagged by cut_short): no fixed share covers that, set max_steps by hand.
HEADROOM = 0.8


def step_budget(warmup_steps: int, headroom: float = HEADROOM) -> int:
    """The tag's step budget from the optimizer steps its warm-up run fitted into the budget.

    >>> step_budget(250)
    200
    """
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 1:
        raise ValueError(f"the warm-up run must have trained at least one step, got {warmup_steps!r}")
    if not (0.0 < headroom <= 1.0):
        raise ValueError(f"headroom must be in (0, 1], got {headroom!r}")
    return max(1, math.floor(warmup_steps * headroom))


def _steps(train_json: dict[str, Any] | None) -> float | None:
    """train.json's ``steps`` as the training evidence reads it (core.fault.evidence: any finite number,
    not a bool), else None; a float must not slip past the budget checks that an int would fail."""
    steps = train_json.get("steps") if isinstance(train_json, dict) else None
    if isinstance(steps, bool) or not isinstance(steps, (int, float)) or not math.isfinite(steps):
        return None
    return float(steps)


def cut_short(train_json: dict[str, Any] | None, max_steps: int) -> str | None:
    """Why a run did not train its step budget (the wall clock ended it first), or None.

    ``train_json`` is the run's train.json (docs/INTERFACES.md): ``steps`` and ``stopped_by``.
    Without a step budget (``max_steps`` 0) every run is what the wall clock made it: None."""
    steps = _steps(train_json) if max_steps > 0 else None
    if steps is None or steps >= max_steps:
        return None
    assert isinstance(train_json, dict)
    by = train_json.get("stopped_by")
    by = by if isinstance(by, str) and by else "something other than its step budget"
    return f"stopped by the {'wall clock' if by == 'time' else by} at {steps:g} of {max_steps} steps"


def _need(startup: float, rate: float, max_steps: int, reserve: float) -> int:
    """The wall clock ``max_steps`` steps need at ``rate`` after ``startup`` s, with 25 % to spare, plus the
    seconds the run keeps back for saving (``reserve``)."""
    return int(math.ceil(1.25 * (startup + max_steps / rate) + reserve))


def _steps_that_fit(rate: float, budget_seconds: float, startup: float, reserve: float = 0.0) -> int:
    """The step budget that fits ``budget_seconds`` at ``rate`` after ``startup`` s and ``reserve``, 20 % to spare."""
    return max(1, math.floor(0.8 * rate * max(0.0, budget_seconds - startup - reserve)))


def budget_advice(train_json: dict[str, Any] | None, max_steps: int, budget_seconds: float) -> str:
    """What to change when the wall clock cut a baseline run short, from the run's own figures: the seconds its
    start-up took before step 1 (``startup_seconds``: imports, data, model) and its step rate after it, so
    the wall clock that fits the step budget with 25 % to spare (plus what the run kept back of the budget for
    saving: ``budget_seconds - seconds``), or the step budget that fits this one with 20 % to spare.

    >>> budget_advice({"steps": 145, "seconds": 172.0, "startup_seconds": 94.0}, 169, 180)[:48]
    'Raise [loop] budget_seconds to at least 240 (thi'
    """
    j = train_json if isinstance(train_json, dict) else {}
    steps, seconds, startup = _steps(j), j.get("seconds"), j.get("startup_seconds")
    numbers = [x for x in (seconds, startup) if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if steps is None or steps <= 0 or len(numbers) < 2 or seconds <= startup:
        return (f"Raise [loop] budget_seconds (now {budget_seconds:g}) or lower [loop] max_steps (now {max_steps}): "
                "the run's train.json does not say where its time went.")
    rate = steps / (seconds - startup)  # steps a second once training began
    need = _need(startup, rate, max_steps, budget_seconds - seconds if seconds < budget_seconds else 0)
    fits = _steps_that_fit(rate, budget_seconds, startup)
    cache = (f" Start-up took {startup / budget_seconds:.0%} of the budget: a data set of many tiles is loaded before "
             "step 1 (train.py's CACHE); a smaller data set or CACHE = \"none\" starts sooner."
             if startup > 0.25 * budget_seconds else "")
    return (f"Raise [loop] budget_seconds to at least {need} (this run: {startup:g} s of start-up before step 1, then "
            f"{rate:.2f} steps/s; {max_steps} steps need about {startup + max_steps / rate:.0f} s), or lower [loop] "
            f"max_steps to {fits} to fit {budget_seconds:g} s, and start `looper run` again.{cache}")


#: A fixed step budget (``[loop] max_steps = N``) is checked on this machine before a tag's baseline by a fit
#: run: the baseline train.py trains :func:`fit_steps` of the N steps (a fifth, at least 10), under a wall clock
#: of MAX_RAISE x ``budget_seconds``, and its start-up and step rate say whether N steps fit the wall clock.
FIT_SHARE = 5
FIT_MIN_STEPS = 10
#: The most a fit run may raise a tag's wall clock: to 3 x ``[loop] budget_seconds``. With a fixed step budget
#: the wall clock is the runs' ceiling, not the regime (the steps are); past 3 x the budget does not fit.
MAX_RAISE = 3.0


def fit_steps(max_steps: int) -> int:
    """The steps a fit run trains of a fixed step budget: a fifth of it, at least 10, at most all of it.

    >>> fit_steps(169), fit_steps(26), fit_steps(4)
    (33, 10, 4)
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"a fit run needs a step budget of at least one step, got {max_steps!r}")
    return min(max_steps, max(FIT_MIN_STEPS, max_steps // FIT_SHARE))


@dataclass(frozen=True)
class WallClockFit:
    """What a fit run says of a fixed step budget on this machine. ``status``: ``fits`` (the tag keeps
    ``budget_seconds``), ``raised`` (its runs get ``seconds``, more than ``budget_seconds``), ``too slow`` (past
    MAX_RAISE: the night halts before any baseline seed) or ``unknown`` (train.json does not say where the
    fit run's time went: the wall clock stays and a baseline seed it cuts short halts, as without a fit run)."""

    status: str
    seconds: int  # the tag's wall clock: budget_seconds unless raised
    need: int | None  # the wall clock the step budget needs, 25 % to spare
    finding: str  # what the fit run found
    advice: str = ""  # "too slow": what to change, and to what

    @property
    def why(self) -> str:
        """The finding and, when the steps do not fit, the advice: the journal's and the report's words."""
        return f"{self.finding}. {self.advice}" if self.advice else self.finding

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "seconds": self.seconds, "need": self.need, "why": self.why}


def fit_wall_clock(train_json: dict[str, Any] | None, max_steps: int, budget_seconds: float,
                   max_raise: float = MAX_RAISE) -> WallClockFit:
    """The tag's wall clock from its fit run's train.json: the run's start-up before step 1 (``startup_seconds``)
    and its step rate after it give the seconds ``max_steps`` steps take; with 25 % to spare, plus the time the
    run keeps back for saving (``overhead_seconds``, 0 when not said), that is the wall clock the steps need.

    >>> fit_wall_clock({"steps": 33, "seconds": 31.0, "startup_seconds": 9.0}, 169, 180).status
    'fits'
    >>> fit_wall_clock({"steps": 33, "seconds": 60.0, "startup_seconds": 9.0, "overhead_seconds": 8}, 169, 180).seconds
    346
    """
    budget = int(math.ceil(budget_seconds))
    j = train_json if isinstance(train_json, dict) else {}
    steps, seconds, startup, reserve = _steps(j), j.get("seconds"), j.get("startup_seconds"), j.get("overhead_seconds", 0)
    numbers = [x for x in (seconds, startup, reserve) if isinstance(x, (int, float)) and not isinstance(x, bool)
               and math.isfinite(x) and x >= 0]
    if steps is None or steps <= 0 or len(numbers) < 3 or seconds <= startup:
        return WallClockFit("unknown", budget, None, "the fit run's train.json does not say its steps, seconds and "
                                                     "startup_seconds: the wall clock stays")
    rate = steps / (seconds - startup)  # steps a second once training began
    train_s = startup + max_steps / rate
    need = _need(startup, rate, max_steps, reserve)
    said = (f"{steps:g} steps after {startup:g} s of start-up, {rate:.2f} steps/s: {max_steps} steps need about "
            f"{train_s:.0f} s")
    if need <= budget:
        return WallClockFit("fits", budget, need, f"{said}; {need} s with 25 % to spare fit the {budget} s wall clock")
    if need <= max_raise * budget_seconds:
        return WallClockFit("raised", need, need, f"{said}; the wall clock raised from {budget} s to {need} s "
                                                  "(25 % to spare)")
    fits = _steps_that_fit(rate, budget_seconds, startup, reserve)
    return WallClockFit("too slow", budget, need,
                        f"{said}; {need} s with 25 % to spare is more than {max_raise:g} x the {budget} s wall clock",
                        f"Raise [loop] budget_seconds to at least {need}, or lower [loop] max_steps to {fits} to fit "
                        f"{budget} s, and start `looper run` again.")


def overran(train_json: dict[str, Any] | None, max_steps: int) -> str | None:
    """Why a run broke the tag's step budget (it trained more steps than LOOPER_MAX_STEPS), or None.

    More steps than the tag's other runs is an advantage no gate should credit: a train.py that drops
    the step budget and trains to the wall clock would beat an unchanged one by budget, not by idea.
    (train.json is written by train.py, so this catches the honest mistake; the sandbox keeps a
    dishonest train.py from the verdict itself.)"""
    steps = _steps(train_json) if max_steps > 0 else None
    if steps is None or steps <= max_steps:
        return None
    return (f"train.py trained {steps:g} optimizer steps; the tag's step budget is {max_steps} "
            "(LOOPER_MAX_STEPS): a run must stop at it")


# The step counts train.py prints as it trains (train.py: ``LOOPER_EPOCH ... steps=N`` after each epoch,
# ``LOOPER_SUMMARY steps=N`` at the end); the harness reads them in the run's log tail.
_LOG_STEPS = re.compile(r"^LOOPER_(?P<kind>SUMMARY|EPOCH)\b.*?\bsteps=(?P<n>\d+(?:\.\d+)?)(?![\w.])", re.MULTILINE)


def log_steps(log_tail: str) -> tuple[str, float] | None:
    """The step count the run's log shows: ``("SUMMARY", n)`` from its last ``LOOPER_SUMMARY`` line,
    else ``("EPOCH", n)`` from its last ``LOOPER_EPOCH`` line; None when it shows none."""
    found = [(m.group("kind"), float(m.group("n"))) for m in _LOG_STEPS.finditer(log_tail or "")]
    summaries = [f for f in found if f[0] == "SUMMARY"]
    return (summaries or found or [None])[-1]


def steps_disagree(train_json: dict[str, Any] | None, logged: tuple[str, float] | None) -> str | None:
    """Why train.json's ``steps`` cannot be taken, or None. With a ``LOOPER_SUMMARY`` line they must be
    equal; with only ``LOOPER_EPOCH`` lines train.json cannot say fewer steps than the last epoch had
    already done (a run may stop mid-epoch after it). No log evidence, or no ``steps``: nothing to compare."""
    steps = _steps(train_json)
    if logged is None or steps is None:
        return None
    kind, n = logged
    if steps == n or (kind == "EPOCH" and steps > n):
        return None
    return (f"train.json says {steps:g} optimizer steps but the run's log showed steps={n:g} "
            f"(LOOPER_{kind}): the step count is not taken on trust")
