"""MATCHES.json (looper/core/metrics.page_matches) and what it says (looper/core/scoring/matches.py):
the counts it implies equal METRICS.json's exactly; the confusion matrix, table by table; the
regions where two models differ."""

from __future__ import annotations

import json
import random

import pytest

from looper.core.scoring import matches as cm
from looper.core.scoring.metrics import (
    CONFIDENCE,
    IOU,
    Detection,
    evaluate_pages,
    match_page,
    matches_file,
    metrics_from_results,
    page_matches,
)

CLASSES = ["supply_diffuser", "return_diffuser", "fire_damper", "smoke_damper", "thermostat"]


def D(cls: str, x1: float, y1: float, x2: float, y2: float, score: float = 1.0) -> Detection:
    return Detection(cls, (x1, y1, x2, y2), score)


def _random_pages(seed: int, n_pages: int) -> list[tuple[str, list[Detection], list[Detection]]]:
    rng = random.Random(seed)
    pages = []
    for p in range(n_pages):
        truth = []
        for _ in range(rng.randint(0, 12)):
            x, y = rng.uniform(0, 900), rng.uniform(0, 900)
            truth.append(D(rng.choice(CLASSES), x, y, x + 30, y + 30))
        preds = []
        for t in truth:  # near a truth box, sometimes of another class, sometimes twice
            for _ in range(rng.choice([0, 1, 1, 2])):
                dx, dy = rng.uniform(-12, 12), rng.uniform(-12, 12)
                cls = t.cls if rng.random() < 0.7 else rng.choice(CLASSES)
                preds.append(D(cls, t.box[0] + dx, t.box[1] + dy, t.box[2] + dx, t.box[3] + dy, rng.random()))
        for _ in range(rng.randint(0, 5)):  # on nothing
            x, y = rng.uniform(0, 900), rng.uniform(0, 900)
            preds.append(D(rng.choice(CLASSES), x, y, x + 25, y + 25, rng.random()))
        pages.append((f"page_{p:04d}.png", preds, truth))
    return pages


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("max_fp", [400, 1])
def test_the_counts_matches_imply_equal_metrics_exactly(seed: int, max_fp: int) -> None:
    pages = _random_pages(seed, 6)
    metrics = evaluate_pages([(p, t) for _, p, t in pages], CLASSES)
    obj = matches_file([page_matches(n, p, t, max_fp=max_fp) for n, p, t in pages], CLASSES)
    obj = json.loads(json.dumps(obj))  # what is on disk
    assert cm.problems(obj) == []
    implied = cm.implied_counts(obj)
    for c in CLASSES:
        row = metrics["classes"][c]
        assert implied.get(c, {"tp": 0, "fp": 0, "fn": 0}) == {"tp": row["tp"], "fp": row["fp"], "fn": row["fn"]}, c
    assert sum(len(p["predictions"]) + sum(p["fp_dropped"].values()) for p in obj["pages"]) == metrics["predictions"]
    assert sum(p["truth"] for p in obj["pages"]) == metrics["truth"]
    if max_fp == 1:
        assert all(sum(1 for r in p["predictions"] if r["match"] == "fp") <= 1 for p in obj["pages"])


@pytest.mark.parametrize("seed", range(4))
def test_pages_matched_once_give_the_same_metrics_and_matches_as_matched_twice(seed: int) -> None:
    """evaluate.py matches each page once and hands the result to both files: METRICS.json and MATCHES.json
    are what evaluate_pages and page_matches give when each matches the page itself."""
    pages = _random_pages(seed, 6)
    results = [match_page(p, t) for _, p, t in pages]
    assert metrics_from_results(results, CLASSES) == evaluate_pages([(p, t) for _, p, t in pages], CLASSES)
    for (name, p, t), res in zip(pages, results, strict=True):
        assert page_matches(name, p, t, result=res) == page_matches(name, p, t)
    assert sum(r.predictions for r in results) > 0


