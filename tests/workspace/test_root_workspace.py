"""The repository's root is a workspace (docs/REFERENCE.md): train.py run there finds its starting
checkpoint in ./pretrained, the very file looper ships and `looper init` copies."""

from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _train_py_constant(name: str) -> str:
    for line in (ROOT / "train.py").read_text().splitlines():
        if line.startswith(f"{name} = "):
            return line.split("=", 1)[1].split("#", 1)[0].strip().strip('"')
    raise AssertionError(f"train.py has no {name} = ... line")


def test_train_py_at_the_root_finds_its_starting_weights_in_pretrained():
    wanted = _train_py_constant("PRETRAINED")
    assert wanted, "train.py's PRETRAINED is empty: nothing to find"
    at_root = ROOT / "pretrained" / wanted
    shipped = ROOT / "looper" / "pretrained" / wanted
    assert at_root.is_file(), f"{at_root} is missing: `python train.py` at the root would stop"
    assert hashlib.sha256(at_root.read_bytes()).digest() == hashlib.sha256(shipped.read_bytes()).digest()
