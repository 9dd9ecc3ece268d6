"""The statistics behind the gate's verdicts (pure functions: numbers in, numbers out).

Everything here answers one question with a stated error rate:

- :func:`mcnemar_exact`: did a class lose test instances beyond chance? The exact McNemar
  test on the discordant pairs (instances found by the reference and missed by the
  candidate, ``lost``, against the reverse, ``gained``), one-sided: only a loss can fail a
  class, so no alpha is spent on gains.
- :func:`lost_found_unpaired`: the same question when per-instance results are missing (old
  METRICS.json without ``found``): Fisher's exact test on the pooled found/missed counts, one
  sided. Without pairing it ignores that both sides saw the same instances, so it is the
  weaker test; verdicts say when it was used.
- :func:`dispersion`: how much more class recalls vary between seeds than independent
  instances would; the class tests deflate their counts by it.
- :func:`holm`: Holm's step-down family-wise control over the classes tested together.
- :func:`score_test`: is the candidate's score better (or worse) than the current best's
  beyond the measured seed noise? A one-sided Student t-test with the seed variance pooled
  over every group of replicate runs (baseline, current best, candidate).
- :func:`score_band`: the smallest difference that test would call significant.
- :func:`recall_interval`: a Wilson interval for a class's recall pooled over seeds.

Why Student's pooled t and not Welch, a bootstrap or a probability-of-outperforming test:
the loop judges a candidate after **one** seed and adds seeds one at a time, so the
candidate's own variance is usually unmeasured; the baseline's seeds measure the seed noise
of this exact pipeline (same data, same budget), and pooling it is what "beyond the measured
seed noise" means. Welch needs at least two runs on each side; a bootstrap over 1 to 3 runs
has a handful of distinct resamples and is anti-conservative; a probability-of-outperforming
estimate (Bouthillier et al., MLSys 2021) needs tens of seeds to be stable. The price is the
equal-variance assumption, and the t distribution's heavy tails at 2 to 4 degrees of
freedom (a wide band with few seeds, which is the honest answer).

Why not ONLY a paired test on the score, when the loop runs a candidate's seed k against the
best's seed k: a paired test estimates the variance of the differences from the pairs alone,
so after 1 candidate seed it has none and after 2 or 3 it has 1 or 2 degrees of freedom (t
quantiles of 6 to 19 at the loop's per-look alpha), while the pooled test has the baseline's
seeds from the first look. Pairing pays when the paired scores are strongly correlated; measured
on demo data at 300 steps (bench/RESULTS.md), a learning rate 6x too low against the unchanged
train.py on the same 4 seeds correlated 0.19: the differences spread as much as the scores. A
no-op on the baseline's own seeds reproduces the baseline's METRICS.json exactly (seed k = seed
k), a tie the gate never keeps or discards. The pooled test treats the paired candidate as
independent of the baseline; when it is positively correlated that overstates the variance of
the difference, so the test errs on the side of inconclusive. So the gate computes both where it
can (:func:`paired_score_test`, :func:`paired_band`) and lets the narrower band decide
(:func:`looper.core.keep.score.choose_test`): where the same seed (the same data order, augmentation
and initial weights under a step budget) makes paired scores correlate strongly, the paired band
is the narrower one after 2 to 4 seeds; where they barely correlate (0.19 above), the pooled test
keeps deciding. Taking the narrower of two bands reads the same data, so each test is then held
to half the look's alpha (Bonferroni over the two tests keeps the error at alpha). Where the
pairing was measured elsewhere, ``[gate] score_test`` fixes one test in advance at the whole alpha
(at the demo's budget the pooled one: paired seeds correlate -0.13 to 0.17 there).

Instances of one class in one run are not independent: a run that happens to learn a class
late misses all of its instances together (the issue's A/A: "exhaust_fan 1.00 -> 0" on an
unchanged train.py). Counted as independent, such a swing looks overwhelmingly significant.
:func:`dispersion` measures it from replicate runs (pooled over classes, as quasi-binomial
models do) and the class tests count each instance as ``1/phi`` of one; with a single
reference run phi cannot be measured and the tests are the plain exact ones.

scipy is used for the exact binomial and hypergeometric tails (``binomtest``,
``fisher_exact``), the t distribution and the Wilson interval: well-tested implementations
of formulas that are easy to get subtly wrong by hand.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def _st() -> Any:
    """scipy.stats, imported where a test is computed: importing it takes about 0.7 s, which every command that
    reads looper.toml (``looper status``, the report) would pay for nothing."""
    from scipy import stats

    return stats


def _special() -> Any:
    from scipy import special

    return special


@dataclass(frozen=True)
class ClassCounts:
    """One class, reference vs candidate, pooled over the runs compared.

    ``*_found`` of ``*_total`` instance-runs (instances x runs) per side. ``paired``: the
    counts come from per-instance results paired by seed, ``runs`` pairs of runs, and
    ``lost``/``gained`` are the discordant pairs; otherwise only the pooled found counts are
    known (``runs``, ``lost`` and ``gained`` are 0).
    """

    ref_found: int
    ref_total: int
    cand_found: int
    cand_total: int
    paired: bool
    runs: int = 0
    lost: int = 0
    gained: int = 0

    @property
    def drop(self) -> float:
        """Recall lost, reference minus candidate (negative: the candidate found more)."""
        ref = self.ref_found / self.ref_total if self.ref_total else 0.0
        cand = self.cand_found / self.cand_total if self.cand_total else 0.0
        return ref - cand


def mcnemar_exact(lost: int, gained: int, dispersion: float = 1.0) -> float:
    """One-sided exact McNemar p-value that losses outnumber gains beyond chance.

    Under the null the candidate and the reference are exchangeable on each instance, so a
    discordant pair is a loss with probability 1/2: ``P(X >= lost)``, ``X ~ Bin(lost+gained, 1/2)``.
    No loss: p = 1. With ``dispersion`` phi > 1 (see :func:`dispersion`) each pair counts as
    1/phi of an independent one: the same tail at ``lost/phi`` of ``(lost+gained)/phi``, through
    its continuous form ``I_1/2(lost/phi, gained/phi + 1)`` (equal to the binomial tail at whole
    counts; phi = 1 is the exact test).
    """
    if lost < 0 or gained < 0:
        raise ValueError(f"counts must be >= 0, got lost={lost}, gained={gained}")
    if not (math.isfinite(dispersion) and dispersion >= 1.0):
        raise ValueError(f"dispersion must be >= 1, got {dispersion!r}")
    if lost == 0:
        return 1.0
    if dispersion == 1.0:
        return float(_st().binomtest(lost, lost + gained, 0.5, alternative="greater").pvalue)
    return float(_special().betainc(lost / dispersion, gained / dispersion + 1.0, 0.5))


def lost_found_unpaired(ref_found: int, ref_total: int, cand_found: int, cand_total: int) -> float:
    """One-sided Fisher exact p-value that the reference's found rate beats the candidate's.

    Only pooled counts are known (no pairing); the totals may differ (more runs on one side).
    """
    if not (0 <= ref_found <= ref_total and 0 <= cand_found <= cand_total):
        raise ValueError(f"found counts must lie in [0, total], got {ref_found}/{ref_total} "
                         f"and {cand_found}/{cand_total}")
    if ref_total == 0 or cand_total == 0:
        return 1.0
    table = [[ref_found, ref_total - ref_found], [cand_found, cand_total - cand_found]]
    return float(_st().fisher_exact(table, alternative="greater").pvalue)


def class_p_value(counts: ClassCounts, dispersion: float = 1.0) -> float:
    """The p-value of ``counts``' loss: exact McNemar when paired, else Fisher's exact test.

    ``dispersion`` phi > 1 deflates the counts (McNemar: continuously; Fisher: counts / phi,
    rounded), so that a class whose recall swings between seeds is not condemned on instances
    that were lost together.
    """
    if counts.paired:
        return mcnemar_exact(counts.lost, counts.gained, dispersion)
    if not (math.isfinite(dispersion) and dispersion >= 1.0):
        raise ValueError(f"dispersion must be >= 1, got {dispersion!r}")
    c = [round(x / dispersion) for x in (counts.ref_found, counts.ref_total, counts.cand_found, counts.cand_total)]
    return lost_found_unpaired(*c)


Run = tuple[int, int] | tuple[int, int, Sequence[int]]
"""One run of one class: ``(found, support)``, or ``(found, support, instances)`` with the per-instance 0/1."""


def _sample_variances(runs: Sequence[Run]) -> tuple[float, float, int] | None:
    """(observed, expected, df) of one sample, each already times its ``k - 1``; None when it shows nothing.

    observed: the variance of the runs' found counts. expected: what it would be if the instances
    were found independently of each other: the sum of each instance's own variance over the runs
    when every run lists its instances (instances differ: one is always found, another found one
    run in two; this is also the variance the paired McNemar test assumes), else the binomial
    ``n p (1 - p)`` of the pooled rate, which overstates it when instances differ.
    """
    k = len(runs)
    if k < 2 or any(r[1] <= 0 for r in runs):
        return None
    counts = [r[0] for r in runs]
    lists = [r[2] for r in runs if len(r) > 2]
    if len(lists) == k and len({len(x) for x in lists}) == 1:
        # each instance's sample variance over the k runs, from its found count f: (k f - f^2) / (k (k - 1))
        found = [sum(column) for column in zip(*lists, strict=True)]
        expected = sum(k * f - f * f for f in found) / (k * (k - 1))
    else:
        n = sum(r[1] for r in runs) / k
        pooled = sum(counts) / (n * k)
        expected = n * pooled * (1 - pooled)
    if expected <= 0:
        return None  # every instance found in every run or in none: no spread to measure
    return statistics.variance(counts) * (k - 1), expected * (k - 1), k - 1


def dispersion(samples: Sequence[Sequence[Run]]) -> tuple[float, int]:
    """How much more a class's found count varies between seeds than independent instances explain.

    Each sample is one class of one source: one :data:`Run` per run (different seeds).
    phi = sum over samples of ``(k-1) * s^2`` / sum of ``(k-1) * v`` (s^2: the variance of the runs'
    found counts; v: their variance were instances found independently, see :func:`_sample_variances`;
    k: the runs): the quasi-binomial dispersion, pooled over samples. 1 when instances are
    independent; large when a run learns a class or misses it as a whole. Returns (max(phi, 1),
    degrees of freedom); (1, 0) when nothing was replicated.
    """
    observed = expected = 0.0
    df = 0
    for runs in samples:
        got = _sample_variances(runs)
        if got is None:
            continue
        observed, expected, df = observed + got[0], expected + got[1], df + got[2]
    if not df:
        return 1.0, 0
    return max(1.0, observed / expected), df


def paired_counts(reference: Sequence[Sequence[int]], candidate: Sequence[Sequence[int]]) -> ClassCounts:
    """Pool per-instance results of one class over seeds, pairing run j with run j.

    Each run is a list of 0/1, one per test instance, in the same order. Runs are paired by
    position (the loop measures seeds ``data.seed + 0, 1, ...`` on both sides, so position j
    is the same seed); runs beyond the shorter side are left out rather than paired twice,
    because reusing a run in two pairs would make the pairs dependent.
    """
    runs = min(len(reference), len(candidate))
    if runs == 0:
        raise ValueError("both sides need at least one run")
    lost = gained = ref_found = cand_found = total = 0
    for ref, cand in zip(reference[:runs], candidate[:runs], strict=True):
        if len(ref) != len(cand):
            raise ValueError(f"the runs cover different instances ({len(ref)} vs {len(cand)})")
        for r, c in zip(ref, cand, strict=True):
            lost += int(bool(r) and not c)
            gained += int(bool(c) and not r)
            ref_found += int(bool(r))
            cand_found += int(bool(c))
        total += len(ref)
    return ClassCounts(ref_found, total, cand_found, total, True, runs, lost, gained)


def unpaired_counts(reference: Sequence[int], candidate: Sequence[int], support: int) -> ClassCounts:
    """Pool found counts (one per run, each out of ``support`` instances), unpaired."""
    if not reference or not candidate:
        raise ValueError("both sides need at least one run")
    return ClassCounts(sum(reference), support * len(reference), sum(candidate), support * len(candidate),
                       False)


@dataclass(frozen=True)
class HolmResult:
    """One test of a family: its p-value, the Holm threshold it was held to, the outcome."""

    p: float
    threshold: float
    rejected: bool


def holm(p_values: Sequence[float], alpha: float) -> list[HolmResult]:
    """Holm's step-down procedure: family-wise error <= ``alpha`` under any dependence.

    Sort the p-values ascending; the i-th smallest (0-based) is held to ``alpha / (m - i)``;
    reject until the first one above its threshold, accept it and every larger one. Results
    come back in input order, each with the threshold of its rank.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out: list[HolmResult | None] = [None] * m
    still = True
    for rank, i in enumerate(order):
        threshold = alpha / (m - rank)
        still = still and p_values[i] <= threshold
        out[i] = HolmResult(float(p_values[i]), threshold, still)
    return [r for r in out if r is not None]


