"""Page-level matching, tile merging and per-class metrics (looper/core/metrics.py)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looper.core.metrics import (
    CONFIDENCE,
    IOU,
    Detection,
    drop_seam_boxes,
    evaluate_pages,
    iou,
    match_page,
    merge_detections,
    metrics_from_counts,
    tile_grid,
    tile_origins,
)

CLASSES = ["supply_grille", "return_grille", "exhaust_grille", "thermostat"]


def D(cls: str, x1: float, y1: float, x2: float, y2: float, score: float = 1.0) -> Detection:
    return Detection(cls, (x1, y1, x2, y2), score)


TRUTH = [D("supply_grille", 10, 10, 50, 40), D("supply_grille", 100, 10, 140, 40),
         D("return_grille", 10, 100, 50, 130), D("thermostat", 200, 200, 230, 230)]


def test_perfect_page() -> None:
    preds = [Detection(t.cls, t.box, 0.9) for t in TRUTH]
    m = evaluate_pages([(preds, TRUTH)], CLASSES)
    assert m["macro_f1"] == 1.0 and m["weighted_f1"] == 1.0
    sg = m["classes"]["supply_grille"]
    assert (sg["tp"], sg["fp"], sg["fn"], sg["support"]) == (2, 0, 0, 2)
    assert sg["precision"] == sg["recall"] == sg["f1"] == 1.0 and sg["count_error"] == 0.0
    assert m["pages"] == 1 and m["predictions"] == 4 and m["truth"] == 4
    assert set(m["classes"]) == set(CLASSES)  # every class, support or not
    eg = m["classes"]["exhaust_grille"]
    assert eg["support"] == 0 and eg["recall"] is None and eg["f1"] is None and eg["precision"] is None
    assert eg["weight"] == 0.0


def test_all_missed() -> None:
    m = evaluate_pages([([], TRUTH)], CLASSES)
    assert m["macro_f1"] == 0.0 and m["weighted_f1"] == 0.0
    sg = m["classes"]["supply_grille"]
    assert (sg["tp"], sg["fp"], sg["fn"]) == (0, 0, 2)
    assert sg["precision"] == 0.0 and sg["recall"] == 0.0 and sg["count_error"] == -1.0


def test_all_false_positives() -> None:
    preds = [D("supply_grille", 300, 300, 340, 330, 0.9), D("exhaust_grille", 400, 400, 440, 430, 0.8)]
    m = evaluate_pages([(preds, TRUTH)], CLASSES)
    sg = m["classes"]["supply_grille"]
    assert (sg["tp"], sg["fp"], sg["fn"]) == (0, 1, 2)
    assert sg["precision"] == 0.0 and sg["f1"] == 0.0 and sg["count_error"] == -0.5
    eg = m["classes"]["exhaust_grille"]  # no support, but a false positive: precision 0, recall null
    assert eg["precision"] == 0.0 and eg["recall"] is None and eg["count_error"] == 1.0
    assert m["macro_f1"] == 0.0


def test_duplicates_count_once() -> None:
    t = [D("thermostat", 0, 0, 30, 30)]
    preds = [D("thermostat", 0, 0, 30, 30, 0.9), D("thermostat", 1, 1, 31, 31, 0.8)]
    r = match_page(preds, t)
    assert (r.counts["thermostat"].tp, r.counts["thermostat"].fp) == (1, 1)
    merged = merge_detections(preds)  # the tile merge removes the duplicate first
    assert len(merged) == 1 and merged[0].score == 0.9


def test_confidence_threshold_is_applied() -> None:
    t = [D("thermostat", 0, 0, 30, 30)]
    r = match_page([D("thermostat", 0, 0, 30, 30, CONFIDENCE - 0.01)], t)
    assert r.predictions == 0 and r.counts["thermostat"].fn == 1
    r = match_page([D("thermostat", 0, 0, 30, 30, CONFIDENCE)], t)
    assert r.counts["thermostat"].tp == 1


def test_iou_threshold_boundary() -> None:
    t = [D("thermostat", 0, 0, 30, 30)]
    assert iou((0, 0, 30, 30), (0, 0, 30, 15)) == 0.5
    assert match_page([D("thermostat", 0, 0, 30, 15)], t).counts["thermostat"].tp == 1
    assert match_page([D("thermostat", 0, 0, 30, 14)], t).counts["thermostat"].tp == 0


def test_symbol_split_across_two_tiles_is_merged_back() -> None:
    truth = [D("exhaust_grille", 230, 100, 270, 140)]
    # overlapping tiles: tile A (0..256) sees a piece, tile B (160..416) sees all of it
    piece = D("exhaust_grille", 230, 100, 256, 140, 0.7)
    whole = D("exhaust_grille", 231, 100, 270, 140, 0.6)
    assert drop_seam_boxes([piece], (0, 0), 256, (1024, 1024)) == []  # cut by tile A's inner edge
    assert drop_seam_boxes([whole], (160, 0), 256, (1024, 1024)) == [whole]
    merged = merge_detections([piece, whole])
    assert len(merged) == 1 and merged[0].box == (230, 100, 270, 140)
    # two halves abutting on a seam join into their union and match the truth
    halves = [D("exhaust_grille", 230, 100, 256, 140, 0.7), D("exhaust_grille", 256, 101, 270, 140, 0.5)]
    merged = merge_detections(halves)
    assert len(merged) == 1 and merged[0].box == (230, 100, 270, 140)
    merged_counts = match_page(merged, truth).counts["exhaust_grille"]
    assert (merged_counts.tp, merged_counts.fp) == (1, 0)
    unmerged = match_page(halves, truth).counts["exhaust_grille"]
    assert (unmerged.tp, unmerged.fp) == (1, 1)  # unmerged, the second half is a false positive


def test_merge_keeps_distinct_classes_and_distant_boxes() -> None:
    dets = [D("supply_grille", 0, 0, 40, 30, 0.9), D("return_grille", 0, 0, 40, 30, 0.8),
            D("supply_grille", 100, 0, 140, 30, 0.7)]
    assert len(merge_detections(dets)) == 3


def test_page_edges_are_not_seams() -> None:
    d = D("thermostat", 0, 0, 30, 30, 0.9)  # touches the page's own left/top edge
    assert drop_seam_boxes([d], (0, 0), 256, (1024, 1024)) == [d]
    e = D("thermostat", 994, 994, 1024, 1024, 0.9)
    assert drop_seam_boxes([e], (768, 768), 256, (1024, 1024)) == [e]


def test_lookalike_confusion_is_fp_and_fn() -> None:
    truth = [D("supply_grille", 10, 10, 50, 40)]
    preds = [D("return_grille", 10, 10, 50, 40, 0.9)]
    m = evaluate_pages([(preds, truth)], CLASSES)
    assert m["classes"]["supply_grille"]["fn"] == 1 and m["classes"]["supply_grille"]["tp"] == 0
    assert m["classes"]["return_grille"]["fp"] == 1
    assert m["macro_f1"] == 0.0


def test_weights_favour_rare_classes() -> None:
    truth = [D("supply_grille", 50 * i, 0, 50 * i + 40, 30) for i in range(16)] + [D("thermostat", 0, 100, 30, 130)]
    preds = [D("thermostat", 0, 100, 30, 130, 0.9)]  # only the rare class found
    m = evaluate_pages([(preds, truth)], CLASSES)
    w_sg, w_t = m["classes"]["supply_grille"]["weight"], m["classes"]["thermostat"]["weight"]
    assert w_t == pytest.approx(0.8, abs=1e-6) and w_sg == pytest.approx(0.2, abs=1e-6)  # 1/4 : 1/1
    assert m["weighted_f1"] == pytest.approx(0.8, abs=1e-6)
    assert m["macro_f1"] == pytest.approx(0.5, abs=1e-6)


def test_unknown_class_is_an_error() -> None:
    with pytest.raises(ValueError, match="outside"):
        evaluate_pages([([D("mystery", 0, 0, 10, 10, 0.9)], [])], CLASSES)


def test_tile_grid_covers_page() -> None:
    assert tile_origins(1024, 256, 96) == [0, 160, 320, 480, 640, 768]
    assert tile_origins(200, 256, 96) == [0]
    grid = tile_grid(1024, 768, 256, 96)
    covered = {(x, y) for x0, y0 in grid for x in range(x0, x0 + 256, 8) for y in range(y0, y0 + 256, 8)}
    assert all((x, y) in covered for x in range(0, 1024, 8) for y in range(0, 768, 8))
    with pytest.raises(ValueError):
        tile_origins(1024, 96, 96)


# -- independent brute-force cross-check -------------------------------------------------
def brute_force(pages: list[tuple[list[Detection], list[Detection]]], classes: list[str]) -> dict[str, tuple]:
    """Greedy matching written plainly: loops over everything, no shared helpers."""
    def ov(a: tuple, b: tuple) -> float:
        iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = iw * ih
        u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / u if u > 0 else 0.0

    tp = dict.fromkeys(classes, 0)
    fp = dict.fromkeys(classes, 0)
    fn = dict.fromkeys(classes, 0)
    for preds, truth in pages:
        for c in classes:
            ps = sorted([p for p in preds if p.cls == c and p.score >= CONFIDENCE],
                        key=lambda p: (-p.score, p.box))
            ts = [t.box for t in truth if t.cls == c]
            taken = [False] * len(ts)
            for p in ps:
                cand = [(ov(p.box, tb), -j) for j, tb in enumerate(ts) if not taken[j] and ov(p.box, tb) >= IOU]
                if cand:
                    taken[-max(cand)[1]] = True
                    tp[c] += 1
                else:
                    fp[c] += 1
            fn[c] += taken.count(False)
    out = {}
    f1s, inv = {}, {}
    for c in classes:
        s = tp[c] + fn[c]
        if s:
            p = tp[c] / (tp[c] + fp[c]) if tp[c] + fp[c] else 0.0
            r = tp[c] / s
            f1s[c] = 2 * p * r / (p + r) if p + r else 0.0
            inv[c] = 1 / math.sqrt(s)
        out[c] = (tp[c], fp[c], fn[c])
    wf1 = sum(inv[c] * f1s[c] for c in f1s) / sum(inv.values()) if f1s else None
    mf1 = sum(f1s.values()) / len(f1s) if f1s else None
    return {"counts": out, "weighted": wf1, "macro": mf1}


def random_pages(rng: random.Random, n_pages: int) -> list[tuple[list[Detection], list[Detection]]]:
    pages = []
    for _ in range(n_pages):
        truth = []
        for _ in range(rng.randint(0, 12)):
            x, y = rng.randint(0, 200), rng.randint(0, 200)
            truth.append(D(rng.choice(CLASSES), x, y, x + rng.randint(8, 40), y + rng.randint(8, 40)))
        preds = []
        for t in truth:  # jittered copies, sometimes relabelled, sometimes doubled
            for _ in range(rng.choice([0, 1, 1, 2])):
                j = [v + rng.uniform(-8, 8) for v in t.box]
                box = (min(j[0], j[2] - 1), min(j[1], j[3] - 1), max(j[2], j[0] + 1), max(j[3], j[1] + 1))
                cls = t.cls if rng.random() < 0.8 else rng.choice(CLASSES)
                preds.append(Detection(cls, box, round(rng.random(), 3)))
        for _ in range(rng.randint(0, 4)):
            x, y = rng.randint(0, 200), rng.randint(0, 200)
            preds.append(D(rng.choice(CLASSES), x, y, x + 20, y + 20, round(rng.random(), 3)))
        pages.append((preds, truth))
    return pages


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_pages=st.integers(1, 4))
def test_matches_brute_force(seed: int, n_pages: int) -> None:
    pages = random_pages(random.Random(seed), n_pages)
    got = evaluate_pages(pages, CLASSES)
    want = brute_force(pages, CLASSES)
    for c in CLASSES:
        k = got["classes"][c]
        assert (k["tp"], k["fp"], k["fn"]) == want["counts"][c], c
    for key, name in (("weighted_f1", "weighted"), ("macro_f1", "macro")):
        if want[name] is None:
            assert got[key] is None
        else:
            assert got[key] == pytest.approx(want[name], abs=2e-6)


def test_metrics_from_counts_rounds_and_is_stable() -> None:
    from looper.core.metrics import Counts

    m1 = metrics_from_counts({"thermostat": Counts(1, 2, 0)}, CLASSES, 1, 3, 1)
    m2 = metrics_from_counts({"thermostat": Counts(1, 2, 0)}, CLASSES, 1, 3, 1)
    assert m1 == m2 and m1["classes"]["thermostat"]["precision"] == 0.333333
    assert m1["iou"] == IOU and m1["confidence"] == CONFIDENCE
