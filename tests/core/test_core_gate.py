"""The gate: candidate vs best vs baseline; class drops, lost classes, noise, dead gates."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest
from scipy.stats import t as scipy_t

from looper.core.keep.gate import (
    GateConfig,
    GateInput,
    class_recall_spread,
    dead_gates,
    decide,
)
from looper.core.verdicts.verdict import Outcome, Status

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


# -- outcomes ------------------------------------------------------------------------------------


def test_a_clear_win_is_kept() -> None:
    d = gate(run(0.50, BASE))
    assert d.outcome is Outcome.KEEP and d.verdict.ok and d.verdict.blocking == []
    assert d.score == pytest.approx(0.50) and d.needs_reruns == 0
    m = d.verdict.metrics
    assert m["baseline"] == "tag-start" and m["dead_gates"] == []
    assert m["best_score"] == pytest.approx(0.40) and m["diff"] == pytest.approx(0.10)
    assert m["noise_band"] == pytest.approx(band()) and m["noise_sigma"] == pytest.approx(0.01)
    assert m["noise_df"] == 2 and m["looks"] == 3 and m["alpha_per_look"] == pytest.approx(0.05 / 3)
    assert m["score_test"]["p_better"] < 0.05 / 3 < m["score_test"]["p_worse"]


def test_a_win_inside_the_measured_noise_is_not_kept_at_once() -> None:
    # +0.05 would have been kept by the old 2-sigma band (0.02); three seeds of noise say wait.
    d = gate(run(0.45, BASE))
    assert d.outcome is Outcome.INCONCLUSIVE and d.needs_reruns == 1
    assert 0.05 < d.verdict.metrics["noise_band"] == pytest.approx(band())


def test_a_class_drop_fails_with_the_exact_words() -> None:
    base = run(0.40, BASE, found={"return_grille": hits(20, 12)})
    d = gate(run(0.50, BASE, found={"return_grille": hits(20, 0)}), baseline=base)
    assert d.outcome is Outcome.DISCARD and d.verdict.status is Status.FAIL
    # 12 lost, 0 gained: p = 0.5**12 = 0.00024; Holm's first threshold 0.05 / 3 looks / 4 classes.
    assert d.verdict.blocking == [
        "recall.return_grille: 12 of 20 found -> 0 of 20 vs baseline, p = 0.00024 < 0.0042 "
        "(exact McNemar, Holm over 4); drop 0.60 > 0.05"]
    row = next(t for t in d.verdict.metrics["class_tests"] if t["class"] == "return_grille")
    assert (row["lost"], row["gained"], row["paired_runs"], row["significant"], row["fails"]) == (12, 0, 1, True, True)
    assert row["ref_interval"][0] < 0.6 < row["ref_interval"][1] and row["cand_interval"][0] == 0.0
    assert row["cand_interval"][1] < row["ref_interval"][0]  # the intervals do not overlap


def test_a_drop_of_a_few_symbols_is_not_significant() -> None:
    # The old absolute gate failed 0.6 -> 0.53 on 10 instances; it is one symbol of noise.
    d = gate(run(0.50, with_recall(return_grille=0.53)))
    assert d.outcome is Outcome.KEEP
    row = next(t for t in d.verdict.metrics["class_tests"] if t["class"] == "return_grille")
    assert row["test"] == "Fisher exact, unpaired" and row["significant"] is False and row["fails"] is False


def test_a_significant_drop_exactly_at_the_limit_passes() -> None:
    cfg = GateConfig(max_class_drop=0.25)
    base = run(0.40, BASE, found={"return_grille": hits(28, 28)})
    at = gate(run(0.50, BASE, found={"return_grille": hits(28, 21)}), baseline=base, cfg=cfg, reruns_left=0)
    row = next(t for t in at.verdict.metrics["class_tests"] if t["class"] == "return_grille")
    assert row["significant"] is True and row["drop"] == 0.25 and at.outcome is Outcome.KEEP
    over = gate(run(0.50, BASE, found={"return_grille": hits(28, 20)}), baseline=base, cfg=cfg, reruns_left=0)
    assert over.outcome is Outcome.DISCARD and "drop 0.29 > 0.25" in over.verdict.blocking[0]


def test_a_drop_just_over_the_limit_shows_enough_digits() -> None:
    base = run(0.40, BASE, found={"return_grille": hits(10000, 10000)})
    d = gate(run(0.50, BASE, found={"return_grille": hits(10000, 9499)}), baseline=base)
    assert d.verdict.blocking[0].endswith("drop 0.0501 > 0.0500")


def test_a_higher_average_that_loses_a_class_is_a_regression() -> None:
    # vav_box worked in the current best; the candidate loses it but the average rises a lot.
    base = run(0.40, BASE, found={"vav_box": hits(30, 1)})  # its baseline gate is dead (0.03 <= 0.05)
    best = run(0.42, BASE, found={"vav_box": hits(30, 9)})
    d = gate(run(0.60, BASE, found={"vav_box": hits(30, 0)}), best=[best], baseline=base, reruns_left=0)
    assert d.outcome is Outcome.DISCARD
    # 9 lost vs the best: p = 0.5**9 = 0.002; 3 live gates + 4 best classes above the margin = 7 tests.
    assert d.verdict.blocking == [
        "recall.vav_box fell to 0: 9 of 30 found -> 0 of 30 vs the current best, p = 0.002 < 0.0071 "
        "(exact McNemar, Holm over 7); drop 0.30 > 0.05"]
    assert d.verdict.metrics["dead_gates"] == ["vav_box"]


def test_a_significant_loss_vs_the_best_that_did_not_reach_zero_passes() -> None:
    base = run(0.40, BASE, found={"vav_box": hits(30, 1)})
    best = run(0.42, BASE, found={"vav_box": hits(30, 20)})
    d = gate(run(0.60, BASE, found={"vav_box": hits(30, 1)}), best=[best], baseline=base, reruns_left=0)
    row = next(t for t in d.verdict.metrics["class_tests"] if t["against"] == "best" and t["class"] == "vav_box")
    assert row["significant"] is True and row["fails"] is False and d.outcome is Outcome.KEEP


def test_a_clear_loss_is_discarded_with_the_numbers() -> None:
    d = gate(run(0.30, BASE))
    assert d.outcome is Outcome.DISCARD
    # t = -0.1 / (0.01 * sqrt(1 + 1/3)) = -8.66 on 2 df: p = 0.0065 < 0.05 / 3 looks.
    assert d.verdict.blocking == [
        "weighted_f1 0.3000 is below the current best 0.4000 by 0.1000: p = 0.0065 < 0.017 "
        f"(one-sided Student t, pooled seed variance; noise band {band():.4f})"]


def test_a_seed_change_that_only_moves_noise_asks_for_one_more_seed() -> None:
    d = gate(run(0.41, BASE))
    assert d.outcome is Outcome.INCONCLUSIVE and d.verdict.status is Status.FAIL
    assert d.needs_reruns == 1 and d.verdict.metrics["needs_reruns"] == 1
    assert d.verdict.blocking[0].endswith("needs 1 more seed (2 left)")
    one = gate(run(0.41, BASE), reruns_left=1)
    assert one.needs_reruns == 1 and one.verdict.blocking[0].endswith("needs 1 more seed (1 left)")


def test_after_reruns_the_mean_decides_and_the_band_narrows() -> None:
    first = gate(run(0.445, BASE))
    assert first.outcome is Outcome.INCONCLUSIVE
    runs = [run(s, BASE) for s in (0.445, 0.442, 0.448)]
    d = gate(runs, reruns_left=0)
    assert d.outcome is Outcome.KEEP, d.verdict.metrics
    assert d.verdict.metrics["runs"] == 3 and d.score == pytest.approx(0.445)
    # the candidate's own seeds join the pooled noise: sigma^2 = (0.0002 + 0.000018) / 4
    sigma = ((0.0002 + 0.000018) / 4) ** 0.5
    assert d.verdict.metrics["noise_sigma"] == pytest.approx(sigma) and d.verdict.metrics["noise_df"] == 4
    assert d.verdict.metrics["noise_band"] == pytest.approx(band(3, 3, 3, sigma, 4))
    assert d.verdict.metrics["noise_band"] < first.verdict.metrics["noise_band"]


def test_still_inside_after_reruns_is_inconclusive_for_good() -> None:
    runs = [run(s, BASE) for s in (0.401, 0.399, 0.402)]
    d = gate(runs, reruns_left=0)
    assert d.outcome is Outcome.INCONCLUSIVE and d.needs_reruns == 0
    assert "stayed inside the noise band" in d.verdict.blocking[0] and "after 3 run(s)" in d.verdict.blocking[0]


def test_the_class_gates_pool_the_candidates_seeds() -> None:
    base = run(0.40, BASE, found={"return_grille": hits(20, 20)})
    lose5 = run(0.50, BASE, found={"return_grille": hits(20, 15)})
    # one seed: 5 lost, p = 1/32 = 0.031, above 0.05 / 4 classes
    assert gate(lose5, baseline=base, reruns_left=0).outcome is Outcome.KEEP
    # two seeds, each paired with the baseline's seed of the same index: 10 lost, p = 0.00098
    d = gate([lose5, lose5], baseline=base, reruns_left=0)
    assert d.outcome is Outcome.DISCARD
    assert d.verdict.blocking[0].startswith("recall.return_grille: 40 of 40 found -> 30 of 40 vs baseline, p = 0.00098")


def test_identical_per_instance_results_have_no_discordant_pair() -> None:
    base = run(0.40, BASE, found={"return_grille": hits(20, 0) + hits(10, 10)})
    d = gate(run(0.50, BASE, found={"return_grille": hits(20, 0) + hits(10, 10)}), baseline=base)
    row = next(t for t in d.verdict.metrics["class_tests"] if t["class"] == "return_grille")
    assert (row["lost"], row["gained"], row["p"], row["fails"]) == (0, 0, 1.0, False)


def test_unpaired_fallback_is_named_in_the_notes() -> None:
    d = gate(run(0.50, BASE))
    assert any("no per-instance results ('found')" in n and "weaker" in n for n in d.verdict.metrics["notes"])
    base = run(0.40, {}, found={c: hits(10, round(r * 10)) for c, r in BASE.items()})
    paired = gate(run(0.50, {}, found={c: hits(10, round(r * 10)) for c, r in BASE.items()}), baseline=base)
    assert not any("no per-instance results" in n for n in paired.verdict.metrics["notes"])


@pytest.mark.parametrize(
    ("score", "reruns_left", "outcome"),
    [
        (0.405, 2, Outcome.KEEP),  # simpler and not worse: simpler wins at once
        (0.400, 2, Outcome.KEEP),
        (0.395, 2, Outcome.INCONCLUSIVE),  # simpler but a little worse: rerun first
        (0.395, 0, Outcome.KEEP),  # still a tie after reruns: simpler wins
        (0.350, 0, Outcome.DISCARD),  # simpler but significantly worse (p = 0.025 < 0.05)
    ],
)
def test_inside_the_noise_simpler_wins(score: float, reruns_left: int, outcome: Outcome) -> None:
    d = gate(run(score, BASE), simpler=True, reruns_left=reruns_left)
    assert d.outcome is outcome
    if outcome is Outcome.KEEP:
        assert any("simpler wins" in n for n in d.verdict.metrics["notes"])


@pytest.mark.parametrize("score", [0.30, 0.405, 0.90])
def test_unmeasured_noise_never_keeps_or_discards_on_the_score(score: float) -> None:
    d = gate(run(score, BASE), base_runs=[])  # one baseline run, which is also the best
    m = d.verdict.metrics
    assert m["noise_measured"] is False and m["noise_sigma"] is None and m["noise_band"] is None
    assert any(n.startswith("noise unmeasured") for n in m["notes"])
    assert d.outcome is Outcome.INCONCLUSIVE and d.needs_reruns == 0
    assert "the seed noise is unmeasured" in d.verdict.blocking[0]
    assert gate(run(score, BASE), base_runs=[], simpler=True).outcome is Outcome.INCONCLUSIVE


def test_unmeasured_noise_still_discards_a_failed_class() -> None:
    base = run(0.40, BASE, found={"return_grille": hits(20, 20)})
    d = gate(run(0.90, BASE, found={"return_grille": hits(20, 0)}), baseline=base, base_runs=[])
    assert d.outcome is Outcome.DISCARD and d.verdict.blocking[0].startswith("recall.return_grille: 20 of 20")


def test_two_runs_of_the_best_measure_the_noise_without_baseline_seeds() -> None:
    base = run(0.40, BASE)
    d = gate(run(0.60, BASE), best=[run(0.41, BASE), run(0.43, BASE)], baseline=base, base_runs=[],
             reruns_left=0)
    assert d.verdict.metrics["noise_measured"] is True and d.verdict.metrics["noise_df"] == 1
    assert d.outcome is Outcome.KEEP


def test_zero_measured_spread_makes_any_difference_decide() -> None:
    seeds = [run(0.40, BASE)] * 3
    for cfg in (CFG, GateConfig(alpha=0.2)):
        assert gate(run(0.4001, BASE), base_runs=seeds, cfg=cfg).outcome is Outcome.KEEP
        assert gate(run(0.3999, BASE), base_runs=seeds, cfg=cfg).outcome is Outcome.DISCARD
        tie = gate(run(0.40, BASE), base_runs=seeds, cfg=cfg)
        assert tie.outcome is Outcome.INCONCLUSIVE and tie.verdict.metrics["noise_band"] == 0.0
        assert tie.verdict.metrics["score_test"]["t"] == 0.0
    certain = gate(run(0.4001, BASE), base_runs=seeds)
    assert certain.verdict.metrics["score_test"]["t"] is None  # infinite: not a JSON number
    json.dumps(certain.verdict.to_json_dict(), allow_nan=False)


def test_another_score_key() -> None:
    cand, base = run(0.45, BASE), run(0.4, BASE)
    cand["macro_f1"], base["macro_f1"] = 0.30, 0.50
    seeds = [{**base, "macro_f1": v} for v in (0.49, 0.50, 0.51)]
    d = decide(GateInput([cand], seeds, base, "tag-start", baseline_runs=seeds),
               GateConfig(score="macro_f1"), 2)
    assert d.outcome is Outcome.DISCARD and d.verdict.blocking[0].startswith("macro_f1 0.3000")


def test_the_old_positional_input_still_builds() -> None:
    base = run(0.4, BASE)
    d = decide(GateInput([run(0.9, BASE)], [base], base, "tag-start"), GateConfig(), 0)
    assert d.outcome is Outcome.INCONCLUSIVE and d.verdict.metrics["baseline_scores"] == []


def test_classes_without_truth_are_neither_gated_nor_lost() -> None:
    recalls = with_recall(fan=None)
    d = gate(run(0.50, recalls), best=[run(0.40, recalls)], baseline=run(0.40, recalls))
    assert d.outcome is Outcome.KEEP and "fan" not in d.verdict.metrics["class_recall"]
    assert d.verdict.metrics["gated_classes"] == 4


def test_dead_gates_of_something_that_is_not_metrics() -> None:
    assert dead_gates([], 0.05) == [] and dead_gates({"classes": []}, 0.05) == []  # type: ignore[arg-type]


def test_a_drop_a_hair_over_the_limit_is_still_shown_as_over() -> None:
    from looper.core.keep.classgate import fmt_below as _fmt_below
    from looper.core.keep.classgate import fmt_over as _fmt_over

    shown, limit = _fmt_over(0.0500000002, 0.05)
    assert float(shown) >= float(limit) and shown != limit
    assert _fmt_below(0.001, 0.002) == "0.001 < 0.002"
    assert _fmt_below(0.0100000001, 0.01) == "0.0100000001 <= 0.01"  # never shown as smaller than it is


def test_without_a_current_best_the_baseline_is_the_best() -> None:
    d = gate(run(0.50, BASE), best=[])
    assert d.outcome is Outcome.KEEP and d.verdict.metrics["best_score"] == pytest.approx(0.40)


# -- the baseline named in every verdict -----------------------------------------------------


@pytest.mark.parametrize(
    "candidate",
    [run(0.50, BASE), run(0.30, BASE), run(0.41, BASE), run(None, BASE)],
    ids=["keep", "discard", "inconclusive", "error"],
)
def test_every_verdict_names_its_baseline(candidate: dict[str, Any]) -> None:
    d = gate(candidate, source=APPROVED)
    assert d.outcome.value == d.verdict.metrics.get("outcome", d.outcome.value)
    assert d.verdict.metrics["baseline"] == APPROVED
    assert "dead_gates" in d.verdict.metrics and "notes" in d.verdict.metrics


# -- dead gates --------------------------------------------------------------------------------


def test_baseline_recall_zero_is_a_dead_gate_and_is_reported() -> None:
    base = run(0.40, with_recall(thermostat=0.0))
    d = gate(run(0.50, with_recall(thermostat=0.0)), baseline=base)
    assert d.outcome is Outcome.KEEP
    m = d.verdict.metrics
    assert m["dead_gates"] == ["thermostat"] and m["gated_classes"] == 3
    assert any("recall.thermostat gate is dead" in n for n in m["notes"])
    assert any("1 of 4 class gates are dead" in n for n in m["notes"])


def test_every_class_gate_dead_is_an_error() -> None:
    base = run(0.05, {c: 0.03 for c in BASE})
    d = gate(run(0.45, BASE), baseline=base)
    assert d.outcome is Outcome.ERROR and d.verdict.status is Status.ERROR and d.score is None
    assert d.verdict.blocking[0].startswith("the baseline cannot gate: every class gate is dead")
    assert sorted(d.verdict.metrics["dead_gates"]) == sorted(BASE)


def test_a_baseline_that_predicted_nothing_cannot_gate() -> None:
    base = run(0.0, {c: 0.0 for c in BASE}, predictions=0)
    d = gate(run(0.45, BASE), baseline=base)
    assert d.outcome is Outcome.ERROR
    assert d.verdict.blocking == [
        "the baseline cannot gate: the baseline predicted nothing, so no class gate can fire"]


def test_predicted_nothing_is_read_from_class_counts_when_predictions_is_absent() -> None:
    base = run(0.0, {c: 0.0 for c in BASE}, predictions=None)
    for row in base["classes"].values():
        row["fp"] = 0
    assert sorted(dead_gates(base, 0.0)) == sorted(BASE)
    assert "predicted nothing" in gate(run(0.45, BASE), baseline=base).verdict.blocking[0]


def test_a_baseline_with_predictions_but_no_counts_uses_the_recall_rule() -> None:
    base = run(0.4, BASE, predictions=None)
    for row in base["classes"].values():
        del row["tp"]
    assert dead_gates(base, 0.05) == []
    assert dead_gates(base, 0.5) == ["vav_box", "thermostat"]


@pytest.mark.parametrize(
    ("recalls", "limit", "dead"),
    [
        (BASE, 0.05, []),
        (with_recall(vav_box=0.0), 0.05, ["vav_box"]),
        (with_recall(vav_box=0.05), 0.05, ["vav_box"]),  # could only fire below 0
        (with_recall(vav_box=0.06), 0.05, []),
        (with_recall(vav_box=0.0), 0.0, ["vav_box"]),  # a drop below 0 is impossible
        (with_recall(vav_box=None), 0.05, []),  # no truth: nothing to gate, not dead
    ],
)
def test_dead_gates(recalls: dict[str, float | None], limit: float, dead: list[str]) -> None:
    assert dead_gates(run(0.4, recalls), limit) == dead


def test_dead_gates_on_a_malformed_baseline_counts_the_broken_class_dead() -> None:
    base = run(0.4, BASE)
    base["classes"]["vav_box"]["recall"] = None  # support 10 but no recall
    assert dead_gates(base, 0.05) == ["vav_box"]
    d = gate(run(0.45, BASE), baseline=base)
    assert d.outcome is Outcome.ERROR
    assert d.verdict.blocking == ["baseline class 'vav_box' has support 10 but no numeric recall"]


# -- unusable input is an error, never a pass or fail ------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"candidate": []}, "no candidate run to gate"),
        ({"candidate": run(None, BASE)}, "candidate run 1 of 1 has no numeric 'weighted_f1' ('missing')"),
        ({"candidate": [run(0.45, BASE), {**run(0.4, BASE), "weighted_f1": None}]},
         "candidate run 2 of 2 has no numeric 'weighted_f1' (None)"),
        ({"candidate": [run(0.45, BASE), "oops"]}, "candidate run 2 of 2 has no numeric 'weighted_f1' ('not an object')"),
        ({"candidate": run(0.45, BASE), "best": [run(None, BASE)]}, "current best run 1 of 1 has no numeric"),
        ({"candidate": run(0.45, BASE), "best": [], "baseline": run(None, BASE)},
         "baseline (as best) run 1 of 1 has no numeric"),
        ({"candidate": run(0.45, {"supply_diffuser": 0.9})}, "candidate run 1 lacks the class: 'return_grille'"),
        ({"candidate": run(0.45, with_recall(vav_box=None))}, "candidate run 1 has no numeric recall for it: 'vav_box'"),
        ({"candidate": run(0.45, BASE), "baseline": {"pages": 3}}, "the baseline (tag-start) has no per-class scores"),
        ({"candidate": run(0.45, BASE), "baseline": run(0.4, {c: None for c in BASE})},
         "the baseline cannot gate: no class in it (tag-start) has truth"),
        ({"candidate": run(0.45, BASE), "best": [run(0.4, {**BASE, "fan": 0.5})]},
         "candidate run 1 lacks the class: 'fan'"),
        ({"candidate": run(0.45, BASE), "best": [run(0.4, BASE)], "base_runs": [run(0.4, BASE), run(None, BASE)]},
         "baseline run 2 of 2 has no numeric 'weighted_f1'"),
        ({"candidate": run(0.45, BASE), "base_runs": [run(0.4, BASE), run(0.41, {"vav_box": 0.4})]},
         "baseline run 2 lacks the class: 'supply_diffuser'"),
        ({"candidate": run(0.45, BASE), "base_runs": [run(0.4, BASE), run(0.41, BASE, support=20)]},
         "baseline runs disagree on the support of 'supply_diffuser' (10 vs 20)"),
        ({"candidate": run(0.45, BASE, support=20)},
         "the support of 'supply_diffuser' differs: baseline 10, candidate 20 (the test set differs)"),
        ({"candidate": run(0.45, BASE, found={"vav_box": [1, 0, 2]})},
         "candidate class 'vav_box' has a 'found' that is not a list of 0/1"),
        ({"candidate": run(0.45, BASE, found={"vav_box": [1, 0, True]})}, "not a list of 0/1"),
        ({"candidate": {**run(0.45, BASE), "classes": {**run(0.45, BASE)["classes"], "vav_box": {
            "support": 10, "recall": 0.4, "found": "1101"}}}}, "'found' that is not a list of 0/1"),
        ({"candidate": {**run(0.45, BASE), "classes": {**run(0.45, BASE)["classes"], "vav_box": {
            "support": 10, "recall": 0.4, "found": [1, 1, 0, 0]}}}},
         "candidate class 'vav_box' lists 4 instances in 'found' but has support 10 (the test set differs)"),
        ({"candidate": run(0.45, BASE), "best": [run(0.4, BASE), {**run(0.4, BASE), "classes": {
            **run(0.4, BASE)["classes"], "vav_box": {"support": 10}}}]},
         "current best run 2 has no numeric support and recall for it: 'vav_box'"),
    ],
)
def test_unusable_input_is_an_error(kwargs: dict[str, Any], reason: str) -> None:
    d = gate(**kwargs)
    assert d.outcome is Outcome.ERROR and d.verdict.status is Status.ERROR and d.score is None
    assert reason in d.verdict.blocking[0], d.verdict.blocking


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"score": ""}, "gate.score must name a metric"),
        ({"max_class_drop": -0.1}, "gate.max_class_drop must be within"),
        ({"max_class_drop": 1.5}, "gate.max_class_drop must be within"),
        ({"alpha": 0.0}, "gate.alpha must be between 0 and 1"),
        ({"alpha": 1.0}, "gate.alpha must be between 0 and 1"),
        ({"alpha": float("nan")}, "gate.alpha must be between 0 and 1"),
        ({"alpha": "0.05"}, "gate.alpha must be between 0 and 1"),
    ],
)
def test_bad_gate_config_names_the_key(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GateConfig(**kwargs)


def test_many_dead_classes_are_listed_briefly() -> None:
    names = [f"c{i}" for i in range(12)]
    d = gate(run(0.5, dict.fromkeys(names, 0.5)), baseline=run(0.1, dict.fromkeys(names, 0.01)),
             best=[run(0.1, dict.fromkeys(names, 0.01))])
    assert d.outcome is Outcome.ERROR and "and 4 more" in d.verdict.blocking[0]


# -- properties -----------------------------------------------------------------------------------

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

STATUS_OF = {Outcome.KEEP: Status.PASS, Outcome.DISCARD: Status.FAIL, Outcome.INCONCLUSIVE: Status.FAIL,
             Outcome.ERROR: Status.ERROR}


@settings(max_examples=60, deadline=None)
@given(inputs)
def test_outcome_and_status_agree_and_blocking_is_empty_exactly_on_pass(kw: dict[str, Any]) -> None:
    d = gate(**kw)
    assert d.verdict.status is STATUS_OF[d.outcome]
    assert (d.verdict.blocking == []) is d.verdict.ok
    assert (d.needs_reruns > 0) <= (d.outcome is Outcome.INCONCLUSIVE)
    assert (d.score is None) is (d.outcome is Outcome.ERROR)
    json.dumps(d.verdict.to_json_dict(), allow_nan=False)  # the store keeps it as strict JSON


@settings(max_examples=40, deadline=None)
@given(inputs, st.integers(0, 2))
def test_error_input_never_becomes_pass_or_fail(kw: dict[str, Any], which: int) -> None:
    broken = [dict(m) for m in kw["candidate"]]
    broken[which % len(broken)].pop("weighted_f1")
    d = gate(**{**kw, "candidate": broken})
    assert d.outcome is Outcome.ERROR and d.verdict.status is Status.ERROR


@settings(max_examples=60, deadline=None)
@given(inputs, st.sampled_from([0.0, 0.01, 0.03, 0.05]), recall)
def test_adding_a_dead_gate_changes_no_outcome_when_the_best_is_the_baseline(
        kw: dict[str, Any], dead_recall: float, cand_recall: float) -> None:
    # Holm's family is the live classes; a dead class is never in it, so nothing else moves.
    kw = {**kw, "best": []}
    before = gate(**kw)

    def add(m: dict[str, Any], r: float) -> dict[str, Any]:
        m = {**m, "classes": dict(m["classes"])}
        m["classes"]["zz_dead"] = {"tp": round(r * 10), "fp": 1, "support": 10, "recall": r}
        return m

    after = gate(**{**kw,
                    "candidate": [add(m, cand_recall) for m in kw["candidate"]],
                    "baseline": add(kw["baseline"], dead_recall)})
    assert after.outcome is before.outcome
    if before.outcome is not Outcome.ERROR:  # an error's words list the dead classes, now one more
        assert after.verdict.blocking == before.verdict.blocking
    assert "zz_dead" in after.verdict.metrics["dead_gates"]  # reported, error or not
    assert all(t["class"] != "zz_dead" for t in after.verdict.metrics.get("class_tests", []))


@settings(max_examples=40, deadline=None)
@given(inputs, st.floats(0.001, 0.5))
def test_a_higher_score_never_loses_a_keep(kw: dict[str, Any], bump: float) -> None:
    before = gate(**kw)
    if before.outcome is not Outcome.KEEP:
        return
    higher = [{**m, "weighted_f1": m["weighted_f1"] + bump} for m in kw["candidate"]]
    assert gate(**{**kw, "candidate": higher}).outcome is Outcome.KEEP


hit_lists = st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(0, n)))


@settings(max_examples=80, deadline=None)
@given(hit_lists, st.sampled_from([0.0, 0.05, 0.2]), st.sampled_from([0.01, 0.05, 0.1]))
def test_a_drop_of_k_instances_is_flagged_exactly_when_the_exact_test_says_so(
        nkg: tuple[int, int, int], margin: float, alpha: float) -> None:
    n, k, g = nkg
    g = min(g, n - k)  # k lost (found by the baseline only), g gained (found by the candidate only)
    base_hits = [1] * k + [0] * (n - k)
    cand_hits = [0] * k + [1] * g + [0] * (n - k - g)
    base = run(0.40, {"other": 0.9}, found={"only": base_hits})
    base["classes"]["only"]["recall"] = max(base["classes"]["only"]["recall"], 1.0)  # never a dead gate
    base["classes"]["only"]["found"] = base_hits
    d = gate(run(0.50, {"other": 0.9}, found={"only": cand_hits}), baseline=base, base_runs=[base],
             best=[], reruns_left=0, cfg=GateConfig(max_class_drop=margin, alpha=alpha))
    p = binomtest(k, k + g, 0.5, alternative="greater").pvalue if k + g else 1.0
    flagged = bool(p <= alpha / 2 and (k - g) / n > margin + 1e-9)  # Holm over 2 classes; "other": p = 1
    assert any(b.startswith("recall.only:") for b in d.verdict.blocking) == flagged


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=30), st.integers(1, 3), st.integers(0, 2))
def test_identical_per_instance_results_never_fail_a_class(found: list[int], seeds: int, reruns: int) -> None:
    n = len(found)
    base = run(0.40, BASE, found={"x": found})
    base["classes"]["x"]["recall"] = 1.0  # live whatever it found
    runs = [run(0.40 + i / 100, BASE, found={"x": found}) for i in range(seeds)]
    d = gate(runs, baseline=base, base_runs=[run(0.40 + i / 100, BASE, found={"x": found}) for i in range(3)],
             reruns_left=reruns)
    assert not any(b.startswith("recall.") for b in d.verdict.blocking)
    row = next(t for t in d.verdict.metrics["class_tests"] if t["class"] == "x")
    assert row["lost"] == row["gained"] == 0 and row["ref_total"] == n * min(seeds, 3)


def test_the_documented_example_verdict() -> None:
    # docs/INTERFACES.md and the gate's docstring quote this verdict: 26 classes, one judgement.
    names = [f"class_{i:02d}" for i in range(25)]
    recalls = dict.fromkeys(names, 0.8)
    base = run(0.40, recalls, found={"exhaust_fan": hits(10, 10)})
    d = gate(run(0.60, recalls, found={"exhaust_fan": hits(10, 0)}), baseline=base, reruns_left=0)
    assert d.verdict.blocking == [
        "recall.exhaust_fan: 10 of 10 found -> 0 of 10 vs baseline, p = 0.00098 < 0.0019 "
        "(exact McNemar, Holm over 26); drop 1.00 > 0.05"]


def test_a_class_that_swings_between_seeds_is_not_condemned_by_one_run() -> None:
    # The A/A: the baseline's seeds learn exhaust_fan in two runs of three; an unchanged
    # candidate whose one run missed it "drops 1.00". Counted as 10 independent instances that
    # is p = 0.001; the seeds show the class moves as a whole, so it is not significant.
    seeds = [run(0.39 + i / 100, BASE, found={"exhaust_fan": hits(10, f)}) for i, f in enumerate((10, 0, 10))]
    cand = run(0.40, BASE, found={"exhaust_fan": hits(10, 0)})
    d = gate(cand, baseline=seeds[0], base_runs=seeds, reruns_left=0)
    m = d.verdict.metrics
    # 5 classes x (3 seeds - 1); exhaust_fan's counts vary 10x its instances' own variances (each 1/3),
    # the four steady classes (no 'found': binomial at their recall) vary not at all
    assert m["class_dispersion_df"] == 10
    assert m["class_dispersion"] == pytest.approx(2 * 100 / 3 / (2 * 10 / 3 + 2 * (0.9 + 2.4 + 2.4 + 2.5)))
    row = next(t for t in m["class_tests"] if t["class"] == "exhaust_fan")
    assert row["lost"] == 10 and row["significant"] is False and d.outcome is not Outcome.DISCARD
    assert any("vary between seeds" in n for n in m["notes"])
    # with a steady baseline (three seeds found all ten) the same loss is a real one
    steady = [run(0.39 + i / 100, BASE, found={"exhaust_fan": hits(10, 10)}) for i in range(3)]
    assert gate(cand, baseline=steady[0], base_runs=steady, reruns_left=0).outcome is Outcome.DISCARD


def test_instances_found_or_lost_together_are_judged_as_the_blocks_they_are() -> None:
    # The A/A false discards of bench/RESULTS-archive.md ("Class gates measured against each instance's own variance"): in a
    # fine-tune a class's hard instances are found or lost in blocks from seed to seed. 20 instances:
    # 8 always found, blocks A and B of 4 that come and go, 4 never found; the candidate is another
    # draw of the same seeds' luck (blocks in 2 of its 4 runs against 6 of the baseline's 4 x 2).
    def smoke(blocks: str, lose_steady: bool = False) -> list[int]:
        steady = [0 if lose_steady else 1] * 8
        return steady + [int("A" in blocks)] * 4 + [int("B" in blocks)] * 4 + [0] * 4

    def runs(patterns: list[str], lose_steady: bool = False) -> list[dict[str, Any]]:
        return [run(0.40 + d, {}, found={"smoke_damper": smoke(p, lose_steady), "exhaust_fan": [1] * 10})
                for d, p in zip((-0.01, 0.0, 0.01, 0.0), patterns, strict=True)]

    base = runs(["AB", "AB", "A", "B"])
    d = gate(runs(["A", "", "B", ""]), baseline=base[0], base_runs=base, reruns_left=0)
    m = d.verdict.metrics
    row = next(t for t in m["class_tests"] if t["class"] == "smoke_damper")
    assert (row["lost"], row["gained"]) == (20, 4) and row["drop"] == pytest.approx(0.2)
    # the blocks' own variance: 2.7 (counted binomially, 1.16, the loss had p = 0.0018 < 0.00625: a discard)
    assert m["class_dispersion"] == pytest.approx(8 / 3) and m["class_dispersion_df"] == 6
    assert row["p"] == pytest.approx(0.045, abs=1e-3) and row["significant"] is False
    assert d.outcome is Outcome.INCONCLUSIVE
    # the same seeds losing the 8 instances every baseline run found: a real loss, still a discard
    lost = gate(runs(["A", "", "B", ""], lose_steady=True), baseline=base[0], base_runs=base, reruns_left=0)
    assert lost.outcome is Outcome.DISCARD and lost.verdict.blocking[0].startswith(
        "recall.smoke_damper: 56 of 80 found -> 8 of 80 vs baseline")


def test_a_loss_beyond_the_seed_spread_names_the_deflation() -> None:
    seeds = [run(0.39 + i / 100, BASE, found={"k0": hits(20, f), "k1": hits(20, f), "exhaust_fan": hits(40, 40)})
             for i, f in enumerate((20, 10, 20))]  # k0 and k1 swing between seeds
    cand = run(0.40, BASE, found={"k0": hits(20, 20), "k1": hits(20, 20), "exhaust_fan": hits(40, 0)})
    d = gate(cand, baseline=seeds[0], base_runs=seeds, reruns_left=0)
    phi = d.verdict.metrics["class_dispersion"]
    assert phi > 1 and d.outcome is Outcome.DISCARD
    assert d.verdict.blocking[0].startswith("recall.exhaust_fan: 40 of 40 found -> 0 of 40 vs baseline")
    assert f"(exact McNemar, counts / {phi:.1f} for seed spread, Holm over 7)" in d.verdict.blocking[0]


def test_class_recall_spread_is_the_seed_sd_of_each_class_recall():
    runs = [{"classes": {"a": {"recall": r_a}, "b": {"recall": 0.5}, "c": {"recall": c}}}
            for r_a, c in ((0.2, 1.0), (0.6, None), (1.0, 0.0))]
    assert class_recall_spread(runs) == {"a": 0.4, "b": 0.0}  # c lacks a recall in one run: left out
    assert class_recall_spread(runs[:1]) == {}  # one run has no spread
    assert class_recall_spread([{"classes": {"a": {"recall": True}}}, {"classes": {"a": {"recall": 1}}}]) == {}
