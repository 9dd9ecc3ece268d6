"""The data set's label index, made once per data set (issue 47): Ultralytics' own ``labels.cache`` beside each
training split's ``labels/`` folder, over each distinct tile once.

Without it every run scanned every label and opened every image again before its first step (6.3 s of 15 s at
14,520 tiles, growing with the data set), and in the sandbox, where the data folder is read-only, could not keep
what it found. train.py's dataset reads the index and repeats the labels as its list repeats a tile; an index
that does not match the tiles (another Ultralytics version, a changed folder) is ignored by Ultralytics' own hash
and the run scans as before: slower, never wrong. The index is a derived file, not data: the data set's hash
skips ``*.cache`` (looper.workspace.hashes.IGNORED).

Run by the harness (looper.executors.common.prepare_local_data) with the runs' own interpreter, as a script: it
needs Ultralytics and PyYAML, not looper::

    python looper/data/labelindex.py DATA_FOLDER

prints one line a split, ``labelindex split=train tiles=N index=made|kept path=...``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")  # the tiles train.py lists (its split_images)


def split_tiles(data: Path, spec: str) -> list[str]:
    """The split's tiles as train.py lists them: the folder dataset.yaml names, resolved, sorted."""
    folder = (data / spec).resolve()
    return sorted(str(p) for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def index_split(data: Path, cfg: dict, split: str) -> str:
    import os

    os.environ.setdefault("YOLO_OFFLINE", "1")
    from ultralytics.data.dataset import YOLODataset

    tiles = split_tiles(data, cfg[split])
    if not tiles:
        return f"labelindex split={split} tiles=0 index=none"
    cache = Path(tiles[0]).parent.parent / "labels.cache"
    before = cache.stat().st_mtime_ns if cache.is_file() else None
    names = cfg["names"]
    with tempfile.TemporaryDirectory(prefix="looper-labelindex-") as tmp:
        listed = Path(tmp) / f"{split}.txt"
        listed.write_text("".join(f"{t}\n" for t in tiles))
        YOLODataset(img_path=str(listed), imgsz=256, augment=False, cache=False, prefix=f"{split}: ",
                    data={"names": names, "nc": len(names), "channels": 3}, task="detect")
    after = cache.stat().st_mtime_ns if cache.is_file() else None
    state = "none" if after is None else "kept" if after == before else "made"
    return f"labelindex split={split} tiles={len(tiles)} index={state} path={cache}"


def main(argv: list[str]) -> int:
    import yaml

    data = Path(argv[0]).resolve()
    cfg = yaml.safe_load((data / "dataset.yaml").read_text())
    for split in ("train", "val"):
        if cfg.get(split):
            print(index_split(data, cfg, split), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
