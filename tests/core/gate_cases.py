"""The pure gate's table tests share these: METRICS.json objects, the baseline's seeds, the noise band
from its definition, a gate called as the loop calls it, and the inputs of the property tests
(tests/core/test_core_gate.py, test_core_gate_score.py, test_core_gate_inputs.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from scipy.stats import t as scipy_t

from looper.core.keep.gate import GateConfig, GateInput, decide

CFG = GateConfig()  # weighted_f1, max_class_drop 0.05, alpha 0.05
APPROVED = "approved:2026-11-30.json"


def run(score: float | None, recalls: dict[str, float | None], *, predictions: int | None = 100,
        support: int = 10, found: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """A METRICS.json object; ``found`` gives a class its per-instance results (and so its counts)."""
    classes = {}
    for name, recall in recalls.items():
        sup = 0 if recall is None else support
        tp = 0 if recall is None else round(recall * sup)
        classes[name] = {"tp": tp, "fp": 1, "fn": sup - tp, "support": sup, "recall": recall}
    for name, hits in (found or {}).items():
        sup, tp = len(hits), sum(hits)
        classes[name] = {"tp": tp, "fp": 1, "fn": sup - tp, "support": sup,
                         "recall": tp / sup if sup else None, "found": list(hits)}
    m: dict[str, Any] = {"pages": 6, "classes": classes}
    if score is not None:
        m["weighted_f1"] = score
    if predictions is not None:
        m["predictions"] = predictions
    return m


BASE = {"supply_diffuser": 0.9, "return_grille": 0.6, "vav_box": 0.4, "thermostat": 0.5}
SPREAD = (-0.01, 0.0, 0.01)  # the baseline's three seeds around its mean: seed sigma 0.01, df 2


def seeds_of(m: Any) -> list[Any]:
    """Three seeds of a baseline ``m`` (its score -0.01, +0, +0.01); one when it has no score."""
    if not isinstance(m, dict) or not isinstance(m.get("weighted_f1"), float):
        return [m]
    return [{**m, "weighted_f1": m["weighted_f1"] + d} for d in SPREAD]


def band(n_cand: int = 1, n_best: int = 3, looks: int = 3, sigma: float = 0.01, df: int = 2) -> float:
    """The noise band computed here from its definition (t quantile x sigma x sqrt(1/n + 1/m))."""
    return float(scipy_t.ppf(1 - 0.05 / looks, df)) * sigma * (1 / n_cand + 1 / n_best) ** 0.5


def gate(candidate: list[dict[str, Any]] | dict[str, Any], *, best: list[dict[str, Any]] | None = None,
         baseline: dict[str, Any] | None = None, base_runs: list[dict[str, Any]] | None = None,
         simpler: bool = False, reruns_left: int = 2, cfg: GateConfig = CFG,
         source: str = "tag-start"):
    """Gate like the loop does: the baseline measured over three seeds, which are also the best."""
    cands = candidate if isinstance(candidate, list) else [candidate]
    base = baseline if baseline is not None else run(0.40, BASE)
    seeds = base_runs if base_runs is not None else seeds_of(base)
    return decide(GateInput(cands, best if best is not None else seeds, base, source, candidate_simpler=simpler,
                            baseline_runs=seeds), cfg, reruns_left)


def with_recall(**changes: float | None) -> dict[str, float | None]:
    return {**BASE, **changes}


def hits(n: int, found: int) -> list[int]:
    """The first ``found`` of ``n`` instances found."""
    return [1] * found + [0] * (n - found)


# -- the inputs of the property tests -------------------------------------------------------

NAMES = ["a", "b", "c"]
recall = st.sampled_from([0.0, 0.02, 0.05, 0.1, 0.3, 0.5, 0.52, 0.6, 0.9, 1.0])
score = st.floats(0.0, 1.0, allow_nan=False).map(lambda x: round(x, 3))
metrics = st.builds(lambda s, rs: run(s, dict(zip(NAMES, rs, strict=True))), score,
                    st.lists(recall, min_size=3, max_size=3))
inputs = st.fixed_dictionaries({
    "candidate": st.lists(metrics, min_size=1, max_size=3),
    "best": st.lists(metrics, min_size=0, max_size=2),
    "baseline": metrics,
    "simpler": st.booleans(),
    "reruns_left": st.integers(0, 2),
})