@dataclass(frozen=True)
class ScoreTest:
    """The candidate's mean score vs the current best's, against the pooled seed noise."""

    diff: float  # mean(candidate) - mean(best)
    sigma: float  # pooled seed standard deviation
    df: int  # its degrees of freedom
    se: float  # standard error of diff
    t: float  # diff / se (+-inf when se is 0 and diff is not)
    p_better: float  # one-sided p-value that the candidate is better
    p_worse: float  # one-sided p-value that it is worse


def pooled_sigma(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """Pooled standard deviation over groups of replicate runs, and its degrees of freedom.

    Each group is the scores of one source under different seeds; a one-run group adds
    nothing. ``df = sum(n_g - 1)``; with ``df == 0`` the noise is unmeasured (sigma is nan).
    """
    ss = 0.0
    df = 0
    for g in groups:
        if len(g) > 1:
            ss += statistics.variance(g) * (len(g) - 1)  # exact: identical runs give exactly 0
            df += len(g) - 1
    return (math.sqrt(ss / df) if df else math.nan), df


def score_test(candidate: Sequence[float], best: Sequence[float], sigma: float, df: int) -> ScoreTest:
    """One-sided Student t-tests of mean(candidate) vs mean(best) with a pooled ``sigma``.

    ``se = sigma * sqrt(1/n_candidate + 1/n_best)``, ``t = diff / se`` on ``df`` degrees of
    freedom. With zero noise (``sigma == 0``) any difference is certain and none is a tie.
    """
    if not candidate or not best:
        raise ValueError("both sides need at least one score")
    if df < 1 or not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"the noise must be measured (df >= 1, sigma >= 0), got df={df}, sigma={sigma}")
    diff = float(statistics.mean(candidate)) - float(statistics.mean(best))  # exact means
    se = sigma * math.sqrt(1 / len(candidate) + 1 / len(best))
    if se == 0:
        t = math.copysign(math.inf, diff) if diff else 0.0
        return ScoreTest(diff, sigma, df, se, t, 0.0 if diff > 0 else 1.0, 0.0 if diff < 0 else 1.0)
    t = diff / se
    return ScoreTest(diff, sigma, df, se, t, float(_st().t.sf(t, df)), float(_st().t.cdf(t, df)))


