"""evaluate.py's confidence boundary: a box scored exactly at the pinned confidence counts.

Ultralytics' NMS keeps only scores strictly above its threshold, compared in float32;
evaluate.py feeds it the float32 just below and keeps scores >= the threshold itself.

End-to-end tier: these tests run torch and Ultralytics' NMS, so torch is imported inside the
tests, never when the fast tier collects this file (about 1.5 s of torch import on every run).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from looper.core.scoring.metrics import CONFIDENCE, STREAM_CONFIDENCE, Detection, evaluate_pages

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import evaluate  # noqa: E402
import prepare  # noqa: E402

sys.path.remove(str(REPO))

if TYPE_CHECKING:
    import torch

pytestmark = pytest.mark.e2e  # torch and Ultralytics: the end-to-end tier (tests/tiers.py)

AT = float(np.float32(CONFIDENCE))  # 0.25 exactly
BELOW = float(np.nextafter(np.float32(CONFIDENCE), np.float32(0)))  # the next float32 down


def raw_output(scores: list[float], nc: int = 2) -> torch.Tensor:
    """A detection head's raw output for one tile: (1, 4 + nc, anchors), boxes as centre x, y, w, h;
    anchor i is a 20 px box at (40 + 60 i, 40), class 0 scored ``scores[i]``."""
    import torch

    out = torch.zeros(1, 4 + nc, len(scores), dtype=torch.float32)
    for i, s in enumerate(scores):
        out[0, :4, i] = torch.tensor([40.0 + 60 * i, 40.0, 20.0, 20.0])
        out[0, 4, i] = s
    return out


def test_nms_keeps_a_score_exactly_at_the_pinned_confidence() -> None:
    out = raw_output([AT, BELOW, 0.9])
    assert AT == CONFIDENCE and BELOW < CONFIDENCE
    kept = evaluate.tile_nms(out, 2, CONFIDENCE)[0]
    assert sorted(kept[:, 4].tolist()) == [AT, pytest.approx(0.9)]  # 0.25 in, the float just below out
    # the trap this avoids: Ultralytics' own threshold is strict
    try:
        from ultralytics.utils.nms import non_max_suppression
    except ImportError:  # older Ultralytics
        from ultralytics.utils.ops import non_max_suppression
    strict = non_max_suppression(out, conf_thres=CONFIDENCE, iou_thres=0.7, nc=2)[0]
    assert strict[:, 4].tolist() == [pytest.approx(0.9)]


def test_the_stream_keeps_low_scores_and_the_boundary_box_counts() -> None:
    out = raw_output([AT, BELOW, 0.002, 0.0005])
    stream = evaluate.tile_nms(out, 2, STREAM_CONFIDENCE)[0]
    assert sorted(stream[:, 4].tolist(), reverse=True) == [AT, BELOW, pytest.approx(0.002)]
    preds = [Detection("a", tuple(r[:4]), r[4]) for r in stream[:, :6].tolist()]
    truth = [Detection("a", (30.0 + 60 * i, 30.0, 50.0 + 60 * i, 50.0)) for i in range(4)]
    m = evaluate_pages([(preds, truth)], ["a", "b"])
    a = m["classes"]["a"]
    assert (a["tp"], a["fp"], a["fn"]) == (1, 0, 3) and a["found"] == [1, 0, 0, 0]  # only the box at 0.25
    assert m["predictions"] == 1
    assert a["ap50"] == pytest.approx(76 / 101, abs=1e-6)  # 3 ranked hits of 4: precision 1 up to recall 0.75


def test_tile_nms_keeps_what_ultralytics_nms_keeps_box_for_box() -> None:
    """evaluate.py's NMS is Ultralytics' non_max_suppression step for step, on torchvision's kernel: on a
    batch of crowded random outputs (overlapping boxes of 5 classes, scores across the whole range, some
    tied) both keep the same rows, in the same order, bit for bit, at both confidences and a tile's box cap."""
    import torch

    try:
        from ultralytics.utils.nms import non_max_suppression
    except ImportError:  # older Ultralytics
        from ultralytics.utils.ops import non_max_suppression

    import torchvision  # noqa: F401 - Ultralytics' NMS on the same kernel (its Python loop orders tied scores
    # another way: both are NMS, but only one kernel gives one order)

    g = torch.Generator().manual_seed(0)
    nc, anchors = 5, 4000
    out = torch.zeros(3, 4 + nc, anchors)
    out[:, :2] = torch.rand(3, 2, anchors, generator=g) * 256  # centres crowded on one 256-px tile
    out[:, 2:4] = 8 + torch.rand(3, 2, anchors, generator=g) * 40
    out[:, 4:] = torch.rand(3, nc, anchors, generator=g) ** 3
    for min_score, side in ((CONFIDENCE, 256), (STREAM_CONFIDENCE, 256), (STREAM_CONFIDENCE, 512)):
        ours = evaluate.tile_nms(out, nc, min_score, side)
        theirs = non_max_suppression(out, conf_thres=evaluate.nms_threshold(min_score), iou_thres=evaluate.NMS_IOU,
                                     nc=nc, max_det=evaluate.tile_max_det(side), max_time_img=1e6)
        for a, b in zip(ours, theirs, strict=True):
            b = b[b[:, 4] >= min_score]
            assert len(a) > 50 and torch.equal(a, b)
    assert len(evaluate.tile_nms(out, nc, STREAM_CONFIDENCE, 256)[0]) == evaluate.MAX_DET  # the cap binds here
    assert [evaluate.tile_max_det(s) for s in (256, 512, 960, 1024)] == [300, 1200, 4218, 4800]  # per pixel


