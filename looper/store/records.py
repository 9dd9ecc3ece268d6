"""What the store hands out: frozen records, one per table row (like optuna's ``FrozenTrial``).

A record is a snapshot: changing the database never changes a record already read, and a
record cannot be changed (``dataclasses.replace`` makes a new one). JSON columns come back
decoded under the name without the ``_json`` suffix (``config_json`` -> ``config``); a list
column comes back as a tuple. ``status`` is an :class:`~looper.core.verdicts.verdict.Outcome`
(a ``StrEnum``: ``record.status == "keep"`` holds). Timestamps are ISO-8601 UTC text.

``to_dict()`` gives the record as a plain dict (for JSON output).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, ClassVar

from looper.core.run.phases import Split, split
from looper.core.verdicts.verdict import Outcome

__all__ = [
    "TIME_PARTS",
    "ClassMetrics",
    "ConfirmationRecord",
    "EventRecord",
    "ExperimentRecord",
    "ExperimentRow",
    "RunRecord",
    "TagRecord",
]

#: The parts of an experiment's wall time, each a ``<part>_seconds`` column.
TIME_PARTS: tuple[str, ...] = ("agent", "train", "eval", "harness")


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def _plain(value: Any) -> Any:
    if isinstance(value, Outcome):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


class _Record:
    """Shared helpers of the record types (all are frozen, slotted dataclasses)."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """The record as a plain dict (tuples as lists, the outcome as its text)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class ExperimentRecord(_Record):
    """One experiment, every column."""

    id: int
    tag: str
    kind: str
    commit: str | None
    parent: str | None
    status: Outcome
    score: float | None
    description: str
    rationale: str
    source: str
    diff: str
    config: dict[str, Any]
    seed: int | None
    metrics: dict[str, Any] | None
    verdict: dict[str, Any] | None
    blocking: tuple[str, ...]
    failure_signature: str | None
    exit_code: int | None
    phase: str
    worker: str
    agent_seconds: float | None
    train_seconds: float | None
    eval_seconds: float | None
    harness_seconds: float | None
    gpu: dict[str, Any] | None
    train: dict[str, Any] | None
    started_at: str
    finished_at: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ExperimentRecord:
        return cls(
            id=row["id"], tag=row["tag"], kind=row["kind"], commit=row["commit"], parent=row["parent"],
            status=Outcome(row["status"]), score=row["score"], description=row["description"],
            rationale=row["rationale"], source=row["source"], diff=row["diff"],
            config=_loads(row["config_json"]), seed=row["seed"], metrics=_loads(row["metrics_json"]),
            verdict=_loads(row["verdict_json"]), blocking=tuple(_loads(row["blocking_json"]) or ()),
            failure_signature=row["failure_signature"], exit_code=row["exit_code"], phase=row["phase"],
            worker=row["worker"], agent_seconds=row["agent_seconds"], train_seconds=row["train_seconds"],
            eval_seconds=row["eval_seconds"], harness_seconds=row["harness_seconds"],
            gpu=_loads(row["gpu_json"]), train=_loads(row["train_json"]), started_at=row["started_at"],
            finished_at=row["finished_at"],
        )

    @property
    def is_open(self) -> bool:
        """Pending or running: not finished yet."""
        return not self.status.is_terminal

    @property
    def gate(self) -> Mapping[str, Any]:
        """The ``[gate]`` section of the configuration it ran with ({} when none)."""
        gate = self.config.get("gate") if isinstance(self.config, dict) else None
        return gate if isinstance(gate, dict) else {}

    @property
    def classes(self) -> dict[str, dict[str, Any]]:
        """The per-class figures inside ``metrics`` ({} when none)."""
        classes = (self.metrics or {}).get("classes")
        return classes if isinstance(classes, dict) else {}


@dataclass(frozen=True, slots=True)
class ExperimentRow(_Record):
    """An experiment as the report, the history and the status read it: no source, config,
    metrics or verdict (10,000 of them stay cheap). ``verdict_diff`` is the gate's
    ``metrics.diff``, ``train_peak_memory_mb`` train.py's own peak memory figure (None when
    not asked for or not recorded); ``gpu`` is None when not asked for."""

    id: int
    tag: str
    kind: str
    commit: str | None
    parent: str | None
    status: Outcome
    score: float | None
    description: str
    started_at: str
    finished_at: str | None
    failure_signature: str | None
    exit_code: int | None
    agent_seconds: float | None
    train_seconds: float | None
    eval_seconds: float | None
    harness_seconds: float | None
    worker: str
    phase: str
    blocking: tuple[str, ...]
    gpu: dict[str, Any] | None = None
    verdict_diff: float | None = None
    train_peak_memory_mb: float | None = None

    def seconds(self, part: str) -> float | None:
        """The time spent in one of :data:`TIME_PARTS` (None when not recorded)."""
        if part not in TIME_PARTS:
            raise ValueError(f"time part must be one of {', '.join(TIME_PARTS)}, got {part!r}")
        return getattr(self, f"{part}_seconds")  # type: ignore[no-any-return]

    @property
    def why(self) -> str:
        """The failure signature, else the blocking reasons joined."""
        return self.failure_signature or "; ".join(self.blocking)


@dataclass(frozen=True, slots=True)
class ClassMetrics(_Record):
    """One class's figures of one experiment (``None``: not defined, e.g. recall without truth)."""

    class_name: str
    precision: float | None
    recall: float | None
    f1: float | None
    count_error: float | None
    tp: int
    fp: int
    fn: int
    support: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ClassMetrics:
        return cls(**{f.name: row[f.name] for f in fields(cls)})

    def figures(self) -> dict[str, Any]:
        """The figures without the class name (the shape of ``metrics["classes"][name]``)."""
        out = self.to_dict()
        out.pop("class_name")
        return out


