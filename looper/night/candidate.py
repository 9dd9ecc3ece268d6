"""The records one experiment hands forward: the candidate under test, the proposal that made it, the
result that settles it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.core.verdicts.verdict import Outcome, Verdict
from looper.errors import HarnessError, LooperError, StuckError
from looper.night.context import Worker


@dataclass
class Candidate:
    """The train.py under test and what it costs: handed from step to step of one experiment."""

    kind: str  # "candidate" (moves git) | "baseline" | "verify" (never move git)
    exp_id: int
    worker: Worker
    parent: str | None
    parent_source: str
    source: str
    description: str
    checkout: Path | None = None  # where it trains; None: the worker's checkout
    commit: str | None = None  # its own commit, once made
    reruns: int = 0  # reruns the gate may ask for
    started: float = field(default_factory=time.monotonic)
    agent_seconds: float = 0.0
    spent: float = 0.0  # seconds in training and evaluation
    timing: dict[str, Any] = field(default_factory=dict)

    @property
    def moves_git(self) -> bool:
        return self.kind == "candidate"


@dataclass(frozen=True)
class Result:
    """How an experiment ended, before (and after) it is settled."""

    outcome: Outcome
    verdict: Verdict
    score: float | None = None
    metrics: dict | None = None
    signature: str | None = None
    halt: str | None = None  # with an ERROR outcome: what the halt says (default: the reasons)
    advice: str | None = None  # with a halt: what a person should do (None: the general advice)
    exp_id: int | None = None  # set by settle()
    stuck: str | None = None  # set by settle() when this failure makes the loop stuck

    @property
    def halt_error(self) -> LooperError | None:
        """The error the night stops with once this result is recorded, if any."""
        if self.stuck:
            return StuckError(self.stuck)
        if self.outcome.halts_loop:
            return HarnessError(self.halt or "; ".join(self.verdict.blocking))
        return None


@dataclass(frozen=True)
class Proposed:
    """The agent's answer: a reply, or why it was refused."""

    reply: Any | None
    rejected: str | None
    seconds: float

    @property
    def exhausted(self) -> bool:
        return self.reply is not None and bool(getattr(self.reply, "exhausted", False))


@dataclass(frozen=True)
class Halted:
    """Why the night stops: the error, the experiment it came from (if any), what to do next."""

    error: LooperError
    exp_id: int | None = None
    advice: str | None = None
