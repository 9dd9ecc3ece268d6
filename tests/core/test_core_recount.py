"""The score from evidence (looper/core/scoring/recount.py): METRICS.json recounted from MATCHES.json.

An honest evaluation's two files always agree (random pages, both P/R/F1 paths); each forged
field is named; malformed evidence is refused, never read as agreement."""

from __future__ import annotations

import copy
import json

import pytest
from test_core_matches import CLASSES, _random_pages

from looper.core.scoring import recount
from looper.core.scoring.metrics import evaluate_pages, matches_file, page_matches


def _pair(seed: int, max_fp: int = 400) -> tuple[dict, dict]:
    pages = _random_pages(seed, 5)
    metrics = evaluate_pages([(p, t) for _, p, t in pages], CLASSES)
    obj = matches_file([page_matches(n, p, t, max_fp=max_fp) for n, p, t in pages], CLASSES)
    return json.loads(json.dumps(metrics)), json.loads(json.dumps(obj))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_fp", [400, 1])
def test_an_honest_evaluation_agrees(seed: int, max_fp: int) -> None:
    metrics, matches = _pair(seed, max_fp)
    assert recount.disagreements(metrics, matches) == []


def _first_class(metrics: dict) -> str:
    return next(c for c, row in metrics["classes"].items() if row["support"] > 0)


def _forge_everything(m: dict) -> None:  # issue 39: every rate rewritten to 0.99, counts left as they were
    for row in m["classes"].values():
        row.update(precision=0.99, recall=0.99, f1=0.99)
    m.update(weighted_f1=0.99, macro_f1=0.99)


FORGERIES = [
    ("weighted_f1", lambda m: m.update(weighted_f1=m["weighted_f1"] + 0.01), "weighted_f1: "),
    ("macro_f1", lambda m: m.update(macro_f1=0.99), "macro_f1: 0.99 in METRICS.json"),
    ("score missing", lambda m: m.pop("weighted_f1"), "weighted_f1: None in METRICS.json"),
    ("score a string", lambda m: m.update(weighted_f1="0.9"), "weighted_f1: '0.9' in METRICS.json"),
    ("recall", lambda m: m["classes"][_first_class(m)].update(recall=0.99), "recall: 0.99 in METRICS.json"),
    ("tp", lambda m: m["classes"][_first_class(m)].update(tp=m["classes"][_first_class(m)]["tp"] + 1), " tp: "),
    ("fn", lambda m: m["classes"][_first_class(m)].update(fn=0), " fn: 0 in METRICS.json"),
    ("pages", lambda m: m.update(pages=99), "pages: 99 in METRICS.json, 5 from MATCHES.json"),
    ("truth", lambda m: m.update(truth=1), "truth: 1 in METRICS.json"),
    ("predictions", lambda m: m.update(predictions=-1), "predictions: -1 in METRICS.json"),
    ("every rate", _forge_everything, "in METRICS.json"),
]


@pytest.mark.parametrize(("name", "forge", "words"), FORGERIES, ids=[f[0] for f in FORGERIES])
def test_each_forged_field_is_named(name: str, forge, words: str) -> None:
    metrics, matches = _pair(1)
    forge(metrics)
    found = recount.disagreements(metrics, matches)
    assert found and any(words in f for f in found), found


def test_a_long_list_is_cut_and_says_how_many_more() -> None:
    metrics, matches = _pair(2)
    _forge_everything(metrics)
    found = recount.disagreements(metrics, matches)
    assert len(found) == recount.MAX_NAMED + 1 and found[-1].startswith("... and ")


def test_a_forged_matches_file_is_caught_the_same_way() -> None:
    metrics, matches = _pair(3)
    page = next(p for p in matches["pages"] if p["missed"])
    page["missed"].pop()  # one miss hidden from the evidence
    found = recount.disagreements(metrics, matches)
    assert any(" fn: " in f for f in found), found


BAD = [
    ("matches not an object", lambda m, x: (m, []), "MATCHES.json is not an object"),
    ("matches wrong schema", lambda m, x: (m, {**x, "schema": 2}), "schema 2 is not 1"),
    ("metrics not an object", lambda m, x: ([], x), "METRICS.json is not an object"),
    ("no class table", lambda m, x: ({**m, "classes": None}, x), "no per-class table"),
    ("other classes", lambda m, x: (m, {**x, "classes": ["a", "b"]}), "METRICS.json names classes"),
    ("no class list in matches", lambda m, x: (m, {k: v for k, v in x.items() if k != "classes"}), None),
    ("unknown class boxes", lambda m, x: (m, _with_unknown(x)), "classes METRICS.json does not have"),
]


def _with_unknown(x: dict) -> dict:
    x = copy.deepcopy(x)
    x["pages"][0]["missed"].append({"truth": 999, "class": "ghost", "box": [0, 0, 1, 1]})
    return x


@pytest.mark.parametrize(("name", "bend", "words"), BAD, ids=[b[0] for b in BAD])
def test_malformed_evidence_is_refused_never_agreement(name: str, bend, words: str | None) -> None:
    metrics, matches = _pair(4)
    m, x = bend(metrics, matches)
    found = recount.disagreements(m, x)
    if words is None:  # MATCHES.json without its own class list: METRICS.json's classes are used
        assert found == []
    else:
        assert found and words in found[0], found


def test_a_class_without_support_with_false_positives_recounts_precision_zero() -> None:
    matches = {"schema": 1, "classes": ["a", "b"], "pages": [
        {"page": "p.png", "truth": 1, "predictions": [{"class": "b", "score": 0.9, "box": [0, 0, 1, 1], "match": "fp"}],
         "missed": [{"truth": 0, "class": "a", "box": [5, 5, 9, 9]}], "fp_dropped": {}}]}
    metrics = {"pages": 1, "predictions": 1, "truth": 1, "macro_f1": 0.0, "weighted_f1": 0.0, "classes": {
        "a": {"tp": 0, "fp": 0, "fn": 1, "precision": 0.0, "recall": 0.0, "f1": 0.0},
        "b": {"tp": 0, "fp": 1, "fn": 0, "precision": 0.0, "recall": None, "f1": None}}}
    assert recount.disagreements(metrics, matches) == []
    metrics["classes"]["b"]["recall"] = 0.0  # None recounted: a number is a disagreement
    assert recount.disagreements(metrics, matches) == ["class b recall: 0.0 in METRICS.json, None recounted from MATCHES.json"]