def score_band(sigma: float, df: int, n_candidate: int, n_best: int, alpha: float) -> float:
    """The smallest |diff| that :func:`score_test` calls significant at one-sided ``alpha``.

    ``t_(1-alpha, df) * sigma * sqrt(1/n_candidate + 1/n_best)``: never wider with more
    seeds on either side or more degrees of freedom.
    """
    if df < 1 or n_candidate < 1 or n_best < 1:
        raise ValueError("a band needs df >= 1 and at least one run per side")
    return float(_st().t.ppf(1.0 - alpha, df)) * sigma * math.sqrt(1 / n_candidate + 1 / n_best)


@functools.lru_cache(maxsize=4096)
def recall_interval(found: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a recall of ``found`` of ``total`` instance-runs.

    Wilson rather than the normal approximation: it stays inside [0, 1] and is sensible at
    0 of n and n of n, the usual case for a rare class. ``total == 0``: (0, 1), nothing known.
    Memoised: scipy's ``binomtest`` takes about a millisecond per call and a report asks for
    the same few counts for every class of every experiment (an immutable tuple is returned).
    """
    if not 0 <= found <= total:
        raise ValueError(f"found must lie in [0, {total}], got {found}")
    if total == 0:
        return 0.0, 1.0
    ci = _st().binomtest(found, total).proportion_ci(confidence_level=confidence, method="wilson")
    return max(0.0, float(ci.low)), min(1.0, float(ci.high))


@dataclass(frozen=True)
class PairedTest:
    """The candidate's scores minus the current best's on the seeds both ran (one pair per seed)."""

    diff: float  # mean of the per-seed differences
    sd: float  # their standard deviation
    df: int  # pairs - 1
    se: float  # sd / sqrt(pairs)
    t: float
    p_better: float
    p_worse: float
    pairs: int
    correlation: float | None  # of the paired scores (None: fewer than 3 pairs or no spread on a side)


def paired_score_test(candidate: Sequence[float], best: Sequence[float]) -> PairedTest:
    """One-sided paired Student t-tests on ``candidate[j] - best[j]`` (same seed j on both sides).

    Needs at least 2 pairs (the variance of the differences is measured from the pairs alone).
    Zero spread of the differences: any mean difference is certain, none is a tie.
    """
    if len(candidate) != len(best) or len(candidate) < 2:
        raise ValueError(f"a paired test needs >= 2 pairs of equal length, got {len(candidate)} and {len(best)}")
    d = [float(c) - float(b) for c, b in zip(candidate, best, strict=True)]
    n = len(d)
    diff, sd = float(statistics.mean(d)), statistics.stdev(d)
    corr = None
    if n >= 3 and statistics.pstdev(candidate) > 0 and statistics.pstdev(best) > 0:
        corr = float(statistics.correlation([float(c) for c in candidate], [float(b) for b in best]))
    se = sd / math.sqrt(n)
    if se == 0:
        t = math.copysign(math.inf, diff) if diff else 0.0
        return PairedTest(diff, sd, n - 1, se, t, 0.0 if diff > 0 else 1.0, 0.0 if diff < 0 else 1.0, n, corr)
    t = diff / se
    return PairedTest(diff, sd, n - 1, se, t, float(_st().t.sf(t, n - 1)), float(_st().t.cdf(t, n - 1)), n, corr)


def paired_band(sd: float, pairs: int, alpha: float) -> float:
    """The smallest |mean difference| :func:`paired_score_test` calls significant at one-sided ``alpha``."""
    if pairs < 2:
        raise ValueError("a paired band needs at least 2 pairs")
    return float(_st().t.ppf(1.0 - alpha, pairs - 1)) * sd / math.sqrt(pairs)


@dataclass(frozen=True)
class Interval:
    """mean(a) - mean(b) with a two-sided Student interval: Welch's (each side's own seed variance)
    where both sides have two scores or more, else the variance pooled over both sides (``method``)."""

    diff: float
    low: float
    high: float
    sigma: float  # the standard error of diff (Welch) or the pooled seed sd (pooled)
    df: float
    confidence: float
    method: str = "pooled"  # "welch" | "pooled"


def _interval_inputs(a: Sequence[float], b: Sequence[float], confidence: float) -> tuple[float, float]:
    """The checks every interval of two groups makes; returns (mean(a) - mean(b), the t quantile's level)."""
    if not a or not b or len(a) + len(b) < 3:
        raise ValueError(f"an interval needs >= 1 score per side and >= 3 in all, got {len(a)} and {len(b)}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(statistics.mean(a)) - float(statistics.mean(b)), (1.0 + confidence) / 2.0


def pooled_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Interval:
    """``diff +- t_((1+confidence)/2, df) * sigma * sqrt(1/n_a + 1/n_b)``, sigma pooled over both groups,
    ``df = n_a + n_b - 2``: the Student interval, which assumes both groups spread alike."""
    diff, q = _interval_inputs(a, b, confidence)
    sigma, df = pooled_sigma([a, b])
    half = float(_st().t.ppf(q, df)) * sigma * math.sqrt(1 / len(a) + 1 / len(b))
    return Interval(diff, diff - half, diff + half, sigma, df, confidence, "pooled")


def diff_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Interval:
    """Two independent groups of seeds (e.g. the night's best on fresh seeds vs the baseline's own).

    Welch (both sides >= 2 scores): ``diff +- t_((1+confidence)/2, df) * sqrt(v_a/n_a + v_b/n_b)``, df by
    Welch-Satterthwaite. A change can change the seed spread (bench/RESULTS.md: LR0 0.003 spreads its
    seeds a third as much as the baseline's LR0 0.01), and pooling a calm side with a noisy one, the
    noisy side holding more seeds, overstates the difference's noise. One side with a single score has
    no variance of its own: :func:`pooled_interval`."""
    diff, q = _interval_inputs(a, b, confidence)
    if len(a) < 2 or len(b) < 2:
        return pooled_interval(a, b, confidence)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    df = ((va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if se > 0
          else float(len(a) + len(b) - 2))  # both sides reproduce exactly: no spread to weigh
    half = float(_st().t.ppf(q, df)) * se
    return Interval(diff, diff - half, diff + half, se, df, confidence, "welch")
