"""Synthetic calibration of the gate's statistics (looper.core.keep.gate.decide), no training involved.

Each judgement draws a baseline of SEEDS runs and judges a candidate the way the loop does
(one seed, then one more per inconclusive look, up to RERUNS). A run's per-instance results
come from one of two models over 26 classes of N instances:

- independent: every instance is found with probability q_c * p;
- clustered: a run learns class c with probability q_c (then finds each instance with
  probability p, else 0.05): the learned-or-missed-as-a-whole swing the issue's A/A showed.

The score is the mean recall. ``--effect`` changes the candidate's p (0.85 for the baseline):
0 is an A/A, negative a planted degradation, positive a planted gain.

    .venv/bin/python scripts/gate_synthetic.py --trials 200
    .venv/bin/python scripts/gate_synthetic.py --trials 200 --effect -0.25
"""

from __future__ import annotations

import argparse

import numpy as np

from looper.core.keep.gate import GateConfig, GateInput, decide
from looper.core.verdicts.verdict import Outcome

P_BASE = 0.85


def make_run(rng: np.random.Generator, q: np.ndarray, p: float, n: int, clustered: bool) -> dict:
    classes, recalls = {}, []
    for c, qc in enumerate(q):
        if clustered:
            found = (rng.random(n) < (p if rng.random() < qc else 0.05)).astype(int)
        else:
            found = (rng.random(n) < qc * p).astype(int)
        classes[f"c{c}"] = {"tp": int(found.sum()), "fp": 1, "support": n, "recall": float(found.mean()),
                            "found": [int(x) for x in found]}
        recalls.append(found.mean())
    return {"weighted_f1": float(np.mean(recalls)), "predictions": 100, "classes": classes}


def judge(rng: np.random.Generator, q: np.ndarray, n: int, clustered: bool, effect: float, seeds: int,
          reruns: int) -> tuple[str, int]:
    base = [make_run(rng, q, P_BASE, n, clustered) for _ in range(seeds)]
    runs = [make_run(rng, q, P_BASE + effect, n, clustered)]
    left = reruns
    while True:
        d = decide(GateInput(runs, base, base[0], "tag-start", baseline_runs=base), GateConfig(), left)
        if d.outcome is Outcome.INCONCLUSIVE and d.needs_reruns and left:
            runs.append(make_run(rng, q, P_BASE + effect, n, clustered))
            left -= 1
            continue
        if d.outcome is Outcome.DISCARD:
            return ("discard_class" if d.verdict.blocking[0].startswith("recall.") else "discard_score"), len(runs)
        return d.outcome.value, len(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--effect", type=float, default=0.0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--reruns", type=int, default=2)
    a = ap.parse_args()
    for clustered in (False, True):
        for n in (10, 20):
            rng = np.random.default_rng(1)
            q = rng.uniform(0.4, 1.0, 26)
            counts: dict[str, int] = {}
            used = 0
            for _ in range(a.trials):
                what, k = judge(rng, q, n, clustered, a.effect, a.seeds, a.reruns)
                counts[what] = counts.get(what, 0) + 1
                used += k
            shown = ", ".join(f"{k} {counts.get(k, 0) / a.trials:.3f}"
                              for k in ("keep", "discard_class", "discard_score", "inconclusive"))
            print(f"{'clustered  ' if clustered else 'independent'} n={n:2d} effect={a.effect:+.2f} "
                  f"trials={a.trials}: {shown}; seeds per judgement {used / a.trials:.2f}")


if __name__ == "__main__":
    main()