@dataclass(frozen=True, slots=True)
class RunRecord(_Record):
    """One training+evaluation run of an experiment (``role``: main | rerun | canary)."""

    id: int
    experiment_id: int
    role: str
    seed: int | None
    exit_code: int | None
    score: float | None
    metrics: dict[str, Any] | None
    train: dict[str, Any] | None
    log_tail: str
    started_at: str
    finished_at: str | None
    weights_path: str | None = None  # relative to the workspace (migration 4; None before it)
    weights_sha256: str | None = None
    train_started_at: str | None = None  # the run's phases (None: not reached, or recorded before migration 6)
    train_ended_at: str | None = None
    eval_ended_at: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunRecord:
        return cls(
            id=row["id"], experiment_id=row["experiment_id"], role=row["role"], seed=row["seed"],
            exit_code=row["exit_code"], score=row["score"], metrics=_loads(row["metrics_json"]),
            train=_loads(row["train_json"]), log_tail=row["log_tail"], started_at=row["started_at"],
            finished_at=row["finished_at"], weights_path=row.get("weights_path"),
            weights_sha256=row.get("weights_sha256"), train_started_at=row.get("train_started_at"),
            train_ended_at=row.get("train_ended_at"), eval_ended_at=row.get("eval_ended_at"),
        )

    @property
    def phases(self) -> Split:
        """Seconds of start-up, training and evaluation (looper.core.run.phases; None where not recorded)."""
        return split(self.started_at, self.train_started_at, self.train_ended_at, self.eval_ended_at)


@dataclass(frozen=True, slots=True)
class EventRecord(_Record):
    """One journal entry."""

    DAEMON_STOPPED: ClassVar[str] = "daemon stopped after"  # the "stop" the daemon journals as it ends (night/loop)

    id: int
    at: str
    tag: str
    experiment_id: int | None
    kind: str
    message: str
    data: dict[str, Any] | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> EventRecord:
        return cls(id=row["id"], at=row["at"], tag=row["tag"], experiment_id=row["experiment_id"],
                   kind=row["kind"], message=row["message"], data=_loads(row["data_json"]))

    @property
    def ends_daemon(self) -> bool:
        """The daemon's last entry of its night (a stop rule's "stop" is not: the night's best is confirmed after)."""
        return self.kind == "stop" and self.message.startswith(self.DAEMON_STOPPED)


@dataclass(frozen=True, slots=True)
class FreshCheckRecord(_Record):
    """What every check of a tag's best on fresh seeds records (a confirmation, a transfer check): the best
    and the baseline it compared, why it ran (``trigger``), its verdict (``status``, ``diff`` in
    [``low``, ``high``], ``flagged``, ``headline``) and its runs (``seeds``, ``scores``, ``runs``,
    ``seconds`` of runs added up, ``started_at`` .. ``finished_at``)."""

    id: int
    tag: str
    experiment_id: int | None
    baseline_id: int | None
    trigger: str
    status: str
    score_key: str
    seeds: tuple[int, ...]
    scores: tuple[float, ...]
    baseline_scores: tuple[float, ...]
    diff: float | None
    low: float | None
    high: float | None
    flagged: bool
    headline: str
    runs: int
    seconds: float
    started_at: str
    finished_at: str

    @property
    def wall_seconds(self) -> float:
        """Its clock time, from its start (before the first fresh run) to its record (``seconds`` is the
        runs' own time added up: more than this when seeds run side by side)."""
        took = datetime.fromisoformat(self.finished_at) - datetime.fromisoformat(self.started_at)
        return max(0.0, took.total_seconds())

    @staticmethod
    def common(row: Mapping[str, Any]) -> dict[str, Any]:
        """The shared fields out of a table row (the JSON lists decoded)."""
        return dict(
            id=row["id"], tag=row["tag"], experiment_id=row["experiment_id"], baseline_id=row["baseline_id"],
            trigger=row["trigger"], status=row["status"], score_key=row["score_key"],
            seeds=tuple(_loads(row["seeds_json"])), scores=tuple(_loads(row["scores_json"])),
            baseline_scores=tuple(_loads(row["baseline_scores_json"])), diff=row["diff"], low=row["low"],
            high=row["high"], flagged=bool(row["flagged"]), headline=row["headline"], runs=row["runs"],
            seconds=row["seconds"], started_at=row["started_at"], finished_at=row["finished_at"])


@dataclass(frozen=True, slots=True)
class ConfirmationRecord(FreshCheckRecord):
    """The night's final best re-run on fresh seeds and compared with the tag's baseline
    (``status``: confirmed | not_confirmed | nothing; ``trigger``: night_end | command | cut_short),
    ``planned`` seeds, ``selection_diff`` the best's lead when the night selected it."""

    planned: int
    selection_diff: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ConfirmationRecord:
        return cls(**cls.common(row), planned=row["planned"], selection_diff=row["selection_diff"])


@dataclass(frozen=True, slots=True)
class TagRecord(_Record):
    """What was pinned when a tag started (and the noise its baseline measured)."""

    tag: str
    branch: str
    base_commit: str
    fixed_hashes: dict[str, str]
    data_hash: str
    noise: dict[str, Any] | None
    started_at: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TagRecord:
        return cls(tag=row["tag"], branch=row["branch"], base_commit=row["base_commit"],
                   fixed_hashes=_loads(row["fixed_hashes_json"]), data_hash=row["data_hash"],
                   noise=_loads(row["noise_json"]), started_at=row["started_at"])
