"""Convert an Ultralytics checkpoint (``.pt``) into a starting checkpoint train.py can fine-tune from.

    python -m looper.convert_weights best.pt --out <workspace>/pretrained/mine.safetensors

then set train.py's ``PRETRAINED = "mine.safetensors"`` (and MODEL/WIDTH/DEPTH to the checkpoint's
architecture: the preflight check names any difference). The output is looper-weights/1, the
form train.py's save_weights writes: the network's tensors (the EMA's when the checkpoint has one)
as a safetensors file whose header holds the model yaml (its ``scales`` resolved into
depth_multiple / width_multiple / max_channels, as train.py writes its own) and the class names.

A ``.pt`` is a pickle: loading it runs code it carries, so convert only files you trust (your own
training runs). After this step nothing is unpickled again: the harness and train.py read tensors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from looper.pretrain import canonical_header
from looper.workspace.hashes import file_sha256


def normalized_yaml(cfg: dict[str, Any], nc: int) -> dict[str, Any]:
    """The model yaml as train.py writes it: one scale's multiples instead of the ``scales`` table."""
    cfg = dict(cfg)
    scales = cfg.pop("scales", None)
    if scales and "depth_multiple" not in cfg:
        scale = cfg.get("scale") or next(iter(scales))
        cfg["depth_multiple"], cfg["width_multiple"], cfg["max_channels"] = scales[scale]
    cfg["nc"] = nc
    for key in ("yaml_file", "ch", "channels"):
        cfg.pop(key, None)
    return cfg


def convert(pt: Path, out: Path) -> dict[str, Any]:
    """Write ``out`` from the Ultralytics checkpoint ``pt``; returns the header's metadata."""
    import torch
    import yaml
    from safetensors.torch import save_file

    try:
        ckpt = torch.load(str(pt), map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 (any unreadable file is the same answer)
        raise SystemExit(f"looper.convert_weights: {pt} is not a readable Ultralytics checkpoint: {exc}") from exc
    net = (ckpt.get("ema") or ckpt.get("model")) if isinstance(ckpt, dict) else ckpt
    if net is None or not hasattr(net, "state_dict") or not hasattr(net, "yaml"):
        raise SystemExit(f"looper.convert_weights: {pt} holds no Ultralytics model (no 'ema' or 'model' with a yaml)")
    names = net.names
    names = [names[i] for i in sorted(names)] if isinstance(names, dict) else list(names)
    tensors = {k: v.detach().float().clone().contiguous() for k, v in net.state_dict().items()}
    meta = {"format": "looper-weights/1",
            "model_yaml": yaml.safe_dump(normalized_yaml(dict(net.yaml), len(names)), sort_keys=False),
            "names": json.dumps(names),
            "provenance": json.dumps({"by": "python -m looper.convert_weights", "source": pt.name,
                                      "source_sha256": file_sha256(pt)}, sort_keys=True)}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata=meta)
    canonical_header(out)
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m looper.convert_weights", description=__doc__.split("\n\n")[0])
    ap.add_argument("pt", type=Path, help="an Ultralytics checkpoint (.pt) you trust")
    ap.add_argument("--out", type=Path, required=True, help="the safetensors file to write (in <workspace>/pretrained/)")
    args = ap.parse_args(argv)
    if not args.pt.is_file():
        raise SystemExit(f"looper.convert_weights: no file {args.pt}")
    meta = convert(args.pt, args.out)
    cfg = yaml_summary(meta["model_yaml"])
    print(f"looper.convert_weights: wrote {args.out} ({len(json.loads(meta['names']))} classes; {cfg})")
    return 0


def yaml_summary(text: str) -> str:
    import yaml

    cfg = yaml.safe_load(text)
    return (f"depth_multiple {cfg.get('depth_multiple')}, width_multiple {cfg.get('width_multiple')}, "
            f"max_channels {cfg.get('max_channels')}")


if __name__ == "__main__":
    sys.exit(main())
