"""Secret files made once: the test pages' seed (prepare.py) and the run seed key (looper.workspace.hashes)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def create_once(path: Path, draw: Callable[[], str]) -> None:
    """``path`` made with the text ``draw()`` returns (mode 600) unless it exists: written whole under another
    name and linked into place, so that a process or thread starting beside the first (runs side by side, two
    builds) never reads it half written, and the first to link it wins: the others read that one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)  # mode 600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(draw())
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:  # made by another in the meantime: that one stands
        pass
    finally:
        os.unlink(tmp)
