"""The data check as a Verdict: `looper data check` and the preflight before a baseline trains.

fail: the data has problems (each names the file, what is wrong, what to do); error: the check
could not look (no folder); pass: no error (warnings ride along in the metrics).
"""

from __future__ import annotations

from pathlib import Path

from looper.core.data.check import data_problems, errors, few_in_test
from looper.core.propose.hyperblock import HyperblockError, read_knobs
from looper.core.verdicts.verdict import Verdict
from looper.data.facts import folder_facts
from looper.data.tiles import TILE


def input_size(train_source: str | None) -> int:
    """train.py's IMGSZ (the tile side it trains at); the tiler's TILE when train.py does not say."""
    try:
        size = read_knobs(train_source).get("IMGSZ") if train_source else None
    except HyperblockError:
        size = None
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else TILE


def folder_problem(path: Path, label: str) -> str | None:
    """Why ``path`` cannot be a data folder at all (None when it is one)."""
    if path.exists() and not path.is_dir():
        return (f"[data] dir = {label!r} names a file ({path}), not a data folder: import it first "
                f"(looper data import {path} --out DIR) and set [data] dir to DIR")
    if not path.is_dir():
        return f"data folder {path} does not exist"
    return None


def check_data(path: Path, label: str, train_source: str | None = None) -> Verdict:
    problem = folder_problem(Path(path), label)
    if problem:
        return Verdict.errored(problem)
    facts = folder_facts(Path(path), input_size(train_source))
    problems = data_problems(facts) + few_in_test(facts)
    warnings = [str(p) for p in problems if not p.blocking]
    bad = [f"data {label}: {p}" for p in errors(problems)]
    metrics = {"data_warnings": warnings} if warnings else {}
    return Verdict.failed(*bad, metrics=metrics) if bad else Verdict.passed(metrics)
