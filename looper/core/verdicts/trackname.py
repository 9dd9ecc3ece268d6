"""Names MLflow accepts (issue 48): a metric or param key may hold only letters, digits, ``_ - . / `` and
spaces, and at most 250 characters. A class called ``valve (2-way)`` makes a metric key MLflow refuses, and
a refused batch would stop that experiment's tracking (and every later one queued behind it). Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

V = TypeVar("V")
MAX_KEY = 250
_BAD = re.compile(r"[^A-Za-z0-9_\-./ ]")


def key(name: str) -> str | None:
    """``name`` as a key MLflow accepts (each refused character as ``_``); None when nothing usable is left."""
    cleaned = _BAD.sub("_", str(name))[:MAX_KEY]
    if not cleaned.strip(" _") or "//" in cleaned or cleaned.startswith("/") or ".." in cleaned.split("/"):
        return None
    return cleaned


def keys(values: Mapping[str, V]) -> tuple[dict[str, V], list[str]]:
    """(every value under a key MLflow accepts, the names skipped): a name with nothing usable left, or one
    whose cleaned key another name already has (in sorted order, the first keeps it), is skipped."""
    out: dict[str, V] = {}
    skipped: list[str] = []
    for name in sorted(values):
        k = key(name)
        if k is None or k in out:
            skipped.append(name)
        else:
            out[k] = values[name]
    return out, skipped
