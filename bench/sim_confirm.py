"""The morning's confirmation on synthetic scores: how often a real gain confirms, how often an A/A does.

Pure: the real looper.core.keep.confirm.judge (Welch's interval; pooled with one score a side) beside the
pooled Student interval it replaced, no training. The baseline's seeds score normal(0, sd_base), the
best's fresh seeds normal(effect, sd_best); one row per (baseline seeds, fresh seeds, case), ``--draws``
confirmations each. Cases: ``gain`` (``--effect`` with each side's own sd, e.g. the 169-step pool's
LR0 0.003 against the baseline's LR0 0.01), ``aa`` (no effect, equal sds: the same code on other seeds)
and ``aa-calm`` (no effect, the best's smaller sd). "Confirmed" is the interval's lower end above 0, so
an A/A row's rate is a one-sided error, nominally 2.5 %.

    python bench/sim_confirm.py --draws 20000 --sd-base 0.0147 --sd-best 0.0049 --effect 0.0201 \
        --configs 4:2,4:3,5:2,5:3,6:2,6:3 --md bench/calibration/sim-confirm-169b.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from looper.core.keep import confirm as core_confirm  # noqa: E402
from looper.core.keep import stats


def rate(nb: int, nc: int, sd_base: float, sd_best: float, effect: float, draws: int,
         rng: np.random.Generator) -> tuple[float, float]:
    """(Welch via core_confirm.judge, pooled): share of draws confirmed."""
    welch = pooled = 0
    for _ in range(draws):
        base = rng.normal(0.0, sd_base, nb).tolist()
        best = rng.normal(effect, sd_best, nc).tolist()
        welch += core_confirm.judge(best, base, "weighted_f1", nc).status == core_confirm.CONFIRMED
        pooled += stats.pooled_interval(best, base).low > 0
    return welch / draws, pooled / draws


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--sd-base", type=float, required=True)
    ap.add_argument("--sd-best", type=float, required=True)
    ap.add_argument("--effect", type=float, required=True)
    ap.add_argument("--configs", default="4:2,4:3,5:3,6:2,6:3", help="baseline seeds:fresh seeds pairs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--md", type=Path, default=None, help="write the table here too")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    cases = (("gain", args.effect, args.sd_best), ("aa", 0.0, args.sd_base), ("aa-calm", 0.0, args.sd_best))
    lines = [f"sd_base {args.sd_base:g}, sd_best {args.sd_best:g}, effect {args.effect:g}, {args.draws} draws a row",
             "", "| baseline / fresh seeds | case | confirmed, Welch (looper) | confirmed, pooled |",
             "| --- | --- | ---: | ---: |"]
    for cfg in args.configs.split(","):
        nb, nc = (int(x) for x in cfg.split(":"))
        for name, effect, sd_best in cases:
            w, p = rate(nb, nc, args.sd_base, sd_best, effect, args.draws, rng)
            lines.append(f"| {nb} / {nc} | {name} | {w:.1%} | {p:.1%} |")
    text = "\n".join(lines)
    print(text)
    if args.md:
        args.md.write_text(f"`python bench/sim_confirm.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n\n"
                           f"{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
