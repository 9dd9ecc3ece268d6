"""Shared fixtures for the agent tests: a small train.py with a hyperparameter block."""

from __future__ import annotations

import pytest

TRAIN_PY = '''"""A tiny stand-in for train.py (fixture)."""

import os  # the real one imports torch; not needed here

# ==== HYPERPARAMETERS (the agent changes these) ====
MODEL = "yolov8n.yaml"   # model yaml: architecture
WIDTH = 0.25             # width multiple (x)
IMGSZ = 640              # training image size (px)
BATCH = 16               # images per step
OPTIMIZER = "SGD"        # optimizer name
LR0 = 0.01               # initial learning rate (1/step) — µ-free comment
MOSAIC = 1.0             # mosaic probability [0, 1]
COS_LR = False           # cosine LR schedule (bool)
CLS_GAIN = 0.5           # classification loss gain (x)
# ==== END HYPERPARAMETERS ====


def main() -> None:
    out = os.environ.get("LOOPER_OUT", ".")
    print("training", MODEL, LR0, IMGSZ, out)


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def train_py() -> str:
    return TRAIN_PY
