"""How the report writes things: redaction of free text, numbers, durations, id lists.

The lowest layer of :mod:`looper.report`: it knows nothing of the facts or of the pages.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from typing import Any

from looper.core.verdicts.untrusted import clean as untrusted_clean
from looper.core.verdicts.untrusted import redact

__all__ = [
    "MAX_ATTENTION", "MAX_TEXT_ROWS", "OUTCOME_ORDER", "TRIGGERS", "TRIGGERS_FOR", "clean", "console", "fmt",
    "digits_for", "id_list", "line_of", "num", "secs", "shown", "signed", "tag_sigma",
]

#: Outcomes in the order the report lists them.
OUTCOME_ORDER: tuple[str, ...] = (
    "keep", "discard", "inconclusive", "crash", "vacuous", "error", "interrupted", "running", "pending",
)
#: How many items of one kind the attention list and the text report show before summing up.
MAX_ATTENTION = 5
MAX_TEXT_ROWS = 15

#: Lower-case substrings at least one of which every match of the redaction patterns
#: (``looper.core.verdicts.untrusted._SECRET_PATTERNS``) contains. Text holding none of them cannot be
#: changed by ``redact``, so it skips the regexes: redacting 10,000 rows stays cheap. A test
#: pins those patterns: change them, and it says to revisit this list.
TRIGGERS: tuple[str, ...] = ("://", "bearer", "api", "token", "secret", "passw", "sk-", "pk-", "rk-", "xox")
#: The redaction patterns this list was checked against (a test compares them with the live ones).
TRIGGERS_FOR: tuple[str, ...] = (
    r"(?i)\b(sk|pk|rk|xox[abp])-[A-Za-z0-9_\-]{8,}",
    r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}",
    r"(?i)\b(api[_-]?key|token|secret|password|passwd)\b(\s*[=:]\s*)\S+",
    r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@]+@",
)


def clean(text: Any) -> str:
    """Free text on its way out: a string, control characters and escape sequences stripped, secrets
    redacted."""
    s = untrusted_clean(text)
    low = s.lower()
    for k in TRIGGERS:
        if k in low:
            return redact(s)
    return s


def id_list(ids: Iterable[int], limit: int = 12) -> str:
    """``#3 #7 #9 ... (+N)``: experiment ids, the first ``limit`` of them."""
    items = list(ids)
    shown = " ".join(f"#{i}" for i in items[:limit])
    return shown + (f" ... (+{len(items) - limit})" if len(items) > limit else "")


def num(value: Any) -> float | None:
    """A number as a float; None for anything else (booleans included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def digits_for(band: float | None, default: int = 4) -> int:
    """How many decimals a number whose noise band (or spread) is ``band`` supports: down to the
    band's first significant digit and one more (0.062 -> 3, 0.004 -> 4, 0.15 -> 2), between 2
    and 6; ``default`` when the band is unknown."""
    if band is None or isinstance(band, bool) or not math.isfinite(band) or band <= 0:
        return default
    return min(6, max(2, 1 - math.floor(math.log10(band))))


def shown(v: float | None, band: float | None = None, default: int = 4, sign: bool = False) -> str:
    """A number as a person reads it: rounded to what its noise band supports (:func:`digits_for`);
    ``-`` for None. The one helper for scores in suggest, status and the report's headline."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return "-"
    d = digits_for(band, default)
    return f"{v:+.{d}f}" if sign else f"{v:.{d}f}"


def tag_sigma(store: Any, tag: str | None) -> float | None:
    """The score noise (``sigma``) the tag's baseline measured, None when unmeasured."""
    record = store.tag_record(tag) if tag else None
    noise = record.noise if record is not None and isinstance(record.noise, dict) else {}
    return num(noise.get("sigma"))


def fmt(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def signed(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:+.{digits}f}"


def secs(v: float) -> str:
    if v >= 3600:
        return f"{v / 3600:.1f} h"
    if v >= 60:
        return f"{v / 60:.1f} min"
    return f"{v:.0f} s"


def line_of(description: str, width: int = 70) -> str:
    """A description cut to ``width`` characters (already redacted text)."""
    d = clean(description) or "(no description)"
    return d if len(d) <= width else d[: width - 1] + "…"


def console(width: int) -> Any:
    """A rich console that renders to plain text (read it back with ``.file.getvalue()``)."""
    from rich.console import Console

    return Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False,
                   no_color=True, highlight=False, emoji=False, soft_wrap=False, legacy_windows=False)
