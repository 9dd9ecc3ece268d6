"""Approved baselines: one dated JSON file each under ``baselines/``, never overwritten."""

from __future__ import annotations

import hashlib
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


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def recorded_approvals(store: Store) -> dict[str, str]:
    """file name -> sha256 of every approval the database journalled (``looper baseline approve``)."""
    found: dict[str, str] = {}
    for e in store.journal(kind="baseline"):
        data = e.data or {}
        if isinstance(data.get("approved_file"), str) and isinstance(data.get("sha256"), str):
            found[data["approved_file"]] = data["sha256"]
    return found


def unrecorded(folder: Path, store: Store) -> list[str]:
    """Baseline files the database does not know (or knows with other bytes), in words."""
    known = recorded_approvals(store)
    problems = []
    for p in baseline_files(folder):
        if p.name not in known:
            problems.append(f"baselines/{p.name} was not approved through looper (the database has no record of "
                            "it): remove it, or approve the experiment with `looper baseline approve ID`")
        elif _sha256(p) != known[p.name]:
            problems.append(f"baselines/{p.name} was changed after its approval (sha256 differs from the "
                            "database's record): restore it or remove it")
    return problems


def newest_baseline(folder: Path, store: Store | None = None) -> tuple[str, dict[str, Any]] | None:
    """(file name, contents) of the newest approved baseline, or None before any approval.

    With ``store``, every file must be an approval the database recorded with its hash; a
    planted or edited file is a :class:`UsageError` naming it."""
    files = baseline_files(folder)
    if store is not None:
        problems = unrecorded(folder, store)
        if problems:
            raise UsageError("; ".join(problems))
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
    store.add_event(exp.tag, "baseline", f"experiment {experiment_id} approved as baselines/{name}",
                    experiment_id, {"approved_file": name, "sha256": _sha256(path)})
    return path
