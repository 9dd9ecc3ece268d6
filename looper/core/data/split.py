"""A seeded page-level split of an export that has no splits of its own (pure: no files).

Pages, not tiles, are split: tiles of one page in two splits would let training see the test
pages. The test split is drawn first, class by class from the rarest up: every class found on at
least ``min_pages`` pages gets a test page holding it (a class on fewer pages stays in training,
which needs it more); then the test split is filled to ``test_share`` of the pages, the val split
to ``val_share`` (at least one page each when there are three pages or more), and the rest trains.
No page leaves training when a class on it has no other training page: a class on one page trains.
The same pages and seed give the same split, whatever order the pages come in.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

SPLITS = ("train", "val", "test")
TEST_SHARE = 0.2
VAL_SHARE = 0.1
MIN_PAGES = 3  # a class on fewer pages than this is not promised a test instance


def _movable(page: str, classes: Mapping[str, frozenset[str]], in_train: dict[str, int]) -> bool:
    """Whether ``page`` may leave training: every class on it keeps another training page."""
    return all(in_train.get(c, 0) >= 2 for c in classes[page])


def _pick(order: list[str], chosen: set[str], taken: set[str], classes: Mapping[str, frozenset[str]],
          want: int, min_pages: int, cover: bool, in_train: dict[str, int]) -> None:
    """Add pages of ``order`` (not yet ``taken``) to ``chosen``: first one for every class not yet in it
    that has ``min_pages`` pages or more (rarest first, when ``cover``), then up to ``want`` pages. A page
    is never taken whose class would lose its last training page (``in_train``: training pages per
    class, kept up to date): the rarest classes stay trainable whatever the seed."""
    def take(page: str) -> None:
        chosen.add(page)
        for c in classes[page]:
            in_train[c] -= 1

    if cover:
        pages_of: dict[str, list[str]] = {}
        for page in order:
            for c in classes[page]:
                pages_of.setdefault(c, []).append(page)
        for c in sorted(pages_of, key=lambda c: (len(pages_of[c]), c)):
            have = any(c in classes[p] for p in chosen)
            free = [p for p in pages_of[c] if p not in taken and p not in chosen and _movable(p, classes, in_train)]
            if not have and len(pages_of[c]) >= min_pages and free:
                take(free[0])
    for page in order:
        if len(chosen) >= want:
            break
        if page not in taken and page not in chosen and _movable(page, classes, in_train):
            take(page)


def draw_split(pages: Mapping[str, frozenset[str]], seed: int, test_share: float = TEST_SHARE,
               val_share: float = VAL_SHARE, min_pages: int = MIN_PAGES,
               fixed: Mapping[str, str] | None = None, declared: tuple[str, ...] = ()) -> dict[str, str]:
    """page key -> "train" | "val" | "test" for ``pages`` (key -> the classes on it).

    ``fixed``: pages whose split the export gives (kept); the splits it gives none of are drawn
    from its train pages (or from all pages when it gives no split). ``declared``: splits the export
    names even where they hold no page (never drawn: an empty one is the export's to fix)."""
    fixed = dict(fixed or {})
    given = set(fixed.values()) | set(declared)
    pool = sorted(p for p in pages if fixed.get(p, "train") == "train")
    random.Random(seed).shuffle(pool)
    out = {p: fixed.get(p, "train") for p in pages}
    taken: set[str] = set()
    in_train: dict[str, int] = {}
    for p, split in out.items():
        for c in pages[p] if split == "train" else ():
            in_train[c] = in_train.get(c, 0) + 1
    n = len(pool)
    for split, share in (("test", test_share), ("val", val_share)):
        if split in given:
            continue
        want = max(1, round(share * n)) if n >= 3 else 0
        chosen: set[str] = set()
        _pick(pool, chosen, taken, pages, want, min_pages, split == "test", in_train)
        for p in chosen:
            out[p] = split
        taken |= chosen
    return out


def split_counts(split: Mapping[str, str]) -> dict[str, int]:
    """Pages per split, every split named."""
    return {s: sum(1 for v in split.values() if v == s) for s in SPLITS}


def missing_in_test(pages: Mapping[str, frozenset[str]], split: Mapping[str, str],
                    min_pages: int = MIN_PAGES) -> list[str]:
    """Classes on at least ``min_pages`` pages with no instance in the test split (the promise above)."""
    count: dict[str, int] = {}
    for cs in pages.values():
        for c in cs:
            count[c] = count.get(c, 0) + 1
    in_test = {c for p, cs in pages.items() if split.get(p) == "test" for c in cs}
    return sorted(c for c, k in count.items() if k >= min_pages and c not in in_test)

