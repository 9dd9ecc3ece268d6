"""The gate's score test, pooled or paired by seed (pure; the gate's rule 5, looper.core.keep.gate).

- :func:`seeded` and :func:`align` match runs by their seed numbers (the candidate runs on the
  current best's own seeds, so seed k meets seed k);
- :func:`score_test`: the pooled Student t (seed variance pooled over the baseline, the best and
  the candidate: :func:`looper.core.keep.stats.score_test`) and, with at least 2 seeds both ran, the
  paired t on the per-seed differences (:func:`looper.core.keep.stats.paired_score_test`);
  :func:`choose_test` picks the one with the narrower band, and because that choice reads the
  same runs each of the two is then held to half the look's alpha (Bonferroni over the two).
  That is ``[gate] score_test = "auto"``. ``"pooled"`` or ``"paired"`` fixes the test before any run
  (from a pairing correlation measured elsewhere, e.g. a calibration pool at the tag's budget): no
  choice reads the runs, so the fixed test gets the look's whole alpha; the other is still computed
  and reported (the night's own pairing correlation), never deciding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from looper.core.keep import stats

SCORE_TEST = "one-sided Student t, pooled seed variance"
#: ``[gate] score_test``: "auto" chooses per look (alpha split over the two), the others are fixed
SCORE_TEST_MODES = ("auto", "pooled", "paired")
PAIRED_TEST = "one-sided paired Student t on per-seed differences"


def seeded(runs: list[Any], seeds: list[int]) -> dict[int, Any] | None:
    """``{seed: run}`` when every run's seed is known and no seed repeats, else None."""
    if not seeds or len(seeds) != len(runs) or len(set(seeds)) != len(seeds):
        return None
    return dict(zip(seeds, runs, strict=True))


