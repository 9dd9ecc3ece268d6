"""A seeded experiments.db for the report tests, built with the real Store API.

Two daemon runs of tag ``nightly``: the first measured the baseline (#1) and one discard
(#2) and stopped; the second (the report's default window) holds every kind of outcome,
a halt and an undelivered page.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.core.scoring.classes import CLASSES
from looper.store import Store

TAG = "nightly"
#: A notify URL with a secret in it: it must never reach any output.
SECRET = "s3cr3tT0kenXYZ"
CONFIG: dict[str, Any] = {
    "gate": {"score": "weighted_f1", "max_class_drop": 0.05},
    "notify": {"urls": [f"tgram://{SECRET}/12345"]},
}


def _rnd(name: str, salt: str) -> float:
    """A deterministic number in [0, 1) from a name (no global random state)."""
    return int(hashlib.sha256(f"{salt}:{name}".encode()).hexdigest()[:8], 16) / 2**32


def class_metrics(level: float, salt: str, overrides: dict[str, float] | None = None) -> dict[str, dict[str, Any]]:
    """Per-class rows for all 26 classes; recall near ``level``; a few support-0 classes."""
    out: dict[str, dict[str, Any]] = {}
    for i, c in enumerate(CLASSES):
        support = 0 if i in (24, 25) else 3 + int(_rnd(c, "support") * 60)
        if support == 0:
            out[c] = {"tp": 0, "fp": 1, "fn": 0, "support": 0, "precision": 0.0, "recall": None, "f1": None,
                      "count_error": 1.0}
            continue
        recall = min(1.0, max(0.0, level + (_rnd(c, salt) - 0.5) * 0.4))
        if overrides and c in overrides:
            recall = overrides[c]
        tp = round(recall * support)
        recall = tp / support
        fp = int(_rnd(c, salt + "fp") * 10)
        precision = tp / (tp + fp) if tp + fp else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out[c] = {"tp": tp, "fp": fp, "fn": support - tp, "support": support, "precision": precision,
                  "recall": recall, "f1": f1, "count_error": (tp + fp - support) / support}
    return out


def metrics_of(score: float, classes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"schema": 1, "pages": 6, "predictions": 400, "truth": 390, "macro_f1": score - 0.02,
            "weighted_f1": score, "classes": classes}


DIFF = """--- a/train.py
+++ b/train.py
@@ -10,7 +10,7 @@
-LR0 = 0.01
+LR0 = 0.02
"""


@dataclass
class Seeded:
    root: Path
    store: Store
    ids: dict[str, int] = field(default_factory=dict)
    since: str = ""


def build(root: Path) -> Seeded:
    store = Store(root)
    s = Seeded(root=root, store=store)
    store.put_tag(TAG, branch=f"looper/{TAG}", base_commit="a" * 40, fixed_hashes={"prepare.py": "x"},
                  data_hash="d" * 64, noise={"sigma": 0.004})

    def exp(name: str, kind: str = "candidate", description: str = "", rationale: str = "",
            diff: str = "", parent: str = "p" * 40) -> int:
        i = store.start_experiment(tag=TAG, kind=kind, parent=parent, seed=0, config=CONFIG, description=description,
                                   rationale=rationale, source="print('train')\n", diff=diff)
        s.ids[name] = i
        return i

    timing = {"agent_seconds": 12.5, "train_seconds": 300.0, "eval_seconds": 40.0, "harness_seconds": 3.5}
    gpu = {"index": 0, "available": True, "lost": False, "samples": 300, "name": "NVIDIA H200",
           "memory_total_mb": 143000.0, "peak_memory_mb": 20000.0, "mean_utilization_pct": 80.0}

    # -- daemon run 1: the baseline and one discard
    store.add_event(TAG, "start", "daemon started (pid 1)")
    dead_overrides = {"fire_damper": 0.03, "smoke_damper": 0.0}
    base_classes = class_metrics(0.6, "base", dead_overrides)
    b = exp("baseline", kind="baseline", description="baseline: the train.py the tag started from", parent=None)
    store.record_outcome(b, outcome="keep", score=0.40, metrics=metrics_of(0.40, base_classes),
                         verdict={"status": "pass", "blocking": [], "metrics": {}, "confidence": 1.0},
                         commit="b" * 40, train_seconds=900.0, eval_seconds=120.0)
    store.add_event(TAG, "baseline", "baseline measured", b, {"dead_gates": ["fire_damper", "smoke_damper"]})
    old = exp("old_discard", description="smaller batch")
    store.record_outcome(old, outcome="discard", score=0.39, metrics=metrics_of(0.39, class_metrics(0.6, "old")),
                         blocking=["weighted_f1 0.3900 is below the current best 0.4000 by 0.0100"], **timing)
    store.add_event(TAG, "stop", "daemon stopped after 1 experiment(s)")

    # -- daemon run 2: the report's default window
    store.add_event(TAG, "start", "daemon started (pid 2)")
    s.since = store.journal(kind="start")[-1].at
    k1 = exp("keep1", description="raise the learning rate to 0.02", rationale="the loss was still falling fast",
             diff=DIFF)
    c1 = class_metrics(0.65, "k1", dead_overrides)
    store.record_outcome(k1, outcome="keep", score=0.45, metrics=metrics_of(0.45, c1),
                         verdict={"status": "pass", "blocking": [], "metrics": {"diff": 0.05}, "confidence": 1.0},
                         commit="c" * 40, gpu=gpu, train={"steps": 400, "peak_memory_mb": 1800.0}, **timing)
    d1 = exp("discard", description="mosaic off")
    store.record_outcome(d1, outcome="discard", score=0.43, metrics=metrics_of(0.43, class_metrics(0.6, "d1")),
                         verdict={"status": "fail", "blocking": ["x"], "metrics": {"diff": -0.02}, "confidence": 1.0},
                         blocking=["weighted_f1 0.4300 is below the current best 0.4500 by 0.0200"], **timing)
    nm = exp("near_miss", description="bigger image size 1280")
    nm_classes = class_metrics(0.7, "nm", {**dead_overrides, "return_grille": 0.1})
    store.record_outcome(nm, outcome="discard", score=0.47, metrics=metrics_of(0.47, nm_classes),
                         verdict={"status": "fail", "blocking": ["x"], "metrics": {"diff": 0.02}, "confidence": 1.0},
                         blocking=["recall.return_grille dropped 0.50 vs baseline (limit 0.05)"],
                         gpu={**gpu, "peak_memory_mb": 30000.0}, **timing)
    gate_lost = exp("gate_fail_lower", description="freeze the backbone")
    store.record_outcome(gate_lost, outcome="discard", score=0.30, metrics=metrics_of(0.30, class_metrics(0.5, "gl")),
                         verdict={"status": "fail", "blocking": ["x"], "metrics": {"diff": -0.15}, "confidence": 1.0},
                         blocking=["recall.vav_box dropped 0.30 vs baseline (limit 0.05)"], **timing)
    k2 = exp("keep2", description="cosine learning-rate schedule", rationale="smoother end of training",
             diff=DIFF.replace("0.02", "0.03"))
    c2 = class_metrics(0.7, "k2", dead_overrides)
    store.record_outcome(k2, outcome="keep", score=0.48, metrics=metrics_of(0.48, c2),
                         verdict={"status": "pass", "blocking": [], "metrics": {"diff": 0.03}, "confidence": 1.0},
                         commit="e" * 40, **timing)
    for name, sig, desc in (("crash_oom1", "CUDA out of memory", "batch 64"),
                            ("crash_oom2", "CUDA out of memory", "batch 128"),
                            ("crash_name", "NameError: name 'lr' is not defined", "typo in the schedule")):
        i = exp(name, description=desc)
        store.record_outcome(i, outcome="crash", blocking=[f"train.py crashed: {sig}"], failure_signature=sig,
                             exit_code=1, **timing)
    v = exp("vacuous", description="return early")
    store.record_outcome(v, outcome="vacuous", blocking=["no weights.pt written"], exit_code=0, **timing)
    inc = exp("inconclusive", description="label smoothing 0.1")
    store.record_outcome(inc, outcome="inconclusive", score=0.481, metrics=metrics_of(0.481, class_metrics(0.7, "inc")),
                         verdict={"status": "fail", "blocking": ["x"], "metrics": {"diff": 0.001}, "confidence": 1.0},
                         blocking=["weighted_f1 +0.0010 vs the current best stayed inside the noise band 0.0080 "
                                   "after 3 run(s)"], **timing)
    it = exp("interrupted", description="warmup 5 epochs")
    store.mark_interrupted(it, "the daemon was stopped (SIGTERM)")
    err = exp("error", description="mixup 0.2")
    store.record_outcome(err, outcome="error", blocking=["GPU lost during the run: NVML error"],
                         gpu={**gpu, "lost": True, "lost_reason": "GPU is lost"}, **timing)
    store.add_event(TAG, "halt", "harness error: GPU lost during the run", err)
    store.add_event(TAG, "page", "paged: looper halted", err)
    store.add_event(TAG, "page_failed", f"looper halted -- NOT DELIVERED: json://bot:{SECRET}@hooks.example unreachable", err)
    return s

