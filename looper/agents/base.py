"""The Agent protocol and the plain data it sees.

An agent turns one :class:`AgentContext` into one :class:`Proposal`:

- ``new_source`` is the whole new train.py, or None when the agent edited
  ``ctx.checkout / "train.py"`` in place (the loop reads the file);
- ``exhausted`` True means "I have nothing left to try": a stop rule, not a crash
  (``new_source`` is then None and must not be read as an in-place edit);
- ``knobs`` holds the hyperparameter-block changes ``{NAME: (old, new)}`` when known.

Errors:

- :class:`looper.errors.HarnessError`: the agent machinery itself is broken (binary missing,
  endpoint down after retries, the agent failed ``max_failures`` times in a row): halt.
- :class:`ProposalRejected`: this one attempt produced nothing usable; the loop records the
  experiment as discarded with ``reason`` and goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from looper.errors import LooperError


class ProposalRejected(LooperError):
    """The agent's reply holds no usable train.py; the experiment is discarded with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ClassScore:
    """One class's page-level scores in the current best experiment."""

    name: str
    recall: float | None
    precision: float | None = None
    f1: float | None = None
    support: int = 0


@dataclass(frozen=True)
class ExperimentView:
    """One earlier experiment as the agents see it (plain data; the loop fills it from the store).

    ``changes``: knob changes ``{NAME: (old, new)}`` when known (Proposal.knobs, or the
    diff of the hyperparameter block). ``knobs``: the full knob values it ran with, when
    known. ``excluded``: None means "derive from the outcome". ``best_before``: the best score
    when it ran. ``log_excerpt``: run-log lines (untrusted; fenced and redacted in prompts).
    """

    id: int
    outcome: str
    score: float | None = None
    description: str = ""
    reason: str = ""
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    knobs: dict[str, Any] | None = None
    excluded: bool | None = None
    best_before: float | None = None
    failure_signature: str = ""
    log_excerpt: str = ""


@dataclass(frozen=True)
class HistoryView:
    """What an agent may know about the night so far: aggregate numbers and short texts."""

    experiments: tuple[ExperimentView, ...] = ()  # oldest first
    score_name: str = "weighted_f1"
    best_score: float | None = None
    best_experiment_id: int | None = None
    baseline_score: float | None = None
    baseline_source: str = ""  # "approved:<file>" | "tag-start" | ""
    class_scores: tuple[ClassScore, ...] = ()  # per class, of the current best
    exclusions: tuple[str, ...] = ()  # oldest first
    inconclusive: tuple[str, ...] = ()  # descriptions of inconclusive ideas
    failure_signatures: tuple[str, ...] = ()  # recent, oldest first
    in_flight: tuple[dict[str, Any], ...] = ()  # knob sets running on other workers


@dataclass(frozen=True)
class AgentContext:
    checkout: Path
    train_py: str  # the current best train.py (also at checkout / "train.py")
    program_md: str
    prompt: str  # looper.agents.prompt.build_prompt(...) output
    history: HistoryView = field(default_factory=HistoryView)


@dataclass(frozen=True)
class Proposal:
    new_source: str | None
    description: str
    rationale: str = ""
    knobs: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    exhausted: bool = False
    phase: int | None = None  # planner only
    # paths besides train.py the agent made or changed in its box (none of them reaches the checkout):
    # the scope check names them as a violation, as it names a change in the checkout
    touched: tuple[str, ...] = ()


@runtime_checkable
class Agent(Protocol):
    name: str

    def propose(self, ctx: AgentContext) -> Proposal: ...
