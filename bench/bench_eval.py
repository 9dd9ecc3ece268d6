"""Benchmark: evaluate.py's batched tiled inference vs SAHI sliced prediction (CPU).

    python bench/bench_eval.py --weights RUN/weights.pt --data DATA [--pages 6] [--device cpu]
    python bench/bench_eval.py --weights W --sizes 1024,3072,6144 --before DIR [--repeats 2] [--sahi] [--ink F]

``--sizes``: one page of each side (bench/big_pages.py, under --work), evaluated by a whole
``evaluate.py`` process of this checkout and of ``--before`` (a folder holding an older evaluate.py and
its looper/, e.g. ``git archive MAIN evaluate.py looper | tar -x -C DIR``), interleaved, ``--repeats``
times each; wall seconds and the process's peak resident memory (os.wait4), and whether the two
METRICS.json files are the same bytes. ``--sahi``: also SAHI's get_sliced_prediction with Ultralytics'
own predictor on the same page, same slices (in one process: its seconds exclude start-up).

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
sys.path.insert(1, str(REPO / "bench"))

import evaluate as E  # noqa: E402
from looper.core.scoring.metrics import CONFIDENCE, Detection, evaluate_pages, iou  # noqa: E402


def agreement(a: list[Detection], b: list[Detection]) -> float:
    """Share of boxes in ``a`` with a same-class box in ``b`` at IoU >= 0.9."""
    if not a:
        return 1.0 if not b else 0.0
    return sum(any(x.cls == y.cls and iou(x.box, y.box) >= 0.9 for y in b) for x in a) / len(a)


def timed_eval(script: Path, weights: Path, data: Path, out: Path) -> dict:
    """One evaluate.py process: wall seconds, peak RSS (MB), its METRICS.json bytes."""
    import os
    import subprocess

    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, str(script), "--weights", str(weights.resolve()), "--data", str(data),
                          "--out", str(out / "METRICS.json")], cwd=script.parent,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if status != 0:
        raise SystemExit(f"bench_eval: {script} exited {status}: {err[-400:]}")
    return {"seconds": round(wall, 1), "peak_mb": round(usage.ru_maxrss / 1024.0, 0),
            "metrics": (out / "METRICS.json").read_bytes()}


def sahi_page(weights: Path, image: Path, classes: list[str]) -> dict:
    """SAHI's sliced prediction with Ultralytics' own predictor, the same tile, overlap and confidence."""
    import resource

    from sahi import AutoDetectionModel
    from sahi.predict import get_sliced_prediction
    from ultralytics import YOLO

    yolo = YOLO("yolov8n.yaml", task="detect")  # a shell built from a yaml (offline), its network replaced
    yolo.model = E.load_model(weights, "cpu")  # the same network, in Ultralytics' own wrapper
    sm = AutoDetectionModel.from_pretrained(model_type="ultralytics", model=yolo, confidence_threshold=CONFIDENCE,
                                            device="cpu", image_size=E.TILE)
    ratio = E.OVERLAP / E.TILE
    t = time.perf_counter()
    res = get_sliced_prediction(str(image), sm, slice_height=E.TILE, slice_width=E.TILE, overlap_height_ratio=ratio,
                                overlap_width_ratio=ratio, perform_standard_pred=False, postprocess_type="GREEDYNMM",
                                postprocess_match_metric="IOS", postprocess_match_threshold=0.5, verbose=0)
    wall = time.perf_counter() - t
    return {"seconds": round(wall, 1), "boxes": len(res.object_prediction_list),
            "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 0)}


def sizes(args: argparse.Namespace) -> int:
    import big_pages

    rows = []
    for side in args.sizes:
        data = args.work / (f"pages-{side}" + (f"-ink{args.ink:g}" if args.ink < 1 else ""))
        if not (data / "manifest.json").is_file():
            big_pages.write(data, side, 1, 0, args.ink)
        for rep in range(args.repeats):
            for who, script in (("before", args.before / "evaluate.py"), ("after", REPO / "evaluate.py")):
                r = timed_eval(script, args.weights, data, args.work / f"out-{side}-{who}-{rep}")
                m = json.loads(r["metrics"])
                rows.append({"side": side, "who": who, "repeat": rep, **r, "weighted_f1": m["weighted_f1"],
                             "predictions": m["predictions"]})
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "metrics"}), flush=True)
        same = len({r["metrics"] for r in rows if r["side"] == side}) == 1
        print(json.dumps({"side": side, "metrics_identical_before_after": same}), flush=True)
        if args.sahi:
            classes = json.loads((data / "manifest.json").read_text())["classes"]
            (image, _), = E.read_pages(data, "test")
            print(json.dumps({"side": side, "who": "sahi+ultralytics predict", **sahi_page(args.weights, image, classes)}),
                  flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", type=Path, required=True)
    ap.add_argument("--data", type=Path)
    ap.add_argument("--pages", type=int, default=6)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sizes", default="", help="page sides to time whole evaluate.py runs at, e.g. 1024,3072,6144")
    ap.add_argument("--before", type=Path, help="with --sizes: a folder with an older evaluate.py and its looper/")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "eval-sizes")
    ap.add_argument("--ink", type=float, default=1.0, help="with --sizes: the drawn fraction of each page's 1024-px "
                    "blocks, the rest white paper (bench/big_pages.py --ink)")
    ap.add_argument("--sahi", action="store_true", help="with --sizes: also SAHI + Ultralytics predict per page")
    args = ap.parse_args()
    if args.sizes:
        args.sizes = [int(x) for x in args.sizes.split(",") if x]
        if args.before is None:
            ap.error("--sizes needs --before")
        return sizes(args)
    if args.data is None:
        ap.error("--data is required without --sizes")
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