def test_evaluation_loads_the_nms_kernel_without_importing_torchvision_or_dynamo() -> None:
    """torchvision's package import pulls torch._dynamo (seconds of every evaluation's start-up:
    bench/RESULTS.md, "Start-up of a run, and torch._dynamo"):
    evaluate.py loads only its compiled operators."""
    import subprocess

    code = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import evaluate; "
            "k = evaluate.nms_kernel(); "
            "print(k(torch.tensor([[0., 0, 10, 10], [1, 1, 10, 10]]), torch.tensor([0.9, 0.8]), 0.5).tolist(), "
            "'torchvision' in sys.modules, 'torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[0]", "False", "False"]


def _all_tiles(model, page: np.ndarray, nc: int) -> list[tuple[int, tuple[float, float, float, float], float]]:
    """The reference: every tile of the page through the network in grid order, as evaluate.py did before
    it reused a blank tile's detections."""
    import torch

    from looper.core.scoring.metrics import drop_seam_boxes, merge_detections
    from looper.core.scoring.tilegrid import tile_grid

    h, w = page.shape
    side = evaluate.tile_side(w, h, evaluate.TILE, evaluate.OVERLAP, evaluate.LEAST)
    grid = tile_grid(w, h, side, evaluate.OVERLAP)
    found: list[Detection] = []
    for start in range(0, len(grid), 2):
        chunk = grid[start:start + 2]
        tiles = np.stack([page[y0:y0 + side, x0:x0 + side] for x0, y0 in chunk])
        x = torch.from_numpy(tiles).float().div_(255.0).unsqueeze(1).expand(-1, 3, -1, -1).contiguous(
            memory_format=torch.channels_last)
        with torch.inference_mode():
            out = model(x)
        for (x0, y0), res in zip(chunk, evaluate.tile_nms(out, nc, STREAM_CONFIDENCE, side), strict=True):
            dets = [Detection(str(int(c)), (a + x0, b + y0, cc + x0, d + y0), s)
                    for a, b, cc, d, s, c in res[:, :6].tolist()]
            found += drop_seam_boxes(dets, (x0, y0), side, (w, h))
    return [(int(d.cls), d.box, d.score) for d in merge_detections(found) if d.score >= STREAM_CONFIDENCE]


