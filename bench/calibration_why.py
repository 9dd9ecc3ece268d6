"""What the paired loop's A/A discards on a real pool are made of: the score test or a class gate.

    .venv/bin/python bench/calibration_why.py --pool bench/out/calibration-169 --caps 4,8 --draws 600

Draws A/A judgements as ``calibration_resample.py --procedures paired`` does (the same code:
bench/calibration_procedures.py), and for each discard reads the deciding verdict's blocking
checks: ``recall.<class>`` (a class gate), the score (``weighted_f1 ...``), or anything else, named.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))
import calibration_procedures as cp  # noqa: E402
from calibration_resample import load_pool  # noqa: E402

from looper.core.keep import gate as core_gate  # noqa: E402


def kind(blocking: str, score: str) -> str:
    """A blocking check of a discard: a class gate (``recall.<class>: ...``), the score test
    (``<score> ... is below ...``), or, said in full, anything else (never counted as either)."""
    if blocking.startswith("recall."):
        return "class gate"
    if blocking.startswith(f"{score} "):
        return "score"
    return f"other ({blocking[:80]})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, required=True)
    ap.add_argument("--caps", default="4,8")
    ap.add_argument("--draws", type=int, default=600)
    ap.add_argument("--baseline-seeds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    unchanged = load_pool(args.pool, "weighted_f1").get("baseline", [])
    cfg = core_gate.GateConfig(score="weighted_f1", max_class_drop=0.05, alpha=0.05)
    for cap in (int(c) for c in args.caps.split(",")):
        rng, why = random.Random(args.seed), collections.Counter()
        ended: list[core_gate.GateDecision] = []
        for _ in range(args.draws):
            best_at, cand_at = cp.draw_aa_paired(unchanged, args.baseline_seeds, cap, rng)
            outcome, _, _ = cp.judge_paired(cfg, args.baseline_seeds, cap, best_at, cand_at, decided=ended.append)
            if outcome == "discard":
                why[" and ".join(sorted({kind(str(b), cfg.score) for b in ended[-1].verdict.blocking}))] += 1
        total = sum(why.values())
        print(f"cap {cap}: {total} discards in {args.draws} A/A judgements ({100 * total / args.draws:.1f} %): "
              + ", ".join(f"{k} {v} ({100 * v / args.draws:.1f} %)" for k, v in sorted(why.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
