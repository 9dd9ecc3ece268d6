"""A demo-preset night on a 4-class data set of one's own (issue 38): does it keep and confirm like the
26-class demo night?

Writes an Ultralytics (YOLO) export by hand (PIL and text files, not looper's writer): ``data.yaml``
with train/val/test and ``images/<split>/*.png`` + ``labels/<split>/*.txt``, pages drawn by
prepare.py's ``make_page`` at the demo scale (1024 px, 70 symbols a page, 16/2/8 pages) but of four
classes only; then, as a user would, ``looper init WS --preset demo --data data.yaml`` and ``looper run
--max-experiments 1`` (the shipped 26-class checkpoint fine-tunes as a transfer: its class layer starts
fresh), ``looper history`` and ``looper report``. Prints the commands' output; the workspace stays.

``--small`` draws smaller symbols in more clutter (14 to 22 px instead of 24 to 40, 48 clutter marks a
page instead of 16): four classes the network cannot tell apart at a glance. ``--checkpoint-steps N``
first makes a checkpoint of the data's own classes, as the shipped one is of its 26: train.py fine-tunes
the shipped checkpoint N steps on an export of other pages (seed 99), and the night starts from it
(``pretrained/own4.safetensors``, ``PRETRAINED`` set and committed before the first run).

    .venv/bin/python bench/own_night.py --out /tmp/own4
    .venv/bin/python bench/own_night.py --out /tmp/own4 --classes volume_damper,fire_damper,smoke_damper,motorized_damper --small --checkpoint-steps 1000
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import prepare  # noqa: E402

FOUR = ["thermostat", "vav_box", "exhaust_fan", "fire_damper"]
DAMPERS = ["volume_damper", "fire_damper", "smoke_damper", "motorized_damper"]  # the 26-class night's confusions
SPLITS = {"train": 16, "val": 2, "test": 8}  # the demo scale's pages


SMALL = {"sym_min": 14, "sym_max": 22, "clutter": 48}  # --small: the demo scale's symbols shrunk, more clutter


def write_export(folder: Path, classes: list[str], seed: int, small: bool = False) -> Path:
    sc = prepare.SCALES["demo"]
    if small:
        sc = dataclasses.replace(sc, **SMALL)
    k = 0
    for split, n in SPLITS.items():
        (folder / "images" / split).mkdir(parents=True, exist_ok=True)
        (folder / "labels" / split).mkdir(parents=True, exist_ok=True)
        for _ in range(n):
            k += 1
            pick = [classes[(k + j) % len(classes)] for j in range(sc.per_page)]
            img, truth = prepare.make_page(np.random.RandomState([seed, k]), sc.page, pick, sc)
            img.convert("RGB").save(folder / "images" / split / f"sheet_{k:03d}.png")
            lines = []
            for t in truth:
                x1, y1, x2, y2 = t["box"]
                lines.append(f"{classes.index(t['class'])} {(x1 + x2) / 2 / img.width:.6f} "
                             f"{(y1 + y2) / 2 / img.height:.6f} {(x2 - x1) / img.width:.6f} "
                             f"{(y2 - y1) / img.height:.6f}")
            (folder / "labels" / split / f"sheet_{k:03d}.txt").write_text("\n".join(lines) + "\n")
    names = "\n".join(f"  {i}: {c}" for i, c in enumerate(classes))
    (folder / "data.yaml").write_text(f"path: {folder}\ntrain: images/train\nval: images/val\ntest: images/test\n"
                                      f"names:\n{names}\n")
    return folder / "data.yaml"


def own_checkpoint(out: Path, ws: Path, classes: list[str], small: bool, steps: int, looper: str) -> int:
    """A checkpoint of the data's classes: the shipped one fine-tuned ``steps`` steps on other pages
    (seed 99) by the workspace's train.py, put in the workspace's pretrained/ and named by PRETRAINED."""
    data = out / "ckdata"
    if run([looper, "data", "import", str(write_export(out / "ckexport", classes, 99, small)), "--out", str(data)], out):
        return 1
    (out / "ckout").mkdir()
    env = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(out / ".yolo"), "LOOPER_BUDGET_SECONDS": "3600",
           "LOOPER_DATA": str(data), "LOOPER_OUT": str(out / "ckout"), "LOOPER_SEED": "0", "LOOPER_DEVICE": "cpu",
           "LOOPER_MAX_STEPS": str(steps), "LOOPER_PRETRAINED_DIR": str(ws / "pretrained")}
    if subprocess.run([sys.executable, "train.py"], cwd=ws, env=env).returncode:
        return 1
    shutil.copyfile(out / "ckout" / "weights.pt", ws / "pretrained" / "own4.safetensors")
    train = ws / "train.py"
    train.write_text(train.read_text().replace('PRETRAINED = "start.safetensors"', 'PRETRAINED = "own4.safetensors"', 1))
    return run(["git", "commit", "-qam", "start from a checkpoint of the data's classes"], ws)


def run(argv: list[str], cwd: Path) -> int:
    t = time.time()
    print(f"$ {' '.join(argv)}", flush=True)
    code = subprocess.run(argv, cwd=cwd).returncode
    print(f"[exit {code} after {time.time() - t:.0f} s]", flush=True)
    return code


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--classes", default=",".join(FOUR), help="comma-separated class names of prepare.py's "
                    f"(default: {','.join(FOUR)}; a harder set: {','.join(DAMPERS)})")
    ap.add_argument("--small", action="store_true", help=f"smaller symbols in more clutter ({SMALL})")
    ap.add_argument("--checkpoint-steps", type=int, default=0, help="start from a checkpoint of the data's classes, "
                    "the shipped one fine-tuned this many steps on other pages (0: the shipped one, a transfer)")
    args = ap.parse_args()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    unknown = sorted(set(classes) - set(prepare.CLASSES))
    if unknown:
        ap.error(f"--classes: not prepare.py's: {', '.join(unknown)}")
    yaml = write_export(out / "export", classes, args.seed, args.small)
    looper = str(Path(sys.executable).with_name("looper"))
    ws = out / "ws"
    if run([looper, "init", str(ws), "--preset", "demo", "--data", str(yaml)], out):
        return 1
    if args.checkpoint_steps and own_checkpoint(out, ws, classes, args.small, args.checkpoint_steps, looper):
        return 1
    code = run([looper, "run", "--max-experiments", "1"], ws)
    run([looper, "history"], ws)
    run([looper, "report"], ws)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
