"""The preflight check of train.py's starting checkpoint (the I/O around looper.core.tag.startweights).

train.py's knob ``PRETRAINED`` names a file in the workspace's ``pretrained/`` folder; before any
run the harness reads that file's safetensors header (never its tensors, never torch) and the
architecture yaml of train.py's MODEL from the installed Ultralytics (found without importing
it), and answers pass, or error naming the file and what is wrong.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import yaml

from looper.core.propose.hyperblock import HyperblockError, read_knobs
from looper.core.scoring.classes import CLASSES
from looper.core.tag.startweights import class_transfer, read_header, start_problems
from looper.core.verdicts.verdict import Verdict
from looper.data.manifest import manifest_classes
from looper.workspace.hashes import PRETRAINED_DIR


def family_yaml(model: str) -> dict[str, Any] | None:
    """``<model>.yaml`` of the installed Ultralytics (its cfg/models tree), None when not found here."""
    spec = importlib.util.find_spec("ultralytics")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "cfg" / "models"
    found = sorted(root.rglob(f"{model}.yaml")) if model and "/" not in model else []
    if not found:
        return None
    cfg = yaml.safe_load(found[0].read_text())
    return cfg if isinstance(cfg, dict) else None


def header_of(path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """The safetensors header of ``path`` (read_header on its first bytes)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        prefix = f.read(8)
        n = int.from_bytes(prefix, "little") if len(prefix) == 8 else 0
        if 0 < n <= min(size, 100 << 20):
            prefix += f.read(n)
    return read_header(prefix, size)


def data_classes(data_dir: Path | None) -> list[str]:
    """The data's classes, from its manifest (looper's 26 synthetic HVAC classes when there is no
    readable manifest yet: prepare.py builds those)."""
    try:
        return manifest_classes(data_dir) if data_dir else list(CLASSES)
    except ValueError:
        return list(CLASSES)


def check_pretrained(root: Path, train_source: str, data_dir: Path | None = None) -> Verdict:
    """Does the checkpoint train.py's PRETRAINED names (in ``root/pretrained/``) fit its MODEL,
    WIDTH and DEPTH? Passed when PRETRAINED is "" or absent (from scratch); a checkpoint of other
    classes than the data's (``data_dir``'s manifest) passes as a transfer, said in its metrics."""
    try:
        knobs = read_knobs(train_source)
    except HyperblockError as exc:
        return Verdict.errored(f"starting weights: train.py's knobs do not read: {exc}")
    name = knobs.get("PRETRAINED")
    if not name:
        return Verdict.passed({"pretrained": None})
    folder = Path(root) / PRETRAINED_DIR
    if not isinstance(name, str) or Path(name).name != name or name in (".", ".."):
        return Verdict.errored(f"starting weights: train.py's PRETRAINED = {name!r} must be a file name in {folder}")
    path = folder / name
    if not path.is_file():
        return Verdict.errored(f"starting weights {path} (train.py's PRETRAINED = {name!r}) do not exist: put the "
                               "checkpoint there (python -m looper.convert_weights for an Ultralytics .pt) or set "
                               'PRETRAINED = "" to train from scratch')
    header, problems = header_of(path)
    classes = data_classes(data_dir)
    if header is not None:
        model = str(knobs.get("MODEL", ""))
        problems = start_problems(header, classes, family_yaml(model), model, knobs.get("WIDTH", 0.0),
                                  knobs.get("DEPTH", 0.0))
    if problems:
        return Verdict.errored(*(f"starting weights {path}: {p}" for p in problems))
    note = class_transfer(header or {}, classes)
    return Verdict.passed({"pretrained": name, **({"transfer": note} if note else {})})
