"""Reading a check's result into a verdict: a check that lies about having run is an error.

The caller reads the result file (or the child's stdout) and passes the text in, with the
child's exit code and whether the text was written by *this* run (the caller deleted any
old file before starting the check). The rules, in order:

1. nothing written by this run -> error (an old file is not a result);
2. empty or unreadable JSON, or not a JSON object -> error (the check did not finish);
3. a ``status`` outside pass / fail / error -> error;
4. an object that fails the verdict schema -> error (the check's output cannot be trusted);
5. ``pass`` from a process that exited non-zero (or whose exit status is unknown) -> error:
   the child contradicted itself;
6. otherwise the child's own verdict, unchanged.

A child that says fail or error keeps its word whatever its exit code: it is not a pass
either way, and its reasons are better than ours.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from looper.core.verdicts.verdict import VERDICT_KEYS, Status, Verdict

_MAX_SNIPPET = 120


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_SNIPPET else flat[: _MAX_SNIPPET - 3] + "..."


def _schema_problem(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "(object)"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def read_check_result(
    text: str | None,
    exit_code: int | None,
    written_this_run: bool,
    *,
    check: str = "check",
) -> Verdict:
    """The verdict a check's result text stands for (see the module doc for the rules).

    ``check`` names the check in the reasons ("evaluate.py", "looper verify", ...).
    Errors made here carry ``metrics={"check": ..., "exit_code": ...}``.
    """
    facts: dict[str, Any] = {"check": check, "exit_code": exit_code}
    if not written_this_run:
        return Verdict.errored(
            f"{check} wrote no result during this run (an old file is not a result)", metrics=facts
        )
    if text is None or not text.strip():
        return Verdict.errored(f"{check} wrote an empty result", metrics=facts)
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return Verdict.errored(
            f"{check} result is not readable JSON ({exc.__class__.__name__}: {_snippet(str(exc))})",
            metrics=facts,
        )
    if not isinstance(data, dict):
        return Verdict.errored(
            f"{check} result is a JSON {type(data).__name__}, not a verdict object", metrics=facts
        )
    status = data.get("status")
    if not isinstance(status, str) or status not in Status._value2member_map_:
        return Verdict.errored(
            f"{check} result has status {_snippet(json.dumps(status))}, not pass, fail or error",
            metrics=facts,
        )
    missing = [k for k in VERDICT_KEYS if k not in data]
    if missing:
        return Verdict.errored(
            f"{check} result fails the verdict schema: missing {', '.join(missing)}", metrics=facts
        )
    try:
        verdict = Verdict.model_validate_json(text, strict=True)
    except ValidationError as exc:
        return Verdict.errored(
            f"{check} result fails the verdict schema: {_schema_problem(exc)}", metrics=facts
        )
    if verdict.status is Status.PASS and exit_code != 0:
        how = "with no exit status" if exit_code is None else f"with exit code {exit_code}"
        return Verdict.errored(
            f"{check} said pass but exited {how} (a contradiction, not a pass)", metrics=facts
        )
    return verdict


def last_json_line(output: str | None) -> str | None:
    """The last non-empty line of a child's stdout that looks like a JSON object, or None.

    For checks that print one verdict as their last line (``looper verify --json``,
    ``make verify-json``): anything after the verdict means it was not the last line.
    """
    if not output:
        return None
    for line in reversed(output.splitlines()):
        stripped = line.strip()
        if not stripped:
            continue
        return stripped if stripped.startswith("{") else None
    return None


def read_check_output(stdout: str | None, exit_code: int | None, *, check: str = "check") -> Verdict:
    """:func:`read_check_result` for a check that prints its verdict as its last stdout line.

    A child's stdout is by construction written by this run; a last line that is not a
    JSON object is "no result".
    """
    line = last_json_line(stdout)
    if line is None:
        return Verdict.errored(
            f"{check} printed no verdict object as its last line", metrics={"check": check, "exit_code": exit_code}
        )
    return read_check_result(line, exit_code, True, check=check)
