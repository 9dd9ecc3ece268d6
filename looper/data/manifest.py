"""A workspace's data folder, and its manifest as the harness reads it outside the fixed files: its class
names, in its order.

(The manifest's hash rule and layout live in :mod:`looper.data.tiles`, which prepare.py imports and the
tag pins; this module is not pinned.)
"""

from __future__ import annotations

import json
from pathlib import Path


def manifest_classes(data_dir: Path) -> list[str]:
    """The class names ``data_dir/manifest.json`` lists, in its order (the order of the class ids); a
    :class:`ValueError` naming the file when it cannot be read or lists none."""
    manifest = Path(data_dir) / "manifest.json"
    try:
        classes = json.loads(manifest.read_text()).get("classes")
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{manifest}: cannot read the data's class names ({exc})") from exc
    if not (isinstance(classes, list) and classes and all(isinstance(c, str) for c in classes)):
        raise ValueError(f"{manifest} lists no class names")
    return list(classes)


def workspace_data_dir(root: Path) -> Path:
    """The data folder of the workspace at ``root``: its looper.toml's ``[data] dir`` (relative to ``root``),
    ``root/data`` when there is no looper.toml or it cannot be read (``looper check`` reports that)."""
    data = "data"
    toml = Path(root) / "looper.toml"
    if toml.is_file():
        try:
            from looper.config import load_config

            data = load_config(toml).data.dir
        except Exception:  # noqa: BLE001 - an unreadable config is `looper check`'s to report
            data = "data"
    p = Path(data)
    return p if p.is_absolute() else Path(root) / p
