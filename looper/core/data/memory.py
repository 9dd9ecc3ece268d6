"""A training run's memory, said before a night (issue 47): what ``looper data check`` states per run, and how
many runs at a time fit this machine's memory.

A run holds its process (torch, Ultralytics, the model, its data loader's worker) and, with train.py's
``CACHE = "ram"`` (or ``"auto"`` on a data set small enough, :func:`held`), every training tile decoded (each
repeat of a tile its own copy). The process part does not
grow with the data set; the cache grows with the tiles. Measured (bench/RESULTS.md, "A run's memory"):
:data:`PROCESS_MB` with ``CACHE = "none"`` on the demo and the full data set, and the cache's bytes per tile
pixel, the larger of the two sets' (an estimate said before a night errs on the side of too much).
"""

from __future__ import annotations

from dataclasses import dataclass

# Measured (bench/bench_memory.py, PSS of train.py and its loader worker, 2-core CPU): CACHE = "none" 1,007-1,094 MB
# with 400 and with 14,520 tiles; CACHE = "ram" 1,147 MB and 11,431 MB: 0.35 and 0.71 MB a 256-px tile (3 bytes a
# pixel decoded, each repeat of a rare class's tile cached again, Ultralytics' buffers): the larger is used.
PROCESS_MB = 1100.0  # a run's memory with CACHE = "none" (main process and its loader worker), whatever the tiles
CACHE_BYTES_PER_PIXEL = 11.4  # CACHE = "ram": memory a cached tile holds per pixel of its side squared
CACHE_LIMIT_MB = 200.0  # train.py's CACHE_LIMIT_MB as shipped: "auto" holds the tiles up to this, decoded
RESERVE_MB = 2048.0  # what the daemon, the evaluation beside a run and the system keep of the machine's memory


@dataclass(frozen=True)
class RunMemory:
    """A run's expected memory and the runs at a time that fit ``total_mb``."""

    per_run_mb: float
    cache_mb: float
    cache: str  # what the run does: "ram" or "none"
    tiles: int
    total_mb: float
    fit: int
    asked: str = ""  # train.py's CACHE as written ("auto" resolves to ``cache``)

    def line(self) -> str:
        asked = self.asked or self.cache
        held_as = f'CACHE = "{asked}"' + (f' holds {self.cache}' if asked != self.cache else "")
        cached = (f"{self.cache_mb:.0f} MB of it train.py's {held_as} ({self.tiles} tiles decoded in memory; "
                  'CACHE = "none" reads them from disk as they are trained on)' if self.cache == "ram"
                  else f"train.py's {held_as}: the {self.tiles} tiles are read from disk, not held")
        return (f"memory: about {self.per_run_mb:.0f} MB a training run ({cached}); {self.fit} run(s) at a time fit "
                f"this machine's {self.total_mb / 1024:.1f} GB ([loop] seed_jobs x workers)")


def held(tiles: int, tile_px: int, cache: str, limit_mb: float = CACHE_LIMIT_MB) -> str:
    """What train.py's ``CACHE`` does with ``tiles`` distinct training tiles: "auto" is "ram" while they take at
    most ``limit_mb`` decoded (3 bytes a pixel; train.py's CACHE_LIMIT_MB), else "none"; any other value itself.

    >>> held(400, 256, "auto"), held(14_520, 256, "auto"), held(14_520, 256, "ram")
    ('ram', 'none', 'ram')
    """
    if cache != "auto":
        return cache
    return "ram" if tiles * tile_px * tile_px * 3 <= limit_mb * 2**20 else "none"


def run_memory(tiles: int, tile_px: int, cache: str, total_mb: float, reserve_mb: float = RESERVE_MB,
               limit_mb: float = CACHE_LIMIT_MB) -> RunMemory:
    """The memory of one run training ``tiles`` tiles of ``tile_px`` px with train.py's ``cache`` ("auto", "ram",
    "none"; ``limit_mb`` its CACHE_LIMIT_MB), and the runs at a time that fit ``total_mb`` less ``reserve_mb``
    (at least 0).

    >>> run_memory(13_735, 256, "ram", 24_576).per_run_mb > 3 * run_memory(13_735, 256, "none", 24_576).per_run_mb
    True
    >>> run_memory(744, 256, "none", 24_576).fit
    20
    >>> round(run_memory(14_520, 256, "ram", 24_576).per_run_mb)
    11446
    """
    asked, cache = cache, held(tiles, tile_px, cache, limit_mb)
    cache_mb = tiles * tile_px * tile_px * CACHE_BYTES_PER_PIXEL / 2**20 if cache == "ram" else 0.0
    per_run = PROCESS_MB + cache_mb
    fit = max(0, int((total_mb - reserve_mb) // per_run))
    return RunMemory(per_run_mb=per_run, cache_mb=cache_mb, cache=cache, tiles=tiles, total_mb=total_mb, fit=fit,
                     asked=asked)


def too_many(runs: int, fit: int, line: str) -> str | None:
    """The warning said before a night whose ``runs`` at a time (``[loop] seed_jobs`` x ``workers``) do not fit
    the memory (``fit`` of them do, ``line`` says why); None when they fit."""
    if runs <= fit:
        return None
    return (f"{runs} run(s) at a time ([loop] seed_jobs x workers), but {line.removeprefix('memory: ')}: lower "
            'them, or set CACHE = "none" in train.py, before runs are killed for memory')
