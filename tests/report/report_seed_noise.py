"""A seeded experiments.db whose verdicts come from the REAL statistical gate.

One daemon run of tag ``noisy``: a baseline measured with ``baseline_seeds`` seeds, then
candidates judged by :func:`looper.core.keep.gate.decide` on METRICS.json objects with per-instance
``found`` lists, and recorded with the verdict the gate returned (so the report reads the
field names the gate really writes):

- ``inside``: three seeds a hair above the baseline -> inside the noise (inconclusive, final);
- ``class_fail``: one seed that found none of exhaust_fan's 10 instances -> discard on the
  exact McNemar test;
- ``worse``: one seed far below -> discard, worse beyond the noise;
- with ``keep=True`` also ``better``: three seeds well above -> keep (the best, with the
  gate's class tests against the baseline in its verdict).

Every experiment's configuration records ``[executor] sandbox`` as given.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.core.keep import gate
from looper.core.scoring.classes import CLASSES
from looper.store import Store

TAG = "noisy"
FAN = "exhaust_fan"


def config(sandbox: str) -> dict[str, Any]:
    return {"gate": {"score": "weighted_f1", "max_class_drop": 0.05, "alpha": 0.05},
            "executor": {"kind": "local", "sandbox": sandbox, "sandbox_network": False}}


def _bit(*parts: object) -> int:
    return int(int(hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:2], 16) % 4 != 0)  # ~75 % found


def run_metrics(score: float, lose: tuple[str, ...] = ()) -> dict[str, Any]:
    """One METRICS.json: every class with truth finds the same instances each run (no seed spread
    in the classes), except the classes in ``lose``, which find none."""
    classes: dict[str, dict[str, Any]] = {}
    for i, c in enumerate(CLASSES):
        support = 0 if i >= 24 else (10 if c == FAN else 12 + (i * 7) % 30)
        found = [0] * support if c in lose else ([1] * support if c == FAN else [_bit(c, k) for k in range(support)])
        tp = sum(found)
        fp = 2
        recall = tp / support if support else None
        precision = tp / (tp + fp)
        f1 = None if recall is None else (2 * precision * recall / (precision + recall) if tp else 0.0)
        classes[c] = {"tp": tp, "fp": fp, "fn": support - tp, "support": support, "precision": precision,
                      "recall": recall, "f1": f1, "count_error": (tp + fp - support) / support if support else 1.0,
                      "found": found}
    return {"schema": 1, "pages": 6, "predictions": 400, "truth": 390, "macro_f1": score - 0.02,
            "weighted_f1": score, "classes": classes}


def mean_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    from looper.night.measure import mean_metrics

    return mean_metrics(runs)


@dataclass
class Seeded:
    root: Path
    store: Store
    ids: dict[str, int] = field(default_factory=dict)
    decisions: dict[str, gate.GateDecision] = field(default_factory=dict)
    since: str = ""


def build(root: Path, *, baseline_seeds: int = 3, keep: bool = False, sandbox: str = "none") -> Seeded:
    root.mkdir(parents=True, exist_ok=True)  # the workspace folder (Store takes a missing path as the db file)
    store = Store(root)
    s = Seeded(root=root, store=store)
    store.put_tag(TAG, branch=f"looper/{TAG}", base_commit="a" * 40, fixed_hashes={"prepare.py": "x"},
                  data_hash="d" * 64, noise=None)
    cfg = config(sandbox)
    store.add_event(TAG, "start", "daemon started (pid 7)")
    s.since = store.journal(kind="start")[-1].at

    def exp(name: str, kind: str = "candidate", description: str = "") -> int:
        i = store.start_experiment(tag=TAG, kind=kind, parent=None if kind == "baseline" else "p" * 40, seed=0,
                                   config=cfg, description=description, rationale="", source="print('t')\n",
                                   diff="")
        s.ids[name] = i
        return i

    base_scores = [0.400, 0.410, 0.390][:baseline_seeds]
    base_runs = [run_metrics(x) for x in base_scores]
    base_mean = {**mean_of(base_runs), "seed_scores": base_scores}
    b = exp("baseline", kind="baseline", description="baseline: the train.py the tag started from")
    store.record_outcome(b, outcome="keep", score=sum(base_scores) / len(base_scores), metrics=base_mean,
                         verdict={"status": "pass", "blocking": [], "confidence": 1.0,
                                  "metrics": {"seeds": list(range(baseline_seeds))}},
                         commit="b" * 40, train_seconds=300.0, eval_seconds=20.0)
    store.add_event(TAG, "baseline", "baseline measured", b, {"dead_gates": []})

    best_runs: list[dict[str, Any]] = []

    def judge(name: str, description: str, runs: list[dict[str, Any]]) -> None:
        d = gate.decide(gate.GateInput(candidate=runs, best=list(best_runs), baseline=base_mean,
                                       baseline_source="tag-start", baseline_runs=base_runs),
                        gate.GateConfig(alpha=0.05), reruns_left=0)
        s.decisions[name] = d
        i = exp(name, description=description)
        store.record_outcome(i, outcome=d.outcome, verdict=d.verdict, score=d.score, metrics=mean_of(runs),
                             commit="c" * 40 if d.outcome.value == "keep" else None, train_seconds=300.0,
                             eval_seconds=20.0)
        if d.outcome.value == "keep":
            best_runs[:] = runs

    if keep:
        judge("better", "cosine schedule", [run_metrics(x) for x in (0.470, 0.480, 0.475)])
    top = 0.475 if keep else 0.400
    judge("inside", "label smoothing 0.1", [run_metrics(top + x) for x in (0.004, 0.001, 0.006)])
    judge("class_fail", "drop the small-object head", [run_metrics(top + 0.02, lose=(FAN,))])
    judge("worse", "freeze the backbone", [run_metrics(top - 0.10)])
    store.add_event(TAG, "stop", "daemon stopped")
    return s
