"""The tuned confidence (looper/core/scoring/threshold.py): a class's F1-maximising threshold on val, its
test F1, the stream's shape, and the recount of a stream against its METRICS.json.

Table tests, and one property: on random pages the stream's F1 at any threshold is what evaluate.py's own
metrics would report with that confidence pinned."""

from __future__ import annotations

import copy
import json

import pytest
from test_core_matches import CLASSES, _random_pages

from looper.core.scoring import threshold as th
from looper.core.scoring.metrics import evaluate_pages, match_page

T, F = True, False

BEST = [
    # ranked (score, matched), support -> (low, high, f1) of the cut, or the reason; the threshold is the middle
    ("no truth", [(0.9, F)], 0, th.NO_TRUTH),
    ("no prediction", [], 3, th.NO_HIT),
    ("nothing matched", [(0.9, F), (0.1, F)], 2, th.NO_HIT),
    ("one hit: down to the stream's floor", [(0.4, T)], 1, (0.001, 0.4, 1.0)),
    ("a low hit lifts F1 below 0.25", [(0.9, T), (0.1, T), (0.05, F)], 2, (0.05, 0.1, 1.0)),
    ("a false positive on top: F1 ties, the higher cut wins", [(0.9, F), (0.5, T)], 1, (0.001, 0.5, 2 / 3)),
    ("equal F1 at two cuts: the higher", [(0.8, T), (0.6, F), (0.5, F), (0.4, T)], 2, (0.6, 0.8, 2 / 3)),
    ("tied scores are taken together", [(0.5, T), (0.5, F), (0.2, T)], 2, (0.001, 0.2, 0.8)),
    ("tied scores, one cut only", [(0.5, T), (0.5, F)], 1, (0.001, 0.5, 2 / 3)),
    ("order of the list does not matter", [(0.1, T), (0.9, T), (0.05, F)], 2, (0.05, 0.1, 1.0)),
    ("a box at the floor itself", [(0.9, F), (0.001, T)], 1, (0.001, 0.001, 2 / 3)),
]


@pytest.mark.parametrize(("name", "ranked", "support", "want"), BEST, ids=[b[0] for b in BEST])
def test_best_threshold(name: str, ranked, support: int, want) -> None:
    got = th.best_threshold(ranked, support)
    if isinstance(want, str):
        assert got == want
        return
    low, high, f1 = want
    assert (got.low, got.high) == (low, high) and got.f1 == pytest.approx(f1)
    assert got.threshold == ((low + high) / 2 if low < high else high)
    # the whole range selects the same boxes: the val F1 at the threshold is the cut's
    assert th.f1_at(ranked, support, got.threshold) == pytest.approx(f1)


def test_between_two_neighbouring_floats_the_upper_one() -> None:
    import math

    high = 0.5
    low = math.nextafter(high, 0.0)
    got = th.best_threshold([(high, T), (low, F)], 1)
    assert (got.low, got.high, got.threshold) == (low, high, high)


F1_AT = [
    ([(0.9, T), (0.3, F), (0.1, T)], 2, 0.25, 0.5),
    ([(0.9, T), (0.3, F), (0.1, T)], 2, 0.1, 0.8),
    ([(0.9, T), (0.3, F), (0.1, T)], 2, 0.95, 0.0),
    ([(0.9, F)], 0, 0.25, None),
    ([], 2, 0.25, 0.0),
]


@pytest.mark.parametrize(("ranked", "support", "t", "want"), F1_AT)
def test_f1_at(ranked, support: int, t: float, want) -> None:
    assert th.f1_at(ranked, support, t) == (None if want is None else pytest.approx(want))


def _stream(split: str, ranked: dict, support: dict, classes=("a", "b", "c")) -> dict:
    return {"schema": 1, "split": split, "classes": list(classes), "support": support,
            "ranked": {c: [[s, m] for s, m in rows] for c, rows in ranked.items()}}


VAL = _stream("val", {"a": [(0.9, T), (0.1, T), (0.05, F)], "b": [(0.7, F)]}, {"a": 2})
TEST = _stream("test", {"a": [(0.8, T), (0.2, T), (0.15, F), (0.02, T)], "b": [(0.3, T)]}, {"a": 3, "b": 1, "c": 2})


def test_class_rows_and_weighted() -> None:
    rows = {r.cls: r for r in th.class_rows(VAL, TEST)}
    a, b, c = rows["a"], rows["b"], rows["c"]
    assert (a.threshold, a.why, a.val_support, a.test_support) == ((0.05 + 0.1) / 2, "", 2, 3)
    assert (a.low, a.high) == (0.05, 0.1)
    assert a.val_f1 == 1.0 and a.val_f1_fixed == pytest.approx(2 / 3)
    assert a.test_f1_fixed == pytest.approx(0.5)  # 1 of 3 found, 1 box shown
    assert a.test_f1_tuned == pytest.approx(2 * (2 / 3) * (2 / 3) / (4 / 3))  # 0.8, 0.2, 0.15: 2 of 3, 2 of 3
    assert (b.threshold, b.why, b.val_f1, b.val_f1_fixed, b.test_f1_tuned) == (None, th.NO_TRUTH, None, None, None)
    assert b.test_f1_fixed == 1.0
    assert c.why == th.NO_TRUTH and c.test_f1_fixed == 0.0
    assert b.as_json()["class"] == "b" and a.as_json()["test_f1_tuned"] == round(a.test_f1_tuned, 6)
    assert a.as_json()["val_range"] == [0.05, 0.1] and b.as_json()["val_range"] is None
    fixed, tuned = th.weighted(list(rows.values()))
    w = 1 / 3  # three classes of test support under MIN_SUPPORT weigh alike
    assert fixed == pytest.approx(w * (0.5 + 1.0 + 0.0))
    assert tuned == pytest.approx(w * (a.test_f1_tuned + 1.0 + 0.0))


