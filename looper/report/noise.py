"""The night's noise in words and bars: why nothing was kept (:func:`nothing_kept`) and the
mean +- band of every experiment measured with several seeds (:func:`seed_bars`)."""

from __future__ import annotations

import statistics

from looper.report.fmt import id_list
from looper.report.night import DEFAULT_ALPHA, UNMEASURED, Night, SeedBar, _digits

__all__ = ["nothing_kept", "seed_bars"]


def nothing_kept(n: Night) -> list[str]:
    """Why the window kept no candidate, in numbers; [] when something was kept or nothing judged.

    "no change beat the noise band 0.040 (alpha 0.05): ..." over the judged experiments whose
    noise was measured, and "noise unmeasured: no keep or discard on the score alone" for
    those whose noise was not.
    """
    if n.kept:
        return []
    cands = [e for e in n.experiments if e.kind == "candidate"]
    judged = [n.judgements[e.id] for e in cands if e.id in n.judgements]
    lines: list[str] = []
    measured = [j for j in judged if j.where != "unmeasured"]
    if measured:
        bands = sorted(j.band for j in measured if j.band is not None)
        d = _digits(bands[0])
        band = f"{bands[0]:.{d}f}" if bands[-1] - bands[0] < 0.5 * 10 ** -d else f"{bands[0]:.{d}f} to {bands[-1]:.{d}f}"
        alphas = sorted({j.alpha for j in measured})
        alpha = ", ".join(f"{a:g}" for a in alphas)
        counts = {w: sum(1 for j in measured if j.where == w) for w in ("inside the noise", "below the noise",
                                                                        "beyond the noise")}
        classes = sum(1 for j in measured if j.class_failures)
        close = max((j for j in measured if j.diff is not None), key=lambda j: j.diff or 0.0, default=None)
        parts = [f"{counts['inside the noise']} inside the noise", f"{counts['below the noise']} worse beyond it"]
        if counts["beyond the noise"]:
            parts.append(f"{counts['beyond the noise']} better beyond it but failed a class gate")
        line = (f"no change beat the noise band {band} (alpha {alpha}): of {len(measured)} judged, "
                + ", ".join(parts) + f"; {classes} failed a class gate")
        if close is not None and close.diff is not None and close.band is not None:
            dd = _digits(close.diff, close.band)
            line += f"; closest #{close.id} at {close.diff:+.{dd}f} vs its band {close.band:.{dd}f}"
        lines.append(line)
    unmeasured = [j for j in judged if j.where == "unmeasured"]
    if unmeasured:
        src = f"#{n.baseline.id}" if n.baseline is not None else n.baseline_source
        lines.append(f"{UNMEASURED} ({len(unmeasured)} judged: {id_list(j.id for j in unmeasured)}; the baseline "
                     f"{src} was measured with {n.baseline_seeds} seed(s), at least 2 are needed)")
    if not lines and cands:
        scored = [e for e in cands if e.score is not None]
        if scored:
            lines.append(f"no candidate was kept: {len(cands)} tried, {len(scored)} scored; their verdicts carry "
                         "no noise figures (judged before the statistical gate)")
        else:
            counts: dict[str, int] = {}
            for e in cands:
                counts[e.status.value] = counts.get(e.status.value, 0) + 1
            lines.append(f"no candidate was kept: {len(cands)} tried, none measured a score ("
                         + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")")
    return lines


def seed_bars(n: Night) -> list[SeedBar]:
    """Scored experiments measured with more than one seed: mean +- the band their verdict used.

    A candidate's band is its verdict's noise band (the smallest difference from the best its
    score test calls significant). The baseline has no verdict: its band is the one a
    one-seed candidate would have to beat, from the spread of its own seeds (one-sided t at
    the night's alpha).
    """
    from looper.core.keep import stats

    out: list[SeedBar] = []
    alpha = next((j.alpha for j in n.judgements.values()), DEFAULT_ALPHA)
    for e in n.scored:
        j = n.judgements.get(e.id)
        if j is not None and j.n_candidate > 1 and j.band is not None:
            mean = statistics.fmean(j.candidate_scores)
            out.append(SeedBar(e.id, mean, j.band, j.candidate_scores,
                               f"noise band of its verdict at alpha {j.alpha_look:.3g}"))
            continue
        scores = n.baseline_scores.get(e.id, ())
        if len(scores) > 1:
            sigma = statistics.stdev(scores)
            band = stats.score_band(sigma, len(scores) - 1, 1, len(scores), alpha)
            out.append(SeedBar(e.id, statistics.fmean(scores), band, scores,
                               f"the band a one-seed candidate must beat, alpha {alpha:g} (sigma {sigma:.4f})"))
    return out