def align(ref: list[dict[str, Any]], ref_seeds: list[int], cand: list[dict[str, Any]],
           cand_seeds: list[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both sides with the seeds both ran first, in the candidate's order (so run j meets run j on
    the same seed), the others after; unchanged when a side's seeds are unknown."""
    r, c = seeded(ref, ref_seeds), seeded(cand, cand_seeds)
    if r is None or c is None:
        return ref, cand
    common = [s for s in c if s in r]
    return ([r[s] for s in common] + [r[s] for s in r if s not in c],
            [c[s] for s in common] + [c[s] for s in c if s not in r])


@dataclass(frozen=True)
class Chosen:
    """The score test the verdict rests on (pooled or paired), at this look."""

    name: str
    p_better: float
    p_worse: float
    band: float
    alpha: float  # the threshold this test is held to at this look


def choose_test(pooled_band: float | None, paired_band: float | None, pairs: int,
                correlation: float | None, mode: str = "auto") -> tuple[str, str]:
    """Which score test decides, and why in words (a pure rule).

    The paired test needs at least 2 seeds both ran; it is used when it is the more powerful
    of the two here, i.e. its band (the smallest difference it calls significant at this look)
    is narrower than the pooled test's, or when only it has measured noise. The bands differ
    by the measured pairing (a correlation of the paired scores narrows the paired band) and by
    their degrees of freedom (pairs - 1 against the pooled df), so the rule reads both at once.
    ``mode`` "pooled" or "paired" (``[gate] score_test``) fixes the test instead: the paired one needs
    2 seeds both ran and measured noise, so before that the pooled test decides even then.
    """
    r = f", correlation {correlation:+.2f}" if correlation is not None else ""
    if mode == "pooled" and pooled_band is not None:
        info = f"; the paired band {paired_band:.4f} on {pairs} seeds both ran{r}, for information" \
            if paired_band is not None else ""
        return "pooled", f"pooled: fixed by [gate] score_test = \"pooled\" (band {pooled_band:.4f}){info}"
    if mode == "paired" and paired_band is not None:
        return "paired", (f"paired: fixed by [gate] score_test = \"paired\" (band {paired_band:.4f} on {pairs} "
                          f"seeds both ran{r})")
    if paired_band is None:
        return "pooled", (f"pooled: {pairs} seed(s) both ran, a paired test needs 2" if pooled_band is not None
                          else "unmeasured")
    if pooled_band is None:
        return "paired", f"paired: {pairs} seeds both ran ({paired_band:.4f} band{r}); the pooled noise is unmeasured"
    if paired_band < pooled_band:
        return "paired", (f"paired: its band {paired_band:.4f} on {pairs} seeds both ran{r} is narrower than "
                          f"the pooled band {pooled_band:.4f}")
    return "pooled", (f"pooled: its band {pooled_band:.4f} is not wider than the paired band {paired_band:.4f} "
                      f"on {pairs} seeds both ran{r}")


def score_test(cand_scores: list[float], best_scores: list[float], base_scores: list[float], best_is_ref: bool,
               pairs: list[tuple[int, float, float]], key: str, alpha: float, facts: dict[str, Any],
               mode: str = "auto") -> Chosen | None:
    """The one-sided seed-noise test of the score at this look's ``alpha``, pooled or paired (None when
    the noise is unmeasured). ``pairs``: (seed, candidate score, best score) for the seeds both ran;
    ``mode``: ``[gate] score_test`` (:data:`SCORE_TEST_MODES`).
    Writes what it found into the verdict's ``facts`` (docs/INTERFACES.md)."""
    n = len(cand_scores)
    score, best = facts["score"], facts["best_score"]
    diff = score - best
    groups = [cand_scores, best_scores] if best_is_ref else [cand_scores, best_scores, base_scores]
    sigma, df = stats.pooled_sigma(groups)
    measured = len(best_scores) >= 2 or len(base_scores) >= 2
    # With two tests to choose from, each is held to half the look's alpha (Bonferroni over the two):
    # the choice reads the same runs (the narrower band wins), so only the split keeps the error at alpha.
    # A test fixed in advance (mode pooled or paired) reads nothing of the runs: the look's whole alpha.
    two = len(pairs) >= 2 and measured
    split = two and mode == "auto"  # a choice between two tests that reads the runs
    each = alpha / 2 if split else alpha
    pooled = stats.score_test(cand_scores, best_scores, sigma, df) if measured else None
    pooled_band = stats.score_band(sigma, df, n, len(best_scores), each) if measured else None
    paired = paired_band = None
    if two:
        paired = stats.paired_score_test([c for _, c, _ in pairs], [b for _, _, b in pairs])
        paired_band = stats.paired_band(paired.sd, paired.pairs, each)
    which, why = choose_test(pooled_band, paired_band, len(pairs), paired.correlation if paired else None, mode)
    facts.update({"noise_measured": measured, "noise_sigma": sigma if measured else None,
                  "noise_df": df if measured else 0, "paired_seeds": [s for s, _, _ in pairs],
                  "score_test_choice": why})
    if paired is not None:
        facts["paired_test"] = {"test": PAIRED_TEST, "pairs": paired.pairs, "diff": paired.diff,
                                "sd": paired.sd, "df": paired.df, "se": paired.se,
                                "t": paired.t if math.isfinite(paired.t) else None, "p_better": paired.p_better,
                                "p_worse": paired.p_worse, "correlation": paired.correlation,
                                "band": paired_band}
    if pooled is None or pooled_band is None:  # (two seeds both ran need two runs of the best: measured)
        facts["notes"].append(
            f"noise unmeasured: the baseline has {len(base_scores) or 1} run(s) and the current best "
            f"{len(best_scores)}; at least 2 seeds of one of them are needed to judge the score")
        facts["summary"] = f"{key} {score:.4f} vs best {best:.4f} ({diff:+.4f}, noise unmeasured)"
        facts["noise_band"] = None
        return None
    facts["score_test"] = {"test": SCORE_TEST, "t": pooled.t if math.isfinite(pooled.t) else None,
                           "df": df, "se": pooled.se, "p_better": pooled.p_better, "p_worse": pooled.p_worse}
    facts["notes"].append(
        f"pooled noise band {pooled_band:.4f}: {SCORE_TEST} at {each:.4g}, sigma {sigma:.4f} (df {df}), "
        f"{n} candidate vs {len(best_scores)} best run(s)")
    chosen = Chosen(SCORE_TEST, pooled.p_better, pooled.p_worse, pooled_band, each)
    if split:
        facts["notes"].append(f"two score tests to choose from: each at half the look's alpha, {each:.4g}")
    if which == "paired" and paired is not None and paired_band is not None:
        chosen = Chosen(PAIRED_TEST, paired.p_better, paired.p_worse, paired_band, each)
        facts["notes"].append(f"paired noise band {paired_band:.4f}: {PAIRED_TEST} at {each:.4g} over seeds "
                              f"{', '.join(str(s) for s, _, _ in pairs)}")
    facts["notes"].append(f"score test: {why}")
    facts["score_test_used"] = chosen.name
    facts["score_test_alpha"] = chosen.alpha
    facts["summary"] = f"{key} {score:.4f} vs best {best:.4f} ({diff:+.4f}, noise band {chosen.band:.4f})"
    facts["noise_band"] = chosen.band
    return chosen
