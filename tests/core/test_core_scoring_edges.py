"""Branches of core/scoring the page tests do not reach: false positives of one class on both sides
of a comparison, a look-alike whose truth is not numbered, found flags that disagree with the counts."""

from __future__ import annotations

import pytest

from looper.core.scoring import matches as cm
from looper.core.scoring.metrics import Counts, metrics_from_counts

B = [0, 0, 10, 10]


def _side(preds: list[dict]) -> dict:
    return {"schema": 1, "pages": [{"page": "p.png", "truth": 0, "predictions": preds, "missed": [],
                                    "fp_dropped": {}}]}


def test_false_positives_both_models_make_at_the_same_place_are_no_difference() -> None:
    shared = {"class": "fire_damper", "match": "fp", "box": [100, 100, 130, 130]}
    only_a = {"class": "fire_damper", "match": "fp", "box": [600, 600, 630, 630]}
    other = {"class": "thermostat", "match": "fp", "box": [800, 100, 830, 130]}
    a, b = _side([shared, only_a, other]), _side([shared])
    regions = cm.differing_regions(a, b, side=100, limit=4, sizes={"p.png": (1000, 1000)})
    assert sorted(r.score for r in regions) == [1, 1]
    assert all(r.box[0] >= 500 for r in regions)  # the shared false positive differs nowhere


def test_a_look_alike_without_a_numbered_truth_is_counted_and_names_no_instance() -> None:
    preds = [{"class": "supply_diffuser", "match": "fp", "box": B,
              "overlaps": {"truth": None, "class": "return_diffuser", "iou": 0.8}}]
    c = cm.confusion([_side(preds)], 0.5)
    assert c.cells[("supply_diffuser", "return_diffuser")] == 1


def test_found_flags_that_disagree_with_the_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="found flags"):
        metrics_from_counts({"fire_damper": Counts(tp=1, fn=1)}, ("fire_damper",), pages=1, predictions=1, truth=2,
                            found={"fire_damper": [True]})
