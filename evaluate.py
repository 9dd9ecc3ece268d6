"""Evaluate one trained model on whole pages, per class (a fixed file: agents never edit it).

    python evaluate.py --weights W --data D --out METRICS.json [--split test] [--device cpu]

Each page is cut into overlapping square tiles of up to 1024 px (tile_side: as few and as small as
cover the page's longer side; never resized: the network is fully convolutional); tiles go through the network in batches (no
per-tile predict call; batch norms folded into their convolutions, as Ultralytics' predict does; one
batch's tensor held at a time, so memory does not grow with the page beyond its decoded image); boxes cut by an inner tile edge are dropped and the rest merged
across tiles class by class; predictions are matched to the page's truth per class at
IoU >= 0.5 (looper.core.scoring.metrics). Precision, recall, F1 and the per-instance ``found``
flags count boxes scored >= the pinned confidence 0.25; AP50 ranks every merged box
scored above 0.001. The METRICS.json format is in docs/INTERFACES.md. Beside it,
MATCHES.json holds every page's matched boxes at the pinned confidence (true positives,
false positives with the truth they overlap, misses; docs/REFERENCE.md). Same weights, same
data -> same bytes. On any failure it exits non-zero, says why, and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from looper.core.scoring.metrics import (
    CONFIDENCE,
    IOU,
    STREAM_CONFIDENCE,
    Detection,
    drop_seam_boxes,
    match_page,
    matches_file,
    merge_detections,
    metrics_from_results,
    page_matches,
)
from looper.core.scoring.tilegrid import tile_grid, tile_side

TILE = 1024  # the largest inference tile side, px: a page is cut into tiles of at most this (tile_side); the
# network is fully convolutional, so a tile larger than the 256-px training tiles sees each symbol as they do,
# and fewer, larger tiles pass each pixel through it 1.2 times instead of 2.6 (docs/INTERFACES.md)
LEAST = 256  # the smallest tile side, px (the training tile side): a smaller page is padded with paper to it
OVERLAP = 96  # px; larger than the largest symbol, so every symbol is whole in some tile
NMS_IOU = 0.7  # within-tile NMS (Ultralytics' default for validation)
BATCH_PIXELS = 32 * 256 * 256  # pixels per forward pass (32 tiles of 256 px, 2 of 1024): memory bounded per batch
MAX_DET = 300  # boxes a 256-px tile keeps after NMS; a larger tile keeps as many per pixel
MATCHES_NAME = "MATCHES.json"  # the matched boxes of every page, written beside --out (docs/REFERENCE.md)


def fail(msg: str, code: int = 2) -> None:
    print(f"evaluate.py: {msg}", file=sys.stderr)
    sys.exit(code)


WEIGHTS_FORMAT = "looper-weights/1"
WEIGHTS_REFUSED = 65  # exit status: the change handed over weights that are not data (a crash of the change)
MODEL_KEYS = {"nc", "scales", "scale", "depth_multiple", "width_multiple", "max_channels", "backbone", "head",
              "activation", "reg_max", "end2end", "kpt_shape", "yaml_file", "channels"}


def _literal(v: object) -> bool:
    return v is None or isinstance(v, (bool, int, float, str)) or (
        isinstance(v, list) and all(_literal(x) for x in v))


def architecture_problem(cfg: object) -> str | None:
    """None when the model yaml names only model layers with literal arguments; the problem otherwise.

    Ultralytics builds a model from its yaml by looking names up and, for ``activation``, by
    eval(): a yaml from train.py is untrusted, so only torch.nn / Ultralytics layer classes,
    literal arguments and a plain ``nn.<Activation>()`` pass."""
    import re

    import torch
    import ultralytics.nn.tasks as tasks

    if not isinstance(cfg, dict):
        return "the model yaml is not a mapping"
    unknown = sorted(set(cfg) - MODEL_KEYS)
    if unknown:
        return f"the model yaml has keys a model yaml does not have: {unknown}"
    act = cfg.get("activation")
    if act is not None:
        m = re.fullmatch(r"(?:torch\.)?nn\.([A-Za-z0-9]+)\(\)", act) if isinstance(act, str) else None
        cls = getattr(torch.nn, m.group(1), None) if m else None
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            return f"activation {act!r} is not a plain torch.nn activation like 'nn.SiLU()'"
    layers = cfg.get("backbone"), cfg.get("head")
    if not all(isinstance(x, list) for x in layers):
        return "the model yaml has no backbone and head lists"
    for i, layer in enumerate(layers[0] + layers[1]):
        if not (isinstance(layer, list) and len(layer) == 4 and isinstance(layer[2], str)):
            return f"layer {i} is not [from, repeats, module, args]"
        f, n, name, args = layer
        if name.startswith("nn."):
            cls = getattr(torch.nn, name[3:], None)
        else:
            cls = getattr(tasks, name, None) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else None
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            return f"layer {i}: {name!r} is not a model layer"
        if not (_literal(f) and isinstance(n, int) and isinstance(args, list) and _literal(args)):
            return f"layer {i} ({name}) has non-literal arguments"
    for key in ("nc", "depth_multiple", "width_multiple", "max_channels", "reg_max", "channels"):
        if key in cfg and not isinstance(cfg[key], (int, float)):
            return f"{key} is not a number"
    if "scales" in cfg and not (isinstance(cfg["scales"], dict) and _literal(list(cfg["scales"].values()))):
        return "scales is not a table of numbers"
    return None


def torch_device(asked: str, cuda: bool) -> str:
    """The torch device for ``--device`` (train.py's LOOPER_DEVICE: cpu | cuda | N | cuda:N): the GPU it names
    (cuda alone: the first), the CPU where it names none or CUDA is not there.

    >>> [torch_device(d, True) for d in ("cpu", "mps", "cuda", "0", "2", "cuda:3", "1,2")]
    ['cpu', 'cpu', 'cuda:0', 'cuda:0', 'cuda:2', 'cuda:3', 'cuda:1']
    >>> torch_device("2", False)
    'cpu'
    """
    first = asked.removeprefix("cuda").lstrip(":").split(",")[0]
    if asked in ("cpu", "mps", "") or not cuda:
        return "cpu"
    return f"cuda:{first}" if first.isdigit() else "cuda:0"


def load_model(weights: Path, device: str):  # type: ignore[no-untyped-def]
    """Build the network from the architecture yaml in the weights' header, then load its tensors.

    Weights are data (train.py's save_weights): a safetensors file, format looper-weights/1,
    whose header holds the model yaml and the class names. Nothing is unpickled. Anything else
    (a pickle, an unknown layer, an eval-able activation, tensors that do not fit the yaml) is
    refused with exit status 65: the change crashed, the harness did not."""
    import torch
    import yaml
    from safetensors import safe_open

    def refuse(why: str) -> None:
        fail(f"weights refused: {why}", WEIGHTS_REFUSED)

    try:
        with safe_open(str(weights), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no items()
    except Exception as exc:  # noqa: BLE001 - whatever it is, it is not a safetensors state dict
        refuse(f"{weights.name} is not a safetensors state dict ({type(exc).__name__}: {str(exc)[:160]}); "
               "train.py must save tensors plus the model yaml, a pickled checkpoint is never loaded")
    if meta.get("format") != WEIGHTS_FORMAT:
        refuse(f"{weights.name} has format {meta.get('format')!r}, expected {WEIGHTS_FORMAT!r}")
    try:
        cfg = yaml.safe_load(meta["model_yaml"])
        names = json.loads(meta["names"])
    except Exception as exc:  # noqa: BLE001
        refuse(f"{weights.name} header has no readable model_yaml and names ({type(exc).__name__}: {exc})")
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        refuse("names in the weights' header is not a list of class names")
    problem = architecture_problem(cfg)
    if problem:
        refuse(problem)
    from ultralytics.nn.tasks import DetectionModel

    try:
        model = DetectionModel(cfg, ch=int(cfg.get("channels", 3)), nc=len(names), verbose=False)
        model.load_state_dict(tensors, strict=True)
    except Exception as exc:  # noqa: BLE001 - tensors that do not fit the yaml
        refuse(f"the tensors do not fit the model yaml ({type(exc).__name__}: {str(exc)[:200]})")
    model.names = dict(enumerate(names))
    model = model.float().to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    model.fuse(verbose=False)  # each batch norm folded into its convolution: a third fewer passes over the tiles
    return model.to(memory_format=torch.channels_last)  # the layout oneDNN's CPU convolutions run fastest in


def read_pages(data: Path, split: str, classes: list[str] | None = None) -> list[tuple[Path, dict]]:
    folder = data / "pages" / split
    if not folder.is_dir():
        fail(f"no page folder {folder} (was the data set built by prepare.py?)")
    pages = []
    for truth_path in sorted(folder.glob("page_*.json")):
        image = truth_path.with_suffix(".png")
        if not image.is_file():
            fail(f"page image {image} is missing next to its truth {truth_path.name}")
        try:
            truth = json.loads(truth_path.read_text())
            names = [str(b["class"]) for b in truth["boxes"]]
        except (ValueError, KeyError, TypeError) as exc:
            fail(f"page truth {truth_path} is not a page JSON ({type(exc).__name__}: {exc}); `looper data check` "
                 "names what is wrong")
        if classes is not None and (bad := sorted(set(names) - set(classes))):
            fail(f"page truth {truth_path}: class {bad[0]!r} is not one of the data's classes (manifest.json); "
                 "`looper data check` lists every such box")
        pages.append((image, truth))
    if not pages:
        fail(f"no pages in {folder}")
    return pages


def nms_threshold(min_score: float) -> float:
    """The float32 just below ``min_score``: Ultralytics' NMS keeps only scores strictly above
    its threshold (compared in float32), so this keeps every score >= ``min_score``."""
    import numpy as np

    return float(np.nextafter(np.float32(min_score), np.float32(0.0)))


def nms_kernel():  # type: ignore[no-untyped-def]
    """torchvision's compiled NMS (``torch.ops.torchvision.nms``), its library loaded into torch without
    importing the torchvision package: ``import torchvision`` pulls torch._dynamo (seconds of every
    evaluation: bench/RESULTS.md, "Start-up of a run, and torch._dynamo"), and without it Ultralytics' NMS runs a Python loop (1.5 s of a 6144-px page)."""
    import importlib.machinery
    import importlib.util

    import torch

    if "torchvision" in sys.modules or "nms" in dir(torch.ops.torchvision):
        return torch.ops.torchvision.nms  # imported or loaded already
    spec = importlib.util.find_spec("torchvision")  # finds the package without running it
    folder = Path(spec.origin).parent if spec and spec.origin else None
    libs = [folder / f"{name}{suffix}" for name in ("_C_stable", "_C")
            for suffix in importlib.machinery.EXTENSION_SUFFIXES] if folder else []
    lib = next((p for p in libs if p.is_file()), None)
    if lib is None:
        fail("torchvision's compiled operators are not installed (no torchvision/_C library): "
             "install the torchvision that matches torch", 1)
    torch.ops.load_library(str(lib))
    return torch.ops.torchvision.nms


def tile_max_det(side: int) -> int:
    """The boxes a tile of ``side`` px keeps after NMS: MAX_DET per 256 x 256 px of tile."""
    return MAX_DET * side * side // (LEAST * LEAST)


def tile_nms(out, nc: int, min_score: float, side: int = LEAST):  # type: ignore[no-untyped-def]
    """Within-tile NMS of one batch of raw network outputs: per tile, an (n, 6) tensor of
    x1, y1, x2, y2, score, class, every score >= ``min_score`` (at most MAX_DET per 256 x 256 px).

    Ultralytics' ``non_max_suppression`` for a detection head, step for step (best class per box,
    score above the float32 just below ``min_score``, at most 30,000 boxes into NMS, classes kept apart
    by a 7,680-px offset, torchvision's kernel, which orders tied scores one way), with the kernel loaded
    by ``nms_kernel``; tests/test_evaluate.py compares the two row for row, tests/e2e/test_export.py
    with Ultralytics' own predict."""
    import torch

    try:
        from ultralytics.utils.ops import xywh2xyxy
    except ImportError:  # where newer Ultralytics keeps it
        from ultralytics.utils.nms import xywh2xyxy  # type: ignore[no-redef]

    nms = nms_kernel()
    out = out[0] if isinstance(out, (list, tuple)) else out
    threshold = nms_threshold(min_score)
    most = tile_max_det(side)
    results = []
    for pred in out.transpose(-1, -2):  # one tile: (anchors, 4 + nc)
        conf, cls = pred[:, 4:4 + nc].max(1, keepdim=True)
        keep = conf.view(-1) > threshold
        x = torch.cat((xywh2xyxy(pred[keep, :4]), conf[keep], cls[keep].float()), 1)
        if x.shape[0] > 30000:  # Ultralytics' max_nms: the most confident 30,000
            x = x[x[:, 4].argsort(descending=True)[:30000]]
        x = x[nms(x[:, :4] + x[:, 5:6] * 7680, x[:, 4], NMS_IOU)[:most]]
        results.append(x[x[:, 4] >= min_score])
    return results


def blank_value(tile) -> int | None:  # type: ignore[no-untyped-def]
    """The grey value of a tile that is all one value (blank paper), else None. Every 32nd row is
    compared first: a tile with ink there is answered without reading the rest."""
    v = tile[0, 0]
    return int(v) if (tile[::32] == v).all() and (tile == v).all() else None


def detect_page(model, image: Path, device: str, nc: int,  # type: ignore[no-untyped-def]
                min_score: float = CONFIDENCE) -> list[tuple[int, tuple[float, float, float, float], float]]:
    """All merged detections on one page: (class index, page box, score), score >= ``min_score``."""
    import numpy as np
    import torch
    from PIL import Image

    page = np.asarray(Image.open(image).convert("L"), dtype=np.uint8)
    h, w = page.shape
    side = tile_side(w, h, TILE, OVERLAP, LEAST)
    if h < side or w < side:  # pad small pages with paper
        padded = np.full((max(h, side), max(w, side)), 255, dtype=np.uint8)
        padded[:h, :w] = page
        page = padded
    grid = tile_grid(page.shape[1], page.shape[0], side, OVERLAP)
    tiles = [page[y0:y0 + side, x0:x0 + side] for x0, y0 in grid]  # views of the page, no copies
    # a tile of one grey value (blank paper) looks the same wherever it lies: the network sees one of each
    # value once and the others reuse its detections; a page without one runs exactly the batches it did
    flat = [blank_value(t) for t in tiles]
    first: dict[int, int] = {}  # grey value -> the index of its first tile, the one the network sees
    todo = [i for i, v in enumerate(flat) if v is None or first.setdefault(v, i) == i]
    rows: dict[int, list[list[float]]] = {}  # tile index -> its detections, tile coordinates
    per_batch = max(1, BATCH_PIXELS // (side * side))
    for start in range(0, len(todo), per_batch):
        chunk = todo[start:start + per_batch]
        x = (torch.from_numpy(np.stack([tiles[i] for i in chunk])).float().div_(255.0).unsqueeze(1)
             .expand(-1, 3, -1, -1).contiguous(memory_format=torch.channels_last).to(device))
        with torch.inference_mode():
            out = model(x)
        for i, res in zip(chunk, tile_nms(out, nc, min_score, side), strict=True):
            rows[i] = res[:, :6].cpu().tolist()
    found: list[Detection] = []
    for i, (x0, y0) in enumerate(grid):
        dets = [Detection(str(int(c)), (float(a) + x0, float(b) + y0, float(cc) + x0, float(d) + y0), float(s))
                for a, b, cc, d, s, c in rows[i if flat[i] is None else first[flat[i]]]]
        found += drop_seam_boxes(dets, (x0, y0), side, (w, h))
    merged = merge_detections(found)
    return [(int(d.cls), d.box, d.score) for d in merged if d.score >= min_score]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="page-level per-class evaluation of one model")
    ap.add_argument("--weights", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True, help="METRICS.json to write")
    ap.add_argument("--split", default="test", choices=["test", "val"])
    ap.add_argument("--device", default=os.environ.get("LOOPER_DEVICE", "cpu"))
    args = ap.parse_args(argv)

    if not args.weights.is_file():
        fail(f"weights file {args.weights} does not exist")
    manifest_path = args.data / "manifest.json"
    if not manifest_path.is_file():
        fail(f"data folder {args.data} has no manifest.json (was it built by prepare.py?)")
    classes = json.loads(manifest_path.read_text()).get("classes")
    if not isinstance(classes, list) or not classes:
        fail(f"{manifest_path} lists no classes")
    pages = read_pages(args.data, args.split, classes)

    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_CONFIG_DIR", str(Path(".looper/ultralytics").resolve()))
    import torch

    # torch.use_deterministic_algorithms(True, warn_only=True) without its import of torch._inductor (and
    # torch._dynamo, seconds of every evaluation's start-up; nothing here compiles)
    torch._C._set_deterministic_algorithms(True, warn_only=True)
    device = torch_device(args.device, torch.cuda.is_available())
    model = load_model(args.weights, device)
    names = getattr(model, "names", None)
    model_classes = [names[i] for i in sorted(names)] if isinstance(names, dict) else list(names or [])
    if model_classes != classes:  # another order or count: the weights' fault, refused like any bad weights
        fail(f"weights refused: the model's classes ({len(model_classes)}: {model_classes[:3]}...) differ from the "
             f"data set's ({len(classes)}: {classes[:3]}...)", WEIGHTS_REFUSED)

    results = []
    matched = []
    for image, truth in pages:
        preds = [Detection(classes[c], box, score)
                 for c, box, score in detect_page(model, image, device, len(classes), STREAM_CONFIDENCE)]
        gt = [Detection(str(b["class"]), tuple(float(v) for v in b["box"])) for b in truth["boxes"]]  # type: ignore[misc]
        results.append(match_page(preds, gt, IOU, CONFIDENCE))  # matched once, for METRICS and MATCHES
        matched.append(page_matches(image.name, preds, gt, IOU, CONFIDENCE, result=results[-1]))
    metrics = metrics_from_results(results, classes, IOU, CONFIDENCE)
    text = json.dumps(metrics, sort_keys=True, indent=1) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # the matched boxes of every page, beside METRICS.json (written first: METRICS.json last means both)
    matches = args.out.with_name(MATCHES_NAME)
    tmp = matches.with_name(matches.name + ".tmp")
    tmp.write_text(json.dumps(matches_file(matched, classes, IOU, CONFIDENCE), sort_keys=True,
                              separators=(",", ":")) + "\n")
    tmp.replace(matches)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"evaluate.py: {metrics['pages']} pages, {metrics['predictions']} predictions, {metrics['truth']} truth, "
          f"macro_f1={metrics['macro_f1']} weighted_f1={metrics['weighted_f1']} map50={metrics.get('map50')} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
