"""The data check as a Verdict: `looper data check` and the preflight before a baseline trains.

fail: the data has problems (each names the file, what is wrong, what to do); error: the check
could not look (no folder); pass: no error (warnings ride along in the metrics).
"""

from __future__ import annotations

import os
from pathlib import Path

from looper.core.data.check import DataFacts, data_problems, errors, few_in_test
from looper.core.data.memory import CACHE_LIMIT_MB, RunMemory, run_memory
from looper.core.propose.hyperblock import HyperblockError, read_knobs
from looper.core.verdicts.verdict import Verdict
from looper.data.facts import folder_facts
from looper.data.tiles import TILE


def _knob(train_source: str | None, name: str) -> object:
    try:
        return read_knobs(train_source).get(name) if train_source else None
    except HyperblockError:
        return None


def input_size(train_source: str | None) -> int:
    """train.py's IMGSZ (the tile side it trains at); the tiler's TILE when train.py does not say."""
    size = _knob(train_source, "IMGSZ")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else TILE


def machine_mb() -> float:
    """This machine's memory, MB (0 when it cannot be read)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (ValueError, OSError):
        return 0.0


def memory(facts: DataFacts, train_source: str | None, total_mb: float | None = None) -> RunMemory:
    """A training run's expected memory on this data with train.py's CACHE (its shipped value "auto" when it
    does not say), and the runs at a time that fit this machine (looper.core.data.memory)."""
    cache, limit = _knob(train_source, "CACHE"), _knob(train_source, "CACHE_LIMIT_MB")
    tiles = sum(1 for i in facts.images if i.tile and i.split == "train")
    limit = limit if isinstance(limit, int | float) and not isinstance(limit, bool) else CACHE_LIMIT_MB
    return run_memory(tiles, facts.input_size or TILE, cache if isinstance(cache, str) else "auto",
                      machine_mb() if total_mb is None else total_mb, limit_mb=limit)


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
    mem = memory(facts, train_source)
    metrics: dict = {"memory": mem.line(), "memory_per_run_mb": round(mem.per_run_mb), "memory_runs_fit": mem.fit}
    if warnings:
        metrics["data_warnings"] = warnings
    return Verdict.failed(*bad, metrics=metrics) if bad else Verdict.passed(metrics)
