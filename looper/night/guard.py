"""The daemon's own resources against what a run leaves: evidence read within limits,
free disk checked before a run, space reserved so an outcome can always be written.

- :func:`read_json` reads train.json / METRICS.json only under ``[limits] json_max_bytes`` and
  ``json_max_depth`` (looper.core.bounds): a larger or deeper file is a problem in words, never
  a RecursionError or a 100 MB row.
- :func:`disk_problem` refuses the next run when the workspace's disk has less than
  ``[limits] min_free_bytes`` free (naming the folder and the free bytes), and keeps
  ``.looper/reserve`` (``reserve_bytes``, allocated on disk) while there is room.
- :func:`release_reserve` frees that reserve when the disk is nearly full, just before an
  outcome is written, so the database write that records it has room.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from looper.core.bounds import loads_bounded

RESERVE = Path(".looper") / "reserve"


def read_json(path: Path, max_bytes: int, max_depth: int) -> tuple[Any, str | None]:
    """(value, None); (None, None) when the file does not exist; (None, problem) when refused."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{path.name} cannot be read ({exc.strerror or exc})"
    if not path.is_file():
        return None, f"{path.name} is not a plain file"
    if size > max_bytes:  # never read it
        return loads_bounded("", size, path.name, max_bytes, max_depth)
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as exc:
        return None, f"{path.name} cannot be read ({exc.strerror or exc})"
    return loads_bounded(raw.decode("utf-8", "replace"), len(raw), path.name, max_bytes, max_depth)


def _free(folder: Path) -> int:
    return shutil.disk_usage(folder).free


def disk_problem(root: Path, min_free_bytes: int, reserve_bytes: int) -> str | None:
    """None when a run may start; otherwise why not, naming the folder and its free bytes.

    The reserve (``.looper/reserve``) is made again here when it was released and there is room:
    it counts as free space for this check (it is given back before any outcome is written)."""
    reserve = root / RESERVE
    held = reserve.stat().st_size if reserve.is_file() else 0
    free = _free(root)
    if free + held < min_free_bytes:
        return (f"the disk of {root} has {free} bytes free ({held} more held in {RESERVE}), under "
                f"[limits] min_free_bytes = {min_free_bytes}: free space there before the next run")
    if reserve_bytes > 0 and held < reserve_bytes and free - (reserve_bytes - held) >= min_free_bytes:
        _allocate(reserve, reserve_bytes)
    return None


def _allocate(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)  # real blocks, not a sparse file
        except OSError:
            os.ftruncate(fd, 0)  # no room or no fallocate here: hold nothing rather than a lie
    finally:
        os.close(fd)


def release_reserve(root: Path, reserve_bytes: int) -> bool:
    """Give the reserve back when less than ``reserve_bytes`` are free (the outcome needs room).
    True when it was released."""
    reserve = root / RESERVE
    try:
        if reserve.is_file() and _free(root) < max(reserve_bytes, 1):
            reserve.unlink()
            return True
    except OSError:
        pass
    return False
