"""Vacuous runs: exited cleanly but left no evidence. "Nothing got checked" is not a pass.

Two judges, both pure; the caller stats and reads the files and passes plain values in.

- :func:`judge_training` looks at what a cleanly exited ``train.py`` left behind.
- :func:`judge_metrics` looks at what ``evaluate.py`` wrote.

Their verdicts: ``pass`` (there is evidence), ``fail`` (vacuous: the reasons say what is
missing, ``metrics["vacuous"]`` is True; the experiment's outcome is ``vacuous`` and its
score NULL), ``error`` (the harness could not judge: the evaluator wrote nothing or wrote
something malformed, or the judge was asked about a run that did not exit cleanly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from looper.core.verdicts.verdict import Verdict


@dataclass(frozen=True)
class TrainEvidence:
    """What a finished training run left: its exit code, ``weights.pt`` size, ``train.json``.

    ``weights_bytes`` is None when the file does not exist; ``train_json`` is None when the
    file is missing or is not readable JSON (``train_json_problem`` may say which).
    """

    exit_code: int | None
    weights_bytes: int | None
    train_json: Any
    train_json_problem: str | None = None


def _count(value: Any) -> float | None:
    """A finite number (bools are not counts), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def is_vacuous(verdict: Verdict) -> bool:
    """Whether a verdict from this module means "ran but left no evidence"."""
    return bool(verdict.metrics.get("vacuous"))


def judge_training(ev: TrainEvidence) -> Verdict:
    """pass when a cleanly exited run left weights and a train.json with steps > 0.

    fail (vacuous) names every missing piece. error when the run did not exit cleanly:
    that is a failed run for :mod:`looper.core.fault.failure`, not a vacuous one.
    """
    facts: dict[str, Any] = {"exit_code": ev.exit_code, "weights_bytes": ev.weights_bytes}
    if ev.exit_code != 0:
        return Verdict.errored(
            f"training exited with code {ev.exit_code}, not cleanly: classify it as a failure, "
            "not as vacuous",
            metrics=facts,
        )
    reasons: list[str] = []
    if ev.weights_bytes is None or ev.weights_bytes < 0:
        reasons.append("no weights file (weights.pt) was written")
    elif ev.weights_bytes == 0:
        reasons.append("weights.pt is 0 bytes")
    steps: float | None = None
    if ev.train_json is None:
        problem = f" ({ev.train_json_problem})" if ev.train_json_problem else ""
        reasons.append(f"train.json is missing or unreadable{problem}")
    elif not isinstance(ev.train_json, dict):
        reasons.append(f"train.json is a JSON {type(ev.train_json).__name__}, not an object")
    else:
        raw = ev.train_json.get("steps")
        steps = _count(raw)
        if "steps" not in ev.train_json:
            reasons.append("train.json does not say how many training steps ran ('steps' missing)")
        elif steps is None:
            reasons.append(f"train.json 'steps' is not a number ({raw!r})")
        elif steps <= 0:
            reasons.append(f"zero training steps (train.json steps={raw!r})")
    facts["steps"] = steps
    if reasons:
        return Verdict.failed(*reasons, metrics={**facts, "vacuous": True})
    return Verdict.passed(metrics={**facts, "vacuous": False})


def _truth_of(metrics: dict[str, Any]) -> tuple[float | None, str | None]:
    """Total truth boxes: the ``truth`` field, else the sum of class supports."""
    if "truth" in metrics:
        truth = _count(metrics["truth"])
        return (truth, None) if truth is not None else (None, f"'truth' is not a count ({metrics['truth']!r})")
    classes = metrics.get("classes")
    if not isinstance(classes, dict):
        return None, "neither 'truth' nor a 'classes' object to count truth from"
    total = 0.0
    for name, row in classes.items():
        support = _count(row.get("support")) if isinstance(row, dict) else None
        if support is None:
            return None, f"class {name!r} has no numeric 'support'"
        total += support
    return total, None


def judge_metrics(metrics: Any, score_key: str = "weighted_f1") -> Verdict:
    """pass when METRICS.json measured something: pages > 0 and truth > 0.

    None (the evaluator wrote nothing) or a malformed object is an error: the harness did
    not do its job. Zero pages or zero truth is vacuous (fail; the score stays None).
    On pass, ``metrics["score"]`` is the ``score_key`` value.
    """
    if metrics is None:
        return Verdict.errored("the evaluator wrote no metrics during this run")
    if not isinstance(metrics, dict):
        return Verdict.errored(f"METRICS.json is a JSON {type(metrics).__name__}, not an object")
    if "pages" not in metrics:
        return Verdict.errored("METRICS.json has no 'pages' count")
    pages = _count(metrics["pages"])
    if pages is None:
        return Verdict.errored(f"METRICS.json 'pages' is not a count ({metrics['pages']!r})")
    truth, problem = _truth_of(metrics)
    if truth is None:
        return Verdict.errored(f"METRICS.json: {problem}")
    facts: dict[str, Any] = {"pages": pages, "truth": truth, "score": None}
    reasons: list[str] = []
    if pages <= 0:
        reasons.append("the evaluation covered zero pages")
    if truth <= 0:
        reasons.append("the evaluation pages hold zero truth boxes: nothing could be found or missed")
    if reasons:
        return Verdict.failed(*reasons, metrics={**facts, "vacuous": True})
    score = _count(metrics.get(score_key))
    if score is None:
        return Verdict.errored(
            f"METRICS.json has no numeric {score_key!r} although it measured {int(truth)} truth boxes",
            metrics={**facts, "vacuous": False},
        )
    return Verdict.passed(metrics={**facts, "score": score, "vacuous": False})