def test_weighted_without_test_truth() -> None:
    rows = th.class_rows(VAL, _stream("test", {}, {}))
    assert th.weighted(rows) == (None, None)


SHAPES = [
    ("not a dict", [], "is not a schema 1 object"),
    ("another schema", {**TEST, "schema": 2}, "is not a schema 1 object"),
    ("another split", {**TEST, "split": "val"}, "says split 'val', expected 'test'"),
    ("no ranked", {k: v for k, v in TEST.items() if k != "ranked"}, "lacks classes, support or ranked"),
    ("unlisted class", {**TEST, "ranked": {"z": [[0.5, True]]}}, "class 'z' is not"),
    ("bad entry", {**TEST, "ranked": {"a": [[0.5, 1]]}}, "class 'a' is not"),
    ("nan score", {**TEST, "ranked": {"a": [[float("nan"), True]]}}, "class 'a' is not"),
    ("ranked not a list", {**TEST, "ranked": {"a": {}}}, "class 'a' is not"),
    ("negative support", {**TEST, "support": {"a": -1}}, "support is not a count"),
    ("unlisted support", {**TEST, "support": {"z": 1}}, "support is not a count"),
]


@pytest.mark.parametrize(("name", "obj", "words"), SHAPES, ids=[s[0] for s in SHAPES])
def test_problems(name: str, obj, words: str) -> None:
    got = th.problems(obj, "test")
    assert len(got) == 1 and words in got[0]


def test_a_good_stream_has_no_problems() -> None:
    assert th.problems(TEST, "test") == [] and th.problems(VAL, "val") == []


def _honest(seed: int) -> tuple[dict, dict]:
    """A METRICS.json and the stream of the same random pages (what streameval.py pools)."""
    pages = _random_pages(seed, 5)
    metrics = evaluate_pages([(p, t) for _, p, t in pages], CLASSES)
    ranked: dict[str, list] = {}
    support: dict[str, int] = {}
    for _, p, t in pages:
        res = match_page(p, t)
        for c, rows in res.ranked.items():
            ranked.setdefault(c, []).extend([s, m] for s, m in rows)
        for c, flags in res.found.items():
            support[c] = support.get(c, 0) + len(flags)
    stream = {"schema": 1, "split": "test", "classes": list(CLASSES), "support": support, "ranked": ranked}
    return json.loads(json.dumps(metrics)), json.loads(json.dumps(stream))


@pytest.mark.parametrize("seed", range(5))
def test_an_honest_stream_agrees_at_every_threshold(seed: int) -> None:
    metrics, stream = _honest(seed)
    assert th.problems(stream, "test") == []
    assert th.disagreements(stream, metrics) == []
    pages = _random_pages(seed, 5)
    for t in (0.05, 0.3, 0.6):  # the stream read at t is evaluate.py's metrics with t pinned
        at_t = evaluate_pages([(p, tr) for _, p, tr in pages], CLASSES, confidence=t)
        for c in CLASSES:
            want = at_t["classes"][c]["f1"]
            got = th.f1_at([(s, m) for s, m in stream["ranked"].get(c, [])], stream["support"].get(c, 0), t)
            assert (got is None and want is None) or got == pytest.approx(want, abs=1e-6)


def test_a_forged_metrics_is_named() -> None:
    metrics, stream = _honest(1)
    c = next(c for c, row in metrics["classes"].items() if row["support"] > 0)
    forged = copy.deepcopy(metrics)
    forged["classes"][c]["f1"] = 0.999
    assert th.disagreements(stream, forged)[0].startswith(f"class {c}: f1 0.999 in METRICS.json")
    forged = copy.deepcopy(metrics)
    forged["classes"][c]["support"] += 1
    assert th.disagreements(stream, forged)[0].startswith(f"class {c}:")
    empty = next((c for c, row in metrics["classes"].items() if row["support"] == 0), None)
    if empty is not None:
        forged = copy.deepcopy(metrics)
        forged["classes"][empty]["f1"] = 0.5
        assert th.disagreements(stream, forged)


DISAGREE = [
    ("not an object", [], "no per-class table"),
    ("no classes", {"classes": []}, "no per-class table"),
    ("other classes", {"classes": {"a": {}}}, "name different classes"),
]


@pytest.mark.parametrize(("name", "metrics", "words"), DISAGREE, ids=[d[0] for d in DISAGREE])
def test_disagreements_on_a_wrong_metrics(name: str, metrics, words: str) -> None:
    assert words in th.disagreements(TEST, metrics)[0]


def test_a_row_that_is_not_an_object_disagrees() -> None:
    metrics = {"classes": {"a": 1, "b": {"f1": 1.0, "support": 1}, "c": {"f1": 0.0, "support": 2}}}
    assert [d.split(":")[0] for d in th.disagreements(TEST, metrics)] == ["class a"]
