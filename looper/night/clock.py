"""The night's timestamps: local time with its offset, to the millisecond, as every row and journal
entry stores it."""

from __future__ import annotations

from datetime import datetime


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")
