"""The verdict object and the experiment outcome enum.

Every check produces one :class:`Verdict`. ``error`` means the check could not do its
job; it never counts as pass or fail.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Status(str, enum.Enum):
    """The three answers a check can give."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"


class Verdict(BaseModel):
    """One check's answer. ``blocking`` is empty exactly when ``status`` is pass."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    status: Status
    blocking: list[str] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _blocking_matches_status(self) -> Verdict:
        if self.status is Status.PASS and self.blocking:
            raise ValueError("a passing verdict carries no blocking reasons")
        if self.status is not Status.PASS and not self.blocking:
            raise ValueError(f"a {self.status.value} verdict must say why in 'blocking'")
        return self

    # -- constructors -------------------------------------------------------------
    @classmethod
    def passed(cls, metrics: dict[str, Any] | None = None, confidence: float = 1.0) -> Verdict:
        return cls(status=Status.PASS, blocking=[], metrics=dict(metrics or {}), confidence=confidence)

    @classmethod
    def failed(cls, *reasons: str, metrics: dict[str, Any] | None = None) -> Verdict:
        return cls(status=Status.FAIL, blocking=list(reasons), metrics=dict(metrics or {}))

    @classmethod
    def errored(cls, *reasons: str, metrics: dict[str, Any] | None = None) -> Verdict:
        return cls(status=Status.ERROR, blocking=list(reasons), metrics=dict(metrics or {}))

    # -- behaviour ------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.status is Status.PASS

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Outcome(str, enum.Enum):
    """How one experiment ended; the only values ``experiments.status`` may hold."""

    PENDING = "pending"
    RUNNING = "running"
    KEEP = "keep"
    DISCARD = "discard"
    CRASH = "crash"
    VACUOUS = "vacuous"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"
    INTERRUPTED = "interrupted"

    @property
    def is_terminal(self) -> bool:
        return self not in (Outcome.PENDING, Outcome.RUNNING)

    @property
    def counts_as_result(self) -> bool:
        """A measured result whose score means something (may be compared, approved)."""
        return self in (Outcome.KEEP, Outcome.DISCARD, Outcome.INCONCLUSIVE)

    @property
    def has_score(self) -> bool:
        """Whether the experiment may carry a non-NULL score."""
        return self.counts_as_result

    @property
    def advances_branch(self) -> bool:
        return self is Outcome.KEEP

    @property
    def resets_checkout(self) -> bool:
        return self in (Outcome.DISCARD, Outcome.CRASH, Outcome.VACUOUS, Outcome.INCONCLUSIVE,
                        Outcome.INTERRUPTED)

    @property
    def is_exclusion(self) -> bool:
        """Its reason joins the exclusions the agent sees."""
        return self in (Outcome.DISCARD, Outcome.CRASH)

    @property
    def halts_loop(self) -> bool:
        return self is Outcome.ERROR

    @classmethod
    def values(cls) -> list[str]:
        return [o.value for o in cls]
