"""The inference tiles of a page (pure): their side and where they lie.

evaluate.py cuts every test page into square tiles that overlap by more than the largest symbol, so
each symbol is whole in some tile (looper.core.scoring.metrics then drops the boxes a seam cut and merges the
rest). The training tiles are another thing: looper.data.tiles cuts them at train.py's input size.
"""

from __future__ import annotations


def tile_origins(side: int, tile: int, overlap: int) -> list[int]:
    """Tile origins along one axis covering ``[0, side)``; the last tile is flush with the edge."""
    if tile <= overlap:
        raise ValueError(f"tile ({tile}) must be larger than overlap ({overlap})")
    if side <= tile:
        return [0]
    stride = tile - overlap
    pos = list(range(0, side - tile + 1, stride))
    if pos[-1] != side - tile:
        pos.append(side - tile)
    return pos


def tile_side(width: int, height: int, most: int, overlap: int, least: int, multiple: int = 32) -> int:
    """The side of the square tiles a page is cut into for inference.

    Along the page's longer side: as few tiles as tiles of at most ``most`` px need, each as small as
    covering that side with ``overlap`` px of overlap allows, rounded up to ``multiple`` (the network's
    stride) and never below ``least``: a 6144-px page gets 7 tiles of 960 px a row, not 7 of 1024 with
    the last overlapping its neighbour by 544 px; a page up to ``most`` px is one tile of its own size."""
    if most <= overlap:
        raise ValueError(f"tile ({most}) must be larger than overlap ({overlap})")
    longest = max(width, height)
    n = max(1, -(-(longest - overlap) // (most - overlap)))  # tiles along the longer side
    need = -(-(longest - overlap) // n) + overlap  # the smallest side n tiles cover it with
    return max(least, min(most, -(-need // multiple) * multiple))


def tile_grid(width: int, height: int, tile: int, overlap: int) -> list[tuple[int, int]]:
    """(x0, y0) of every tile of a page, row by row."""
    return [(x0, y0) for y0 in tile_origins(height, tile, overlap) for x0 in tile_origins(width, tile, overlap)]