def test_a_page_box_by_box() -> None:
    truth = [D("supply_diffuser", 0, 0, 30, 30), D("return_diffuser", 100, 0, 130, 30),
             D("fire_damper", 200, 0, 230, 30)]
    preds = [D("supply_diffuser", 1, 0, 31, 30, 0.9),     # tp on truth 0
             D("supply_diffuser", 100, 0, 130, 30, 0.8),  # fp on the return diffuser
             D("thermostat", 500, 500, 520, 520, 0.7),    # fp on nothing
             D("supply_diffuser", 0, 0, 30, 30, 0.6),     # fp: a duplicate on truth 0
             D("fire_damper", 200, 0, 230, 30, CONFIDENCE - 1e-6)]  # below the confidence: not listed
    page = page_matches("page_0001.png", preds, truth)
    got = [(r["class"], r["match"], r.get("truth"), (r.get("overlaps") or {}).get("class")) for r in page["predictions"]]
    assert got == [("supply_diffuser", "tp", 0, None), ("supply_diffuser", "fp", None, "return_diffuser"),
                   ("thermostat", "fp", None, None), ("supply_diffuser", "fp", None, "supply_diffuser")]
    assert [(r["truth"], r["class"]) for r in page["missed"]] == [(1, "return_diffuser"), (2, "fire_damper")]
    assert page["fp_dropped"] == {} and page["truth"] == 3


def _page(preds: list[dict], missed: list[dict], dropped: dict | None = None) -> dict:
    return {"schema": 1, "pages": [{"page": "p.png", "truth": 0, "predictions": preds, "missed": missed,
                                    "fp_dropped": dropped or {}}]}


B = [0, 0, 10, 10]


@pytest.mark.parametrize(("preds", "missed", "dropped", "cells"), [
    # a true positive: on the diagonal
    ([{"class": "fire_damper", "match": "tp", "truth": 0, "box": B}], [], None, {("fire_damper", "fire_damper"): 1}),
    # a look-alike over a missed truth: (predicted, true), the miss not counted again
    ([{"class": "supply_diffuser", "match": "fp", "box": B,
       "overlaps": {"truth": 0, "class": "return_diffuser", "iou": 0.8}}],
     [{"truth": 0, "class": "return_diffuser", "box": B}], None, {("supply_diffuser", "return_diffuser"): 1}),
    # overlap below the pinned IoU: background, and the miss counts as missed
    ([{"class": "supply_diffuser", "match": "fp", "box": B,
       "overlaps": {"truth": 0, "class": "return_diffuser", "iou": IOU - 0.01}}],
     [{"truth": 0, "class": "return_diffuser", "box": B}], None,
     {("supply_diffuser", "background"): 1, ("background", "return_diffuser"): 1}),
    # a duplicate on its own class: background
    ([{"class": "fire_damper", "match": "fp", "box": B, "overlaps": {"truth": 0, "class": "fire_damper", "iou": 0.9}}],
     [], None, {("fire_damper", "background"): 1}),
    # on nothing, and past the per-page bound: background
    ([{"class": "thermostat", "match": "fp", "box": B, "overlaps": None}], [], {"thermostat": 2},
     {("thermostat", "background"): 3}),
    # a plain miss
    ([], [{"truth": 3, "class": "smoke_damper", "box": B}], None, {("background", "smoke_damper"): 1}),
])
def test_confusion_table(preds: list, missed: list, dropped: dict | None, cells: dict) -> None:
    obj = _page(preds, missed, dropped)
    assert cm.problems(obj) == []
    c = cm.confusion([obj], IOU)
    assert c.cells == cells
    assert c.labels[-1] == cm.BACKGROUND
    m = c.as_json()
    assert sum(map(sum, m["matrix"])) == sum(cells.values())


def test_lookalike_groups_sit_together_first() -> None:
    order, groups = cm.class_order(["thermostat", "fire_damper", "return_diffuser", "supply_diffuser",
                                    "vav_box", "smoke_damper", "humidistat"])
    assert order[:2] == ("supply_diffuser", "return_diffuser")
    assert set(order[2:4]) == {"fire_damper", "smoke_damper"}
    assert groups["square_diffusers"] == ("supply_diffuser", "return_diffuser")
    assert groups["dampers"] == ("fire_damper", "smoke_damper")
    assert order[-1] == "vav_box"  # not in a group: after the groups


