"""Make the starting checkpoint that the tiny and demo presets ship (``looper/pretrained/``).

    python -m looper.pretrain --out looper/pretrained/start.safetensors [--steps 2000] [--work DIR]

The project's own code, nothing downloaded: prepare.py builds synthetic pages of ANOTHER data
seed (``DATA_SEED``, not a seed any preset evaluates on), the workspace's train.py is copied with
its knobs set to :data:`RECIPE` (from scratch: ``PRETRAINED = ""``) and trained for exactly
``--steps`` optimizer steps (LOOPER_MAX_STEPS, so the wall clock plays no part), and the
weights it writes (looper-weights/1 safetensors: the model yaml and class names in the header)
get a ``provenance`` entry in their header saying how they were made.

How close a regeneration comes: the same looper version (train.py, prepare.py), torch and
Ultralytics, on CPU with the same ``--steps``, ``--seed`` and ``--data-seed``, gives the same
tensors bit for bit (tests/e2e/test_pretrained.py checks two short runs); another torch, another
CPU's kernels or a GPU give a checkpoint of the same quality but not the same bytes, and then
a workspace's pinned hash (``looper init`` pins what it copied) no longer matches a new copy.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from looper import proc
from looper.core.propose.hyperblock import read_knobs, rewrite_knobs
from looper.workspace.create import template_root

DATA_SEED = 1000  # the pages the checkpoint learns from: a seed no preset uses (presets: data.seed = 0)
SCALE = "demo"
STEPS = 2000
SEED = 0
# The knobs the checkpoint is trained with: train.py's from-scratch baseline knobs,
# pinned here so that re-tuning the workspace's train.py for fine-tuning does not change the recipe.
RECIPE: dict[str, Any] = {
    "PRETRAINED": "", "MODEL": "yolov8", "WIDTH": 0.125, "DEPTH": 0.33, "IMGSZ": 256, "BATCH": 8,
    "OPTIMIZER": "AdamW", "LR0": 0.012, "LRF": 0.1, "MOMENTUM": 0.9, "WEIGHT_DECAY": 0.0005,
    "WARMUP_EPOCHS": 0.0, "COS_LR": False, "FREEZE": 0, "MOSAIC": 0.0, "SCALE": 0.0, "TRANSLATE": 0.05,
    "FLIPLR": 0.0, "FLIPUD": 0.0, "BOX_GAIN": 7.5, "CLS_GAIN": 2.0, "DFL_GAIN": 1.5, "CLS_PRIOR": 0.01,
    "VALIDATE": False, "REPEAT_THRESHOLD": 0.1, "REPEAT_POWER": 1.0,
}
SHIPPED = Path(__file__).resolve().parent / "pretrained" / "start.safetensors"


def canonical_header(path: Path) -> None:
    """Rewrite a safetensors file's JSON header with sorted keys: safetensors writes its metadata in
    hash-map order, which differs from one process to the next, so the same tensors and the same
    metadata would otherwise give different bytes (and a different pinned hash)."""
    blob = path.read_bytes()
    n = int.from_bytes(blob[:8], "little")
    header = json.dumps(json.loads(blob[8:8 + n]), sort_keys=True, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)  # the data must start 8-byte aligned
    path.write_bytes(len(header).to_bytes(8, "little") + header + blob[8 + n:])


def _prepare_module(root: Any) -> Any:
    """prepare.py of the workspace template, imported (its build() makes the pages)."""
    spec = importlib.util.spec_from_file_location("looper_prepare", str(root / "prepare.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)  # dataclasses look their module up while it loads
    spec.loader.exec_module(mod)
    return mod


def pretrain(out: Path, work: Path, steps: int = STEPS, seed: int = SEED, data_seed: int = DATA_SEED,
             scale: str = SCALE, python: str = sys.executable, device: str = "cpu") -> dict[str, Any]:
    """Build the pages, train, write ``out``; returns the provenance written into its header."""
    root = template_root()
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    if not (data / "manifest.json").is_file():
        _prepare_module(root).build(data, scale, data_seed, test_seed=data_seed)  # reproducible: no secret here
    source = rewrite_knobs((root / "train.py").read_text(), {k: v for k, v in RECIPE.items()
                                                            if k in read_knobs((root / "train.py").read_text())})
    (work / "train.py").write_text(source)
    run_out = work / "run"
    shutil.rmtree(run_out, ignore_errors=True)
    env = {"LOOPER_DATA": str(data), "LOOPER_OUT": str(run_out), "LOOPER_SEED": str(seed),
           "LOOPER_DEVICE": device, "LOOPER_MAX_STEPS": str(steps), "LOOPER_BUDGET_SECONDS": str(24 * 3600),
           "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(work / "ultralytics"), "PYTHONUNBUFFERED": "1"}
    done = proc.run([python, "train.py"], cwd=work, env=env, timeout=24 * 3600)
    (work / "train.log").write_text(done.stdout + done.stderr)
    if done.exit_code != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise SystemExit(f"looper.pretrain: train.py failed (exit {done.exit_code}; log {work / 'train.log'}): {tail}")
    info = json.loads((run_out / "train.json").read_text())
    if info.get("steps") != steps:
        raise SystemExit(f"looper.pretrain: train.py trained {info.get('steps')} steps, not {steps}")
    provenance = {"by": "python -m looper.pretrain", "scale": scale, "data_seed": data_seed, "seed": seed,
                  "steps": steps, "device": device, "recipe": RECIPE,
                  "data_hash": json.loads((data / "manifest.json").read_text()).get("hash")}
    write_checkpoint(run_out / "weights.pt", out, provenance)
    return provenance


def write_checkpoint(weights: Path, out: Path, provenance: dict[str, Any]) -> None:
    """``out``: train.py's ``weights`` with ``provenance`` in the header, the run folder's path
    dropped from the model yaml, the header's keys sorted (the same inputs give the same bytes)."""
    import yaml
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(weights), framework="pt") as f:
        meta = dict(f.metadata() or {})
    meta["provenance"] = json.dumps(provenance, sort_keys=True)
    cfg = yaml.safe_load(meta["model_yaml"])
    cfg.pop("yaml_file", None)  # the run folder's path: not part of the architecture, and not reproducible
    meta["model_yaml"] = yaml.safe_dump(cfg, sort_keys=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(load_file(str(weights)), str(out), metadata=meta)
    canonical_header(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m looper.pretrain", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=SHIPPED, help=f"checkpoint to write (default: {SHIPPED})")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--data-seed", type=int, default=DATA_SEED)
    ap.add_argument("--scale", default=SCALE, choices=("tiny", "demo", "full"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--work", type=Path, default=None, help="working folder kept afterwards (default: a temporary one)")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="looper-pretrain-"))
    os.environ.setdefault("YOLO_OFFLINE", "1")
    try:
        prov = pretrain(args.out.resolve(), work.resolve(), args.steps, args.seed, args.data_seed, args.scale,
                        device=args.device)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"looper.pretrain: wrote {args.out} ({args.out.stat().st_size} bytes; {prov['steps']} steps on "
          f"scale={prov['scale']} data seed {prov['data_seed']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
