"""Bounded evidence: what a run wrote is read only within stated limits. Pure, no I/O.

train.py writes train.json and (through the evaluator) its weights decide METRICS.json; both
are untrusted text. Unbounded, a 100 MB train.json would grow the database by 200 MB and one nested 100,000
deep would raise RecursionError inside the daemon. :func:`loads_bounded` refuses a text over a
size limit or nested deeper than a depth limit *before* parsing it, with a reason that names the
limit, so no RecursionError can reach the daemon.
"""

from __future__ import annotations

import json
from typing import Any

#: Parser errors a malformed text may raise (RecursionError too, should the depth scan miss one).
_PARSE_ERRORS = (ValueError, RecursionError)


def nesting_depth(text: str, limit: int) -> int:
    """How deep ``[`` and ``{`` nest in a JSON text, strings skipped; stops counting past ``limit``
    (returns ``limit + 1`` then). A linear scan: no recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return limit + 1
        elif ch in "]}":
            depth -= 1
    return deepest


def loads_bounded(text: str, size_bytes: int, name: str, max_bytes: int, max_depth: int,
                  key: str = "[limits]") -> tuple[Any, str | None]:
    """(the parsed value, None) or (None, the problem in words).

    ``size_bytes`` is the file's size on disk (the caller may have read only a bounded prefix);
    ``name`` names the file, ``key`` the config section whose limits apply."""
    if size_bytes > max_bytes:
        return None, (f"{name} is {size_bytes} bytes, over the limit of {max_bytes} bytes "
                      f"({key} json_max_bytes): refused unread")
    if nesting_depth(text, max_depth) > max_depth:
        return None, f"{name} nests deeper than {max_depth} levels ({key} json_max_depth): refused unparsed"
    try:
        return json.loads(text), None
    except _PARSE_ERRORS as exc:
        return None, f"{name} is not valid JSON ({type(exc).__name__}: {str(exc)[:160]})"
