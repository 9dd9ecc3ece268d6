"""Exclusions: what a discarded or crashed change taught, as one short line the agent sees.

Only ``discard`` and ``crash`` are exclusions: the change was measured (or ran) and lost.
``inconclusive`` (may be retried), ``vacuous`` (measured nothing), ``error`` (the harness
broke, not the change) and ``interrupted`` say nothing about the idea and are never
exclusions. A line reads ``<description>: <first reason>``, e.g.
``LR0 0.01 -> 0.1: recall.vav_box: 40 of 80 found -> 0 of 40 vs baseline, p = 9.4e-10 < 0.0019
(exact McNemar, Holm over 26); drop 1.00 > 0.05``.
"""

from __future__ import annotations

from collections.abc import Iterable

from looper.core.verdicts.untrusted import one_line
from looper.core.verdicts.verdict import Outcome

MAX_DESCRIPTION = 100
MAX_REASON = 140


def _one_line(text: str, limit: int) -> str:
    """One line, control characters and escape sequences removed (reasons quote run output)."""
    return one_line(text, limit, "...")


def exclusion_for(description: str, outcome: Outcome | str, blocking: Iterable[str]) -> str | None:
    """The exclusion line for a finished experiment, or None when it teaches nothing."""
    if not isinstance(outcome, Outcome):
        outcome = Outcome.parse(outcome)
    if not outcome.is_exclusion:
        return None
    what = _one_line(description, MAX_DESCRIPTION) or "(no description)"
    reasons = [r for r in (_one_line(b, MAX_REASON) for b in blocking) if r]
    if reasons:
        why = reasons[0] + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else "")
    else:
        why = "crashed" if outcome is Outcome.CRASH else "lost to the current best"
    if outcome is Outcome.CRASH and not why.startswith("crash"):
        why = f"crash: {why}"
    return f"{what}: {why}"


def _key(line: str) -> str:
    return " ".join(line.split()).casefold()


def dedupe(exclusions: Iterable[str | None]) -> list[str]:
    """Drop empty lines and repeats (ignoring case and spacing); first occurrence order."""
    seen: set[str] = set()
    out: list[str] = []
    for line in exclusions:
        if not line or not line.strip():
            continue
        key = _key(line)
        if key in seen:
            continue
        seen.add(key)
        out.append(" ".join(line.split()))
    return out
