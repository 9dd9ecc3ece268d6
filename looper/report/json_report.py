"""``looper report --json``: the morning's headline numbers and the confusion matrices as one
JSON object (numbers and class names only: no page names, no images, no free text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looper.report.facts import gather
from looper.report.pictures import pictures
from looper.report.thresholds import tuned
from looper.store import Store

__all__ = ["report_json"]


def report_json(store: Store, root: Path, since: str | None = None) -> dict[str, Any]:
    """The window's tag, counts, best and baseline scores, and ``pictures``: the page-level
    confusion matrices of the best and the baseline (``looper.core.scoring.matches.Confusion.as_json``);
    ``thresholds``: per class, the test F1 at the pinned confidence and at its val-tuned one (report only)."""
    n = gather(store, root, since)
    pics = pictures(n, root, limit=0)  # numbers only: no crop is drawn
    return {
        "tag": n.tag, "since": n.since, "score_name": n.score_name, "counts": dict(n.counts),
        "best": {"experiment": n.best.id, "score": n.best.score} if n.best is not None else None,
        "baseline": {"experiment": n.baseline_id, "score": n.baseline_score, "source": n.baseline_source},
        "pictures": pics.as_json(),
        "thresholds": tuned(n, root).as_json(),  # report only: per class, the test F1 at a val-tuned confidence
    }