def test_a_blank_tile_runs_through_the_network_once_and_the_page_detects_the_same(tmp_path: Path) -> None:
    """A drawing's empty paper: every tile of one grey value reuses the detections of the first such tile.
    The page's merged detections are those of running every tile, and the network saw each blank value once."""
    from PIL import Image

    drawn, _ = prepare.make_page(np.random.RandomState(3), 512, list(prepare.CLASSES[:12]),
                                 prepare.SCALES["demo"])
    page = np.full((4096, 3072), 255, dtype=np.uint8)  # paper, with one drawn part and a grey margin
    page[600:1112, 300:812] = np.asarray(drawn, dtype=np.uint8)
    side = evaluate.tile_side(3072, 4096, evaluate.TILE, evaluate.OVERLAP, evaluate.LEAST)
    assert side == 896  # 5 tiles down the page, 4 across: x at 0, 800, 1600, 2176
    page[:, 3072 - side:] = 240  # the last column of tiles all margin
    image = tmp_path / "page.png"
    Image.fromarray(page).save(image)
    model = evaluate.load_model(REPO / "looper" / "pretrained" / "start.safetensors", "cpu")
    nc = len(model.names)
    seen: list[int] = []

    def marking(x):  # type: ignore[no-untyped-def]
        """The network, counting the tiles it sees and adding one box (20 px at 30..50 in the tile, class 0,
        score 0.9) to each blank tile's output: the real network finds nothing on paper, so without a mark a
        reused tile's boxes put in the wrong place would go unseen."""
        import torch

        seen.append(int(x.shape[0]))
        out = model(x)
        y = (out[0] if isinstance(out, (list, tuple)) else out).clone()
        for j in range(x.shape[0]):
            if bool(x[j].min() == x[j].max()):
                y[j, :, 0] = 0.0
                y[j, :5, 0] = torch.tensor([40.0, 40.0, 20.0, 20.0, 0.9])
        return y

    got = evaluate.detect_page(marking, image, "cpu", nc, STREAM_CONFIDENCE)
    calls = len(seen)
    want = _all_tiles(marking, page, nc)
    grid = evaluate.tile_grid(3072, 4096, side, evaluate.OVERLAP)
    blank = [(x0, y0) for x0, y0 in grid if (page[y0:y0 + side, x0:x0 + side] == page[y0, x0]).all()]
    values = {int(page[y0, x0]) for x0, y0 in blank}
    assert len(blank) > len(grid) / 3 and values == {255, 240}  # much of the page is paper, of two greys
    assert sum(seen[:calls]) == len(grid) - len(blank) + len(values)  # each blank value through the network once
    marks = sorted(b for c, b, sc in got if c == 0 and abs(sc - 0.9) < 1e-6 and b[2] - b[0] == pytest.approx(20))
    assert marks == sorted((x0 + 30.0, y0 + 30.0, x0 + 50.0, y0 + 50.0) for x0, y0 in blank)  # each in its own place
    assert [c for c, _, _ in got] == [c for c, _, _ in want] and len(got) > 20 + len(blank)  # the drawn part too
    for (_, box, score), (_, box2, score2) in zip(got, want, strict=True):
        assert box == pytest.approx(box2, abs=1e-3) and score == pytest.approx(score2, abs=1e-5)


@pytest.mark.parametrize(("asked", "cuda", "device"), [
    ("cpu", True, "cpu"), ("mps", True, "cpu"), ("", True, "cpu"),
    ("cuda", True, "cuda:0"), ("0", True, "cuda:0"),
    ("2", True, "cuda:2"),          # [executor] gpu_index = 2: before, every evaluation ran on cuda:0
    ("cuda:3", True, "cuda:3"), ("1,2", True, "cuda:1"),
    ("2", False, "cpu"), ("cuda", False, "cpu"),  # no CUDA here: the CPU, as before
])
def test_the_evaluation_runs_on_the_gpu_its_run_names(asked: str, cuda: bool, device: str) -> None:
    assert evaluate.torch_device(asked, cuda) == device
