"""The daemon's own resources against what a run leaves: evidence read within limits,
free disk checked before a run, space reserved so an outcome can always be written.

- :func:`read_json` reads train.json / METRICS.json only under ``[limits] json_max_bytes`` and
  ``json_max_depth`` (looper.core.fault.bounds): a larger or deeper file is a problem in words, never
  a RecursionError or a 100 MB row.
- :func:`disk_problem` refuses the next run when the workspace's disk has less than
  ``[limits] min_free_bytes`` free (naming the folder and the free bytes), and keeps
  ``.looper/reserve`` (``reserve_bytes``, allocated on disk) while there is room.
- :func:`release_reserve` frees that reserve when the disk is nearly full, just before an
  outcome is written, so the database write that records it has room.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from looper.core.fault.bounds import loads_bounded

RESERVE = Path(".looper") / "reserve"


def read_json(path: Path, max_bytes: int, max_depth: int) -> tuple[Any, str | None]:
    """(value, None); (None, None) when the file does not exist; (None, problem) when refused.

    Opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked on the open descriptor (issue 39): a symbolic
    link is refused unread, naming it (a train.json pointing at an earlier run's MATCHES.json would
    carry test truth into the database), a FIFO never blocks the daemon, a folder is not a plain file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            return None, (f"{path.name} is a symbolic link (to {_link_target(path)}): run outputs must be "
                          "plain files; it was not followed")
        return None, f"{path.name} cannot be read ({exc.strerror or exc})"
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None, f"{path.name} is not a plain file"
    with os.fdopen(fd, "rb") as f:
        if st.st_size > max_bytes:  # never read it
            return loads_bounded("", st.st_size, path.name, max_bytes, max_depth)
        try:
            raw = f.read(max_bytes + 1)
        except OSError as exc:
            return None, f"{path.name} cannot be read ({exc.strerror or exc})"
    return loads_bounded(raw.decode("utf-8", "replace"), len(raw), path.name, max_bytes, max_depth)


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)[:200]
    except OSError:
        return "?"


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
