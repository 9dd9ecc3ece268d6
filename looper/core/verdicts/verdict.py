"""The verdict object and the experiment outcome enum.

Every check produces one :class:`Verdict`. ``error`` means the check could not do its
job; it never counts as pass or fail.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Status(enum.StrEnum):
    """The three answers a check can give."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"


class Verdict(BaseModel):
    """One check's answer. ``blocking`` is empty exactly when ``status`` is pass."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_enum_values=False,
        json_schema_serialization_defaults_required=True,
        json_schema_extra={
            # The rule the validator below enforces, written so that plain JSON Schema
            # readers enforce it too: blocking is empty exactly when status is pass.
            "allOf": [
                {
                    "if": {"properties": {"status": {"const": "pass"}}},
                    "then": {"properties": {"blocking": {"maxItems": 0}}},
                    "else": {"properties": {"blocking": {"minItems": 1}}},
                }
            ]
        },
    )

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

    def with_metrics(self, **extra: Any) -> Verdict:
        """A copy with ``extra`` merged into ``metrics`` (the verdict itself is frozen)."""
        return Verdict(status=self.status, blocking=list(self.blocking),
                       metrics={**self.metrics, **extra}, confidence=self.confidence)

    @classmethod
    def combine(cls, parts: dict[str, Verdict], metrics: dict[str, Any] | None = None) -> Verdict:
        """One verdict from several named ones: the worst status wins (error > fail > pass).

        Every non-pass part's reasons are kept. Each part's status goes into ``metrics``
        under its name. An empty ``parts`` is an error: nothing was checked.
        """
        merged: dict[str, Any] = {name: v.status.value for name, v in parts.items()}
        merged.update(metrics or {})
        if not parts:
            return cls.errored("nothing was checked (no parts to combine)", metrics=merged)
        blocking = [reason for v in parts.values() if not v.ok for reason in v.blocking]
        statuses = {v.status for v in parts.values()}
        if Status.ERROR in statuses:
            return cls.errored(*blocking, metrics=merged)
        if Status.FAIL in statuses:
            return cls.failed(*blocking, metrics=merged)
        return cls.passed(metrics=merged, confidence=min(v.confidence for v in parts.values()))


SCHEMA_ID = "urn:looper:schema:verdict"
VERDICT_KEYS = ("status", "blocking", "metrics", "confidence")


def verdict_json_schema() -> dict[str, Any]:
    """The JSON Schema of a serialised :class:`Verdict` (what ``verdict.schema.json`` holds).

    Generated from the model, so the file and the code cannot disagree without a test
    noticing (``scripts/gen_schema.py --check``). Every key is required in the serialised form.
    """
    schema = Verdict.model_json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


class Outcome(enum.StrEnum):
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

    @classmethod
    def parse(cls, value: str) -> Outcome:
        """The outcome named ``value``; a clear error naming the value and the allowed ones."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(
                f"unknown experiment status {value!r}; allowed: {', '.join(cls.values())}"
            ) from None
