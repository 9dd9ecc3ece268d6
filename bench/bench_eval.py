"""Benchmark: evaluate.py's batched tiled inference vs SAHI sliced prediction (CPU).

    python bench/bench_eval.py --weights RUN/weights.pt --data DATA [--pages 6] [--device cpu]

Same pages, same weights, same tile size/overlap and confidence. Prints pages/second for
both, the ratio, and how far the merged boxes agree (same-class partner at IoU >= 0.9).
SAHI is a bench-only extra (`pip install sahi`); nothing in looper needs it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import evaluate as E  # noqa: E402
from looper.core.metrics import CONFIDENCE, Detection, evaluate_pages, iou  # noqa: E402


def agreement(a: list[Detection], b: list[Detection]) -> float:
    """Share of boxes in ``a`` with a same-class box in ``b`` at IoU >= 0.9."""
    if not a:
        return 1.0 if not b else 0.0
    return sum(any(x.cls == y.cls and iou(x.box, y.box) >= 0.9 for y in b) for x in a) / len(a)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--pages", type=int, default=6)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    classes = json.loads((args.data / "manifest.json").read_text())["classes"]
    pages = E.read_pages(args.data, "test")[: args.pages]
    model = E.load_model(args.weights, args.device)

    t = time.perf_counter()
    ours = [[Detection(classes[c], b, s) for c, b, s in E.detect_page(model, img, args.device, len(classes))]
            for img, _ in pages]
    t_ours = time.perf_counter() - t

    from sahi import AutoDetectionModel
    from sahi.predict import get_sliced_prediction

    sm = AutoDetectionModel.from_pretrained(model_type="ultralytics", model_path=str(args.weights),
                                            confidence_threshold=CONFIDENCE, device=args.device, image_size=E.TILE)
    ratio = E.OVERLAP / E.TILE
    t = time.perf_counter()
    theirs = []
    for img, _ in pages:
        res = get_sliced_prediction(str(img), sm, slice_height=E.TILE, slice_width=E.TILE,
                                    overlap_height_ratio=ratio, overlap_width_ratio=ratio,
                                    perform_standard_pred=False, postprocess_type="GREEDYNMM",
                                    postprocess_match_metric="IOS", postprocess_match_threshold=0.5, verbose=0)
        theirs.append([Detection(classes[o.category.id], tuple(float(v) for v in o.bbox.to_xyxy()), o.score.value)
                       for o in res.object_prediction_list])
    t_sahi = time.perf_counter() - t

    truth = [[Detection(b["class"], tuple(float(v) for v in b["box"])) for b in tr["boxes"]] for _, tr in pages]
    m_ours = evaluate_pages(list(zip(ours, truth, strict=True)), classes)
    m_sahi = evaluate_pages(list(zip(theirs, truth, strict=True)), classes)
    n = len(pages)
    report = {
        "pages": n, "ours_pages_per_s": round(n / t_ours, 3), "sahi_pages_per_s": round(n / t_sahi, 3),
        "speedup": round(t_sahi / t_ours, 2),
        "boxes_ours": sum(map(len, ours)), "boxes_sahi": sum(map(len, theirs)),
        "identical_boxes": ours == theirs,
        "ours_in_sahi_iou90": round(sum(agreement(a, b) for a, b in zip(ours, theirs, strict=True)) / n, 3),
        "sahi_in_ours_iou90": round(sum(agreement(b, a) for a, b in zip(ours, theirs, strict=True)) / n, 3),
        "weighted_f1_ours": m_ours["weighted_f1"], "weighted_f1_sahi": m_sahi["weighted_f1"],
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
