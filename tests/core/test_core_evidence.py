"""Vacuous runs: a clean exit that left no evidence is not a pass."""

from __future__ import annotations

from typing import Any

import pytest

from looper.core.fault.evidence import TrainEvidence, is_vacuous, judge_metrics, judge_training
from looper.core.verdicts.verdict import Status

GOOD_TRAIN = {"steps": 420, "epochs": 6, "seconds": 118.2}


@pytest.mark.parametrize(
    ("ev", "status", "reasons"),
    [
        (TrainEvidence(0, 6_000_000, GOOD_TRAIN), Status.PASS, []),
        (TrainEvidence(0, None, GOOD_TRAIN), Status.FAIL, ["no weights file (weights.pt) was written"]),
        (TrainEvidence(0, -1, GOOD_TRAIN), Status.FAIL, ["no weights file (weights.pt) was written"]),
        (TrainEvidence(0, 0, GOOD_TRAIN), Status.FAIL, ["weights.pt is 0 bytes"]),
        (TrainEvidence(0, 10, None), Status.FAIL, ["train.json is missing or unreadable"]),
        (TrainEvidence(0, 10, None, "Expecting value: line 1"), Status.FAIL,
         ["train.json is missing or unreadable (Expecting value: line 1)"]),
        (TrainEvidence(0, 10, [1]), Status.FAIL, ["train.json is a JSON list, not an object"]),
        (TrainEvidence(0, 10, {"epochs": 1}), Status.FAIL,
         ["train.json does not say how many training steps ran ('steps' missing)"]),
        (TrainEvidence(0, 10, {"steps": "many"}), Status.FAIL, ["train.json 'steps' is not a number ('many')"]),
        (TrainEvidence(0, 10, {"steps": True}), Status.FAIL, ["train.json 'steps' is not a number (True)"]),
        (TrainEvidence(0, 10, {"steps": float("nan")}), Status.FAIL, ["train.json 'steps' is not a number (nan)"]),
        (TrainEvidence(0, 10, {"steps": 0}), Status.FAIL, ["zero training steps (train.json steps=0)"]),
        (TrainEvidence(0, 0, {"steps": 0}), Status.FAIL,
         ["weights.pt is 0 bytes", "zero training steps (train.json steps=0)"]),
        (TrainEvidence(1, 10, GOOD_TRAIN), Status.ERROR,
         ["training exited with code 1, not cleanly: classify it as a failure, not as vacuous"]),
        (TrainEvidence(None, 10, GOOD_TRAIN), Status.ERROR,
         ["training exited with code None, not cleanly: classify it as a failure, not as vacuous"]),
    ],
)
def test_judge_training(ev: TrainEvidence, status: Status, reasons: list[str]) -> None:
    v = judge_training(ev)
    assert v.status is status
    assert v.blocking == reasons
    assert is_vacuous(v) is (status is Status.FAIL)


def _metrics(pages: Any = 6, truth: Any = 398, score: Any = 0.33, **extra: Any) -> dict[str, Any]:
    m = {"pages": pages, "truth": truth, "predictions": 412, "weighted_f1": score, **extra}
    return {k: v for k, v in m.items() if v is not ...}


@pytest.mark.parametrize(
    ("metrics", "status", "reason"),
    [
        (_metrics(), Status.PASS, None),
        (None, Status.ERROR, "the evaluator wrote no metrics during this run"),
        ([], Status.ERROR, "METRICS.json is a JSON list, not an object"),
        (_metrics(pages=...), Status.ERROR, "METRICS.json has no 'pages' count"),
        (_metrics(pages="6"), Status.ERROR, "METRICS.json 'pages' is not a count ('6')"),
        (_metrics(truth="x"), Status.ERROR, "'truth' is not a count ('x')"),
        (_metrics(pages=0), Status.FAIL, "the evaluation covered zero pages"),
        (_metrics(truth=0), Status.FAIL, "zero truth boxes"),
        (_metrics(truth=0, score=None), Status.FAIL, "zero truth boxes"),
        (_metrics(score=None), Status.ERROR, "METRICS.json has no numeric 'weighted_f1' although it measured 398"),
        (_metrics(truth=..., classes={"a": {"support": 3}, "b": {"support": 0}}), Status.PASS, None),
        (_metrics(truth=..., classes={"a": {"support": 0}, "b": {"support": 0}}), Status.FAIL, "zero truth boxes"),
        (_metrics(truth=..., classes={"a": {"tp": 1}}), Status.ERROR, "class 'a' has no numeric 'support'"),
        (_metrics(truth=..., classes={"a": 3}), Status.ERROR, "class 'a' has no numeric 'support'"),
        (_metrics(truth=...), Status.ERROR, "neither 'truth' nor a 'classes' object"),
    ],
)
def test_judge_metrics(metrics: Any, status: Status, reason: str | None) -> None:
    v = judge_metrics(metrics)
    assert v.status is status
    if reason is None:
        assert v.metrics["score"] == 0.33 and not is_vacuous(v)
    else:
        assert any(reason in b for b in v.blocking), v.blocking
    if status is Status.FAIL:
        assert is_vacuous(v) and v.metrics["score"] is None


def test_judge_metrics_zero_pages_and_truth_names_both() -> None:
    v = judge_metrics(_metrics(pages=0, truth=0))
    assert len(v.blocking) == 2 and v.metrics["score"] is None


def test_judge_metrics_other_score_key() -> None:
    v = judge_metrics(_metrics(macro_f1=0.41), score_key="macro_f1")
    assert v.ok and v.metrics["score"] == 0.41
