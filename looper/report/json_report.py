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
    ``thresholds``: per class, the test F1 at the pinned confidence and at its val-tuned one (report only);
    ``runs_training``: how much of the night's runs' clock some run trained (the text's "runs training" line;
    None when no run recorded its phases)."""
    n = gather(store, root, since)
    pics = pictures(n, root, limit=0)  # numbers only: no crop is drawn
    return {
        "tag": n.tag, "since": n.since, "score_name": n.score_name, "counts": dict(n.counts),
        "best": {"experiment": n.best.id, "score": n.best.score} if n.best is not None else None,
        "baseline": {"experiment": n.baseline_id, "score": n.baseline_score, "source": n.baseline_source},
        "pictures": pics.as_json(),
        "thresholds": tuned(n, root).as_json(),  # report only: per class, the test F1 at a val-tuned confidence
        "runs_training": None if n.cover is None else {
            "share": round(n.cover.share, 4), "wall_seconds": round(n.cover.wall_s, 3),
            "training_seconds": round(n.cover.training_s, 3), "runs_at_a_time": round(n.cover.at_once, 3),
            "longest_gap_seconds": round(n.cover.longest_gap_s, 3), "longest_gap_at_seconds": round(n.cover.gap_starts_at, 3)},
    }