@pytest.mark.parametrize("bad", [
    [], {"schema": 2, "pages": []}, {"schema": 1}, {"schema": 1, "pages": [{"page": "p"}]},
    _page([{"class": "x", "match": "maybe", "box": B}], []), _page([{"class": "x", "match": "tp", "box": [1]}], []),
])
def test_problems_names_a_bad_file(bad: object) -> None:
    assert cm.problems(bad)


def test_regions_where_two_models_differ_most() -> None:
    truth = [D("fire_damper", 100 + 40 * i, 100, 130 + 40 * i, 130) for i in range(3)]
    truth.append(D("thermostat", 900, 900, 930, 930))
    good = [D(t.cls, *t.box, 0.9) for t in truth]
    bad = [good[-1]]  # misses the three dampers, finds the thermostat
    a = matches_file([page_matches("p.png", good, truth)], CLASSES)
    b = matches_file([page_matches("p.png", bad, truth)], CLASSES)
    regions = cm.differing_regions(a, b, side=300, limit=4, sizes={"p.png": (1000, 1000)})
    assert regions[0].page == "p.png" and regions[0].score == 3
    x1, y1, x2, y2 = regions[0].box
    assert x1 <= 100 and x2 >= 210 and y1 <= 100 and y2 >= 130 and x2 - x1 == 300
    assert all(r.score >= 1 for r in regions)
    assert cm.differing_regions(a, a, side=300, limit=4) == []  # the same model differs nowhere


def test_error_regions_find_where_one_model_invents_and_misses() -> None:
    truth = [D("fire_damper", 100 + 40 * i, 100, 130 + 40 * i, 130) for i in range(3)]
    truth.append(D("thermostat", 900, 900, 930, 930))
    preds = [D("thermostat", 900, 900, 930, 930, 0.9), D("smoke_damper", 600, 600, 630, 630, 0.8)]
    obj = matches_file([page_matches("p.png", preds, truth)], CLASSES)
    regions = cm.error_regions(obj, side=300, limit=4, sizes={"p.png": (1000, 1000)})
    assert [r.score for r in regions] == [3, 1]  # three misses together, then the invented damper
    assert cm.error_regions(matches_file([page_matches("p.png", [D(t.cls, *t.box, 0.9) for t in truth], truth)],
                                         CLASSES), side=300, limit=4) == []  # a perfect page has none


@pytest.mark.parametrize(("present", "base", "want"), [
    # look-alikes still sit together (blocks first), but blocks, their members and the rest in the data's order
    (["vav_box", "thermostat", "supply_diffuser", "return_diffuser"],
     ["vav_box", "return_diffuser", "thermostat", "supply_diffuser"],
     ("return_diffuser", "supply_diffuser", "thermostat", "vav_box")),
    (["fire_damper", "supply_diffuser", "return_diffuser", "smoke_damper"],
     ["smoke_damper", "fire_damper", "supply_diffuser", "return_diffuser"],
     ("smoke_damper", "fire_damper", "supply_diffuser", "return_diffuser")),
    # classes of the user's own, unknown to looper's 26: in the manifest's order, not sorted
    (["zeta_valve", "alpha_pump", "vav_box"], ["zeta_valve", "vav_box", "alpha_pump"],
     ("zeta_valve", "vav_box", "alpha_pump")),
    # a name the manifest lacks goes last, sorted
    (["b_thing", "a_thing", "vav_box"], ["vav_box"], ("vav_box", "a_thing", "b_thing")),
    # the default base is looper's 26, in their order
    (["vav_box", "thermostat"], None, ("thermostat", "vav_box")),
])
def test_class_order_follows_the_datas_manifest(present: list, base: list | None, want: tuple) -> None:
    order, _ = cm.class_order(present) if base is None else cm.class_order(present, base)
    assert order == want


def test_the_confusion_matrix_takes_the_order_of_the_classes_matches_json_lists() -> None:
    preds = [{"class": "zeta_valve", "match": "tp", "box": B}, {"class": "alpha_pump", "match": "tp", "box": B}]
    c = cm.confusion([_page(preds, [])], IOU, ["zeta_valve", "alpha_pump"])
    assert c.labels == ("zeta_valve", "alpha_pump", cm.BACKGROUND)
    assert cm.confusion([_page(preds, [])], IOU).labels == ("alpha_pump", "zeta_valve", cm.BACKGROUND)
