"""The gate: candidate vs best vs baseline; class drops, lost classes, noise, dead gates."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looper.core.gate import (
    UNMEASURED_NOISE_BAND,
    GateConfig,
    GateInput,
    dead_gates,
    decide,
)
from looper.core.verdict import Outcome, Status

CFG = GateConfig()  # weighted_f1, max_class_drop 0.05, noise_sigmas 2.0
APPROVED = "approved:2026-11-30.json"


def run(score: float | None, recalls: dict[str, float | None], *, predictions: int | None = 100,
        support: int = 10) -> dict[str, Any]:
    classes = {}
    for name, recall in recalls.items():
        sup = 0 if recall is None else support
        tp = 0 if recall is None else round(recall * sup)
        classes[name] = {"tp": tp, "fp": 1, "fn": sup - tp, "support": sup, "recall": recall}
    m: dict[str, Any] = {"pages": 6, "classes": classes}
    if score is not None:
        m["weighted_f1"] = score
    if predictions is not None:
        m["predictions"] = predictions
    return m


BASE = {"supply_diffuser": 0.9, "return_grille": 0.6, "vav_box": 0.4, "thermostat": 0.5}


def gate(candidate: list[dict[str, Any]] | dict[str, Any], *, best: list[dict[str, Any]] | None = None,
         baseline: dict[str, Any] | None = None, sigma: float | None = 0.01, simpler: bool = False,
         reruns_left: int = 2, cfg: GateConfig = CFG, source: str = "tag-start"):
    cands = candidate if isinstance(candidate, list) else [candidate]
    base = baseline if baseline is not None else run(0.40, BASE)
    return decide(GateInput(cands, best if best is not None else [base], base, source, sigma, simpler),
                  cfg, reruns_left)


def with_recall(**changes: float | None) -> dict[str, float | None]:
    return {**BASE, **changes}


# -- outcomes ------------------------------------------------------------------------------------


def test_a_clear_win_is_kept() -> None:
    d = gate(run(0.45, BASE))
    assert d.outcome is Outcome.KEEP and d.verdict.ok and d.verdict.blocking == []
    assert d.score == pytest.approx(0.45) and d.needs_reruns == 0
    m = d.verdict.metrics
    assert m["baseline"] == "tag-start" and m["dead_gates"] == []
    assert m["best_score"] == 0.40 and m["diff"] == pytest.approx(0.05) and m["noise_band"] == pytest.approx(0.02)


def test_a_class_drop_fails_with_the_exact_words() -> None:
    d = gate(run(0.50, with_recall(return_grille=0.53)))
    assert d.outcome is Outcome.DISCARD and d.verdict.status is Status.FAIL
    assert d.verdict.blocking == ["recall.return_grille dropped 0.07 vs baseline (limit 0.05)"]


def test_a_drop_exactly_at_the_limit_passes() -> None:
    d = gate(run(0.50, with_recall(return_grille=0.55)))
    assert d.outcome is Outcome.KEEP


def test_a_drop_just_over_the_limit_shows_enough_digits() -> None:
    d = gate(run(0.50, with_recall(return_grille=0.5499)))
    assert d.verdict.blocking == ["recall.return_grille dropped 0.0501 vs baseline (limit 0.0500)"]


def test_a_higher_average_that_loses_a_class_is_a_regression() -> None:
    # vav_box worked in the current best; the candidate loses it but the average rises a lot.
    base = run(0.40, with_recall(vav_box=0.04))  # its baseline gate is dead (0.04 <= 0.05)
    best = run(0.42, with_recall(vav_box=0.30))
    d = gate(run(0.60, with_recall(vav_box=0.0)), best=[best], baseline=base)
    assert d.outcome is Outcome.DISCARD
    assert d.verdict.blocking == ["recall.vav_box fell to 0 (was 0.30 in the current best)"]
    assert d.verdict.metrics["dead_gates"] == ["vav_box"]


def test_a_clear_loss_is_discarded_with_the_numbers() -> None:
    d = gate(run(0.35, BASE))
    assert d.outcome is Outcome.DISCARD
    assert d.verdict.blocking == [
        "weighted_f1 0.3500 is below the current best 0.4000 by 0.0500 (more than the noise band 0.0200)"]


def test_a_seed_change_that_only_moves_noise_asks_for_more_seeds() -> None:
    d = gate(run(0.41, BASE))
    assert d.outcome is Outcome.INCONCLUSIVE and d.verdict.status is Status.FAIL
    assert d.needs_reruns == 2 and d.verdict.metrics["needs_reruns"] == 2
    assert "needs 2 more seeds" in d.verdict.blocking[0]
    one = gate(run(0.41, BASE), reruns_left=1)
    assert one.needs_reruns == 1 and "needs 1 more seed" in one.verdict.blocking[0]


def test_after_reruns_the_mean_decides_and_the_band_narrows() -> None:
    first = gate(run(0.415, BASE))
    assert first.outcome is Outcome.INCONCLUSIVE
    runs = [run(s, BASE) for s in (0.415, 0.412, 0.418)]
    d = gate(runs, reruns_left=0)
    assert d.outcome is Outcome.KEEP, d.verdict.metrics
    assert d.verdict.metrics["runs"] == 3 and d.score == pytest.approx(0.415)
    assert d.verdict.metrics["noise_band"] == pytest.approx(0.02 / 3 ** 0.5)


def test_still_inside_after_reruns_is_inconclusive_for_good() -> None:
    runs = [run(s, BASE) for s in (0.401, 0.399, 0.402)]
    d = gate(runs, reruns_left=0)
    assert d.outcome is Outcome.INCONCLUSIVE and d.needs_reruns == 0
    assert "stayed inside the noise band" in d.verdict.blocking[0] and "after 3 run(s)" in d.verdict.blocking[0]


def test_the_mean_of_candidate_recalls_feeds_the_class_gates() -> None:
    runs = [run(0.5, with_recall(return_grille=0.5)), run(0.5, with_recall(return_grille=0.6))]
    assert gate(runs).outcome is Outcome.KEEP  # mean 0.55: a drop of exactly 0.05
    runs = [run(0.5, with_recall(return_grille=0.5)), run(0.5, with_recall(return_grille=0.52))]
    assert gate(runs).verdict.blocking == ["recall.return_grille dropped 0.09 vs baseline (limit 0.05)"]


@pytest.mark.parametrize(
    ("score", "reruns_left", "outcome"),
    [
        (0.405, 2, Outcome.KEEP),  # simpler and not worse: simpler wins at once
        (0.400, 2, Outcome.KEEP),
        (0.395, 2, Outcome.INCONCLUSIVE),  # simpler but a little worse: rerun first
        (0.395, 0, Outcome.KEEP),  # still a tie after reruns: simpler wins
        (0.370, 0, Outcome.DISCARD),  # simpler but clearly worse
    ],
)
def test_inside_the_noise_simpler_wins(score: float, reruns_left: int, outcome: Outcome) -> None:
    d = gate(run(score, BASE), simpler=True, reruns_left=reruns_left)
    assert d.outcome is outcome
    if outcome is Outcome.KEEP:
        assert any("simpler wins" in n for n in d.verdict.metrics["notes"])


@pytest.mark.parametrize("sigma", [None, 0.0, -1.0, float("nan")])
def test_unmeasured_noise_uses_the_minimum_band_and_says_so(sigma: float | None) -> None:
    d = gate(run(0.405, BASE), sigma=sigma)
    m = d.verdict.metrics
    assert m["noise_measured"] is False and m["noise_sigma"] is None
    assert m["noise_band"] == UNMEASURED_NOISE_BAND
    assert any(n.startswith("noise unmeasured") for n in m["notes"])
    assert d.outcome is Outcome.INCONCLUSIVE
    assert gate(run(0.415, BASE), sigma=sigma).outcome is Outcome.KEEP


def test_zero_noise_sigmas_makes_any_difference_decide() -> None:
    cfg = GateConfig(noise_sigmas=0.0)
    assert gate(run(0.4001, BASE), cfg=cfg).outcome is Outcome.KEEP
    assert gate(run(0.3999, BASE), cfg=cfg).outcome is Outcome.DISCARD
    assert gate(run(0.40, BASE), cfg=cfg).outcome is Outcome.INCONCLUSIVE


def test_another_score_key() -> None:
    cand, base = run(0.45, BASE), run(0.4, BASE)
    cand["macro_f1"], base["macro_f1"] = 0.30, 0.50
    d = decide(GateInput([cand], [base], base, "tag-start", 0.01, False), GateConfig(score="macro_f1"), 2)
    assert d.outcome is Outcome.DISCARD and d.verdict.blocking[0].startswith("macro_f1 0.3000")


def test_classes_without_truth_are_neither_gated_nor_lost() -> None:
    recalls = with_recall(fan=None)
    d = gate(run(0.45, recalls), best=[run(0.40, recalls)], baseline=run(0.40, recalls))
    assert d.outcome is Outcome.KEEP and "fan" not in d.verdict.metrics["class_recall"]
    assert d.verdict.metrics["gated_classes"] == 4


def test_dead_gates_of_something_that_is_not_metrics() -> None:
    assert dead_gates([], 0.05) == [] and dead_gates({"classes": []}, 0.05) == []  # type: ignore[arg-type]


def test_a_drop_a_hair_over_the_limit_is_still_shown_as_over() -> None:
    from looper.core.gate import _fmt_over

    shown, limit = _fmt_over(0.0500000002, 0.05)
    assert float(shown) >= float(limit) and shown != limit


def test_without_a_current_best_the_baseline_is_the_best() -> None:
    d = gate(run(0.45, BASE), best=[])
    assert d.outcome is Outcome.KEEP and d.verdict.metrics["best_score"] == 0.40


# -- the baseline named in every verdict -----------------------------------------------------


@pytest.mark.parametrize(
    "candidate",
    [run(0.45, BASE), run(0.35, BASE), run(0.41, BASE), run(None, BASE)],
    ids=["keep", "discard", "inconclusive", "error"],
)
def test_every_verdict_names_its_baseline(candidate: dict[str, Any]) -> None:
    d = gate(candidate, source=APPROVED)
    assert d.verdict.metrics["baseline"] == APPROVED
    assert "dead_gates" in d.verdict.metrics and "notes" in d.verdict.metrics


# -- dead gates --------------------------------------------------------------------------------


def test_baseline_recall_zero_is_a_dead_gate_and_is_reported() -> None:
    base = run(0.40, with_recall(thermostat=0.0))
    d = gate(run(0.45, with_recall(thermostat=0.0)), baseline=base)
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
        ({"noise_sigmas": -1.0}, "gate.noise_sigmas must be a number >= 0"),
        ({"noise_sigmas": float("inf")}, "gate.noise_sigmas"),
        ({"unmeasured_band": 0.0}, "unmeasured noise band must be > 0"),
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
    "sigma": st.sampled_from([None, 0.0, 0.005, 0.02]),
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


@settings(max_examples=40, deadline=None)
@given(inputs, st.integers(0, 2))
def test_error_input_never_becomes_pass_or_fail(kw: dict[str, Any], which: int) -> None:
    broken = [dict(m) for m in kw["candidate"]]
    broken[which % len(broken)].pop("weighted_f1")
    d = gate(**{**kw, "candidate": broken})
    assert d.outcome is Outcome.ERROR and d.verdict.status is Status.ERROR


@settings(max_examples=60, deadline=None)
@given(inputs, st.sampled_from([0.0, 0.01, 0.03, 0.05]), recall, recall)
def test_adding_a_dead_gate_never_makes_a_verdict_pass(kw: dict[str, Any], dead_recall: float,
                                                       cand_recall: float, best_recall: float) -> None:
    before = gate(**kw)

    def add(m: dict[str, Any], r: float) -> dict[str, Any]:
        m = {**m, "classes": dict(m["classes"])}
        m["classes"]["zz_dead"] = {"tp": round(r * 10), "fp": 1, "support": 10, "recall": r}
        return m

    after = gate(**{**kw,
                    "candidate": [add(m, cand_recall) for m in kw["candidate"]],
                    "best": [add(m, best_recall) for m in kw["best"]],
                    "baseline": add(kw["baseline"], dead_recall)})
    if not before.verdict.ok:
        assert not after.verdict.ok
    assert "zz_dead" in after.verdict.metrics["dead_gates"]  # reported, error or not


@settings(max_examples=40, deadline=None)
@given(inputs, st.floats(0.001, 0.5))
def test_a_higher_score_never_loses_a_keep(kw: dict[str, Any], bump: float) -> None:
    before = gate(**kw)
    if before.outcome is not Outcome.KEEP:
        return
    higher = [{**m, "weighted_f1": m["weighted_f1"] + bump} for m in kw["candidate"]]
    assert gate(**{**kw, "candidate": higher}).outcome is Outcome.KEEP
