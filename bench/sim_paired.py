"""The gate's decision under intensification on synthetic scores: A/A and planted-effect rates, the pooled
score test alone (seeds unknown to the gate) against the paired rule (seeds known: the paired t where its
band is narrower, each test at half the look's alpha). Pure: the real looper.core.gate.decide and
looper.core.intensify, no training.

score(seed k) = 0.5 + effect + s_k + e: s_k shared by both sides of a pair (their correlation rho), e
independent; s_k and e together have sd 1, so ``effect`` is in seed sds. 3 baseline seeds (0, 1, 2); the
candidate runs 1, 2, 4 ... of the best's seeds up to ``cap``; seeds the baseline never ran are run on it
first (as the loop does). "runs/decision" counts the candidate's runs and the ones the baseline gained.

    python bench/sim_paired.py [SEED] [JUDGEMENTS]     # e.g. 1 1000: about 10 minutes on one busy core
"""

from __future__ import annotations

import random
import sys

from looper.core import intensify
from looper.core.gate import GateConfig, GateInput, decide

CLASSES = {"a": {"tp": 5, "fp": 1, "fn": 5, "support": 10, "recall": 0.5}}  # never moves: no class gate fires


def metrics(score: float) -> dict:
    return {"pages": 1, "predictions": 10, "weighted_f1": score, "classes": CLASSES}


def judge(rng: random.Random, rho: float, effect: float, cap: int, n_base: int, paired: bool) -> tuple[str, int]:
    """One decision as the loop makes it: (outcome, runs it took)."""
    shared = {k: rng.gauss(0, rho ** 0.5) for k in range(cap + n_base + 2)}

    def own() -> float:
        return rng.gauss(0, (1 - rho) ** 0.5)

    base = {k: 0.5 + shared[k] + own() for k in range(n_base)}
    cand: dict[int, float] = {}
    looks, target = intensify.looks(cap), 1
    while True:
        for k in intensify.candidate_seeds(list(base), target, 0)[len(cand):]:
            if k not in base:
                base[k] = 0.5 + shared[k] + own()
            cand[k] = 0.5 + effect + shared[k] + own()
        ks, bs = list(cand), list(base)
        inp = GateInput([metrics(cand[k]) for k in ks], [], metrics(0.5), "tag-start",
                        baseline_runs=[metrics(base[k]) for k in bs],
                        candidate_seeds=ks if paired else [], baseline_seeds=bs if paired else [])
        d = decide(inp, GateConfig(), cap - len(ks), looks=looks, share=intensify.alpha_share(len(ks), cap))
        step = intensify.step(d.outcome.value, d.needs_reruns > 0, len(ks), cap)
        if step.stops:
            return d.outcome.value, len(ks) + len(base) - n_base
        target = len(ks) + step.add


def main() -> None:
    rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    for cap in (3, 5):
        for rho in (0.2, 0.8):
            for effect in (0.0, 1.0, 2.0):
                for paired in (False, True):
                    out = [judge(rng, rho, effect, cap, 3, paired) for _ in range(n)]
                    keep = sum(o == "keep" for o, _ in out) / n
                    discard = sum(o == "discard" for o, _ in out) / n
                    runs = sum(r for _, r in out) / n
                    print(f"cap {cap} rho {rho} effect {effect} {'paired' if paired else 'pooled'}: "
                          f"keep {keep:.3f} discard {discard:.3f} runs/decision {runs:.2f}", flush=True)


if __name__ == "__main__":
    main()
