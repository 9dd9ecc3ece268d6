"""What an import may read: every file of an export resolved inside it, every image within a pixel budget.

An export is someone else's folder. Its annotation files name paths (a COCO ``file_name``, a YOLO list
file's lines) and hold links; the import reads only files that resolve inside the export's folders (a
``..`` out of it, an absolute path and a symbolic link to a file outside it are refused by name, never
opened), and never quotes a file's content in a message (a label line that does not read is described,
not shown). An image's header is read before it is decoded: one over the pixel budget (``--max-pixels``)
is refused by name, and Pillow's decompression-bomb check is turned into that same refusal.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath, PureWindowsPath

DEFAULT_MAX_PIXELS = 600_000_000  # px per image: an A0 sheet at 600 dpi (19,866 x 28,087 px) fits
OUTSIDE_FIX = "copy the file into the export (a link or path out of it is never read); "


def resolved(path: Path) -> Path | None:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):  # a link loop
        return None


def inside(path: Path, roots: Sequence[Path]) -> bool:
    """Whether ``path``, every link followed, lies inside one of ``roots`` (themselves resolved)."""
    real = resolved(path)
    return real is not None and any(real.is_relative_to(r) for r in roots if r is not None)


def roots_of(*folders: Path) -> tuple[Path, ...]:
    return tuple(r for r in (resolved(f) for f in folders) if r is not None)


def named_path_problem(name: str) -> str | None:
    """Why a path an annotation file names may not be used at all: absolute, or climbing out with ``..``."""
    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() or PureWindowsPath(name).drive:
        return f"names an absolute path {name!r}"
    depth = 0
    for part in PurePosixPath(name.replace("\\", "/")).parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            return f"names {name!r}, which leads out of the export ('..')"
    return None


def escape_problem(path: Path, roots: Sequence[Path]) -> str | None:
    """Why the file at ``path`` may not be read: it (or a folder on its way) is a link out of ``roots``."""
    if not (path.exists() or path.is_symlink()) or inside(path, roots):
        return None
    return "is a symbolic link (or lies) outside the export"


def links_under(folder: Path) -> list[Path]:
    """Every symbolic link under ``folder`` (files and folders; links are not followed)."""
    out = []
    for top, dirs, files in os.walk(folder, followlinks=False):
        out += [Path(top) / n for n in sorted(dirs + files) if (Path(top) / n).is_symlink()]
    return sorted(out)


def over_budget(width: int, height: int, max_pixels: int) -> str | None:
    if width * height > max_pixels:
        return (f"image of {width} x {height} px ({width * height:,} px) is over the pixel budget of "
                f"{max_pixels:,} px per image")
    return None


BUDGET_FIX = "split or downscale the drawing, or raise the budget (looper data import --max-pixels N); "


@contextmanager
def pixel_budget(max_pixels: int | None) -> Iterator[None]:
    """Pillow's decompression-bomb guard at ``max_pixels``, its warning an error (restored after); None: off,
    for reading a header whose size the caller judges itself (nothing is decoded)."""
    from PIL import Image

    before = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    finally:
        Image.MAX_IMAGE_PIXELS = before
