"""Approved baselines: one dated JSON file each under ``baselines/``, never overwritten."""

from __future__ import annotations

import json
import os
import re
from datetime import date, datetime
from pathlib import Path
from typing import Any

from looper.errors import UsageError
from looper.store import Store

_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:-(\d+))?\.json$")


def _key(name: str) -> tuple[str, int]:
    m = _NAME.match(name)
    assert m
    return m.group(1), int(m.group(2) or 1)


def baseline_files(folder: Path) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if _NAME.match(p.name)), key=lambda p: _key(p.name))


def newest_baseline(folder: Path) -> tuple[str, dict[str, Any]] | None:
    """(file name, contents) of the newest approved baseline, or None before any approval."""
    files = baseline_files(folder)
    if not files:
        return None
    p = files[-1]
    try:
        data = json.loads(p.read_text())
    except ValueError as exc:
        raise UsageError(f"approved baseline {p} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        raise UsageError(f"approved baseline {p} has no 'metrics' object")
    return p.name, data


def next_name(folder: Path, today: date) -> str:
    day = today.isoformat()
    taken = {p.name for p in baseline_files(folder)}
    if f"{day}.json" not in taken:
        return f"{day}.json"
    n = 2
    while f"{day}-{n}.json" in taken:
        n += 1
    return f"{day}-{n}.json"


def approve(store: Store, folder: Path, experiment_id: int, today: date | None = None) -> Path:
    """Write the next dated baseline file from a finished, measured experiment."""
    try:
        exp = store.experiment(experiment_id)
    except Exception as exc:
        raise UsageError(f"no experiment {experiment_id}: {exc}") from exc
    outcome = exp.status
    if not outcome.counts_as_result or exp.score is None or not exp.metrics:
        raise UsageError(f"experiment {experiment_id} is {outcome.value}: only a finished, measured result "
                         "(keep, discard or inconclusive, with a score) can be approved as a baseline")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = next_name(folder, today or date.today())
    path = folder / name
    payload = {
        "approved_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "experiment_id": experiment_id, "tag": exp.tag, "commit": exp.commit,
        "status": outcome.value, "score": exp.score, "metrics": exp.metrics,
    }
    # O_EXCL: never overwrite, even if two approvals race.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.write("\n")
    return path
