"""What the gate can gate on: dead class gates, classes without truth, and unusable input or config,
which is an error, never a pass or fail.
"""

from __future__ import annotations

from typing import Any

import pytest
from gate_cases import BASE, gate, inputs, recall, run, with_recall
from hypothesis import given, settings
from hypothesis import strategies as st

from looper.core.keep.gate import GateConfig, GateInput, dead_gates, decide
from looper.core.verdicts.verdict import Outcome, Status

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


def test_dead_gates_of_something_that_is_not_metrics() -> None:
    assert dead_gates([], 0.05) == [] and dead_gates({"classes": []}, 0.05) == []  # type: ignore[arg-type]


def test_many_dead_classes_are_listed_briefly() -> None:
    names = [f"c{i}" for i in range(12)]
    d = gate(run(0.5, dict.fromkeys(names, 0.5)), baseline=run(0.1, dict.fromkeys(names, 0.01)),
             best=[run(0.1, dict.fromkeys(names, 0.01))])
    assert d.outcome is Outcome.ERROR and "and 4 more" in d.verdict.blocking[0]


def test_classes_without_truth_are_neither_gated_nor_lost() -> None:
    recalls = with_recall(fan=None)
    d = gate(run(0.50, recalls), best=[run(0.40, recalls)], baseline=run(0.40, recalls))
    assert d.outcome is Outcome.KEEP and "fan" not in d.verdict.metrics["class_recall"]
    assert d.verdict.metrics["gated_classes"] == 4


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


def test_the_old_positional_input_still_builds() -> None:
    base = run(0.4, BASE)
    d = decide(GateInput([run(0.9, BASE)], [base], base, "tag-start"), GateConfig(), 0)
    assert d.outcome is Outcome.INCONCLUSIVE and d.verdict.metrics["baseline_scores"] == []


# -- properties --------------------------------------------------------------------------------


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
