"""Parse program.md: the dated status line, the sections, the phases and the ranked knobs.

The parser never raises on content and never silently skips a line it does not
understand: everything it could not use is listed in ``Program.problems`` with the
section and line, e.g. ``Search plan: line 4 'LR0 0.01' has no ':'``.

Machine-readable parts of program.md:

- first non-empty line: ``Status (YYYY-MM-DD): free text``
- ``## <Section>`` headings; required: Scope, Domain facts, Hardware, Goal and tie-breakers,
  Search plan, Memory, Stop rules
- inside ``## Search plan``: phases as lines ``- Phase N: text`` (N = 1, 2, 3), and the ranked
  knobs as a numbered list, one knob a line: ``1. LR0: 0.002, 0.005, 0.02``. Values are
  Python literals (numbers, True/False, quoted strings) or bare words (strings). Text after
  `` -- `` or `` # `` on a knob line is a comment.
"""

from __future__ import annotations

import ast
import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.core.propose.plan import Knob

REQUIRED_SECTIONS = ("Scope", "Domain facts", "Hardware", "Goal and tie-breakers", "Search plan",
                     "Memory", "Stop rules")

_STATUS = re.compile(r"^\s*Status\s*\((?P<date>[^)]*)\)\s*:\s*(?P<text>.*)$")
_HEADING = re.compile(r"^##\s+(?P<title>.+?)\s*#*\s*$")
_PHASE = re.compile(r"^\s*[-*]\s*\**\s*Phase\s+(?P<n>\d+)\s*\**\s*[:.)-]\**\s*(?P<text>.*)$", re.I)
_NUMBERED = re.compile(r"^\s*(?P<rank>\d+)[.)]\s+(?P<body>.*)$")
_KNOB_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_BARE_WORD = re.compile(r"^[A-Za-z_][\w.\-/]*$")
_NUMBERISH = re.compile(r"^[+\-.\d]")


@dataclass(frozen=True)
class Program:
    status_date: dt.date | None
    status_text: str
    sections: dict[str, str]
    knobs: tuple[Knob, ...]
    phases: dict[int, str]
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _value(token: str) -> Any:
    """One candidate value; raises ValueError with a reason."""
    t = token.strip()
    if not t:
        raise ValueError("empty value")
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    try:
        v = ast.literal_eval(t)
    except (ValueError, SyntaxError) as exc:
        if _NUMBERISH.match(t) or not _BARE_WORD.match(t):
            raise ValueError(f"'{t}' is not a number, True/False, a quoted string or a bare word") from exc
        return t
    if not isinstance(v, (int, float, str, bool)):
        raise ValueError(f"'{t}' is a {type(v).__name__}; only numbers, booleans and strings are allowed")
    return v


def _split_values(text: str) -> list[str]:
    """Split on commas outside quotes."""
    out, cur, quote = [], "", ""
    for ch in text:
        if quote:
            cur += ch
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            cur += ch
        elif ch == ",":
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return "str"


def _knob_values(rest: str, where: str, name: str, problems: list[str]) -> list[Any] | None:
    """A ranked knob's candidate values, or None with the problem said: an unreadable value, none listed,
    mixed kinds, or a value listed twice."""
    values: list[Any] = []
    bad = False
    rest = rest.strip().rstrip(".")
    for token in _split_values(rest) if rest else []:
        try:
            values.append(_value(token))
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            bad = True
    if bad:
        return None
    if not values:
        problems.append(f"{where}: knob {name} lists no candidate values")
        return None
    kinds = {_kind(v) for v in values}
    if len(kinds) > 1:
        problems.append(f"{where}: knob {name} mixes value kinds ({', '.join(sorted(kinds))})")
        return None
    if len({repr(v) for v in values}) != len(values):
        problems.append(f"{where}: knob {name} lists a value twice")
        return None
    return values


def _parse_search_plan(lines: list[tuple[int, str]], problems: list[str]) -> tuple[list[Knob], dict[int, str]]:
    knobs: list[Knob] = []
    phases: dict[int, str] = {}
    seen: dict[str, int] = {}
    for lineno, raw in lines:
        m = _PHASE.match(raw)
        if m:
            n = int(m.group("n"))
            if n in phases:
                problems.append(f"Search plan: line {lineno} repeats Phase {n}")
            phases[n] = m.group("text").strip()
            continue
        m = _NUMBERED.match(raw)
        if not m:
            continue
        where = f"Search plan: line {lineno} '{raw.strip()}'"
        parts = re.split(r"\s+(?:--|#)\s", m.group("body"), maxsplit=1)
        body = parts[0].strip().strip("`").strip()
        note = parts[1].strip() if len(parts) > 1 else ""
        if ":" not in body:
            problems.append(f"{where} has no ':' (expected 'NAME: value, value, ...')")
            continue
        name, _, rest = body.partition(":")
        name = name.strip().strip("`*").strip()
        if not _KNOB_NAME.match(name):
            problems.append(f"{where}: knob name '{name}' is not an UPPER_CASE name")
            continue
        if name in seen:
            problems.append(f"{where}: knob {name} is already ranked at line {seen[name]}")
            continue
        values = _knob_values(rest, where, name, problems)
        if values is None:
            continue
        seen[name] = lineno
        expected = len(knobs) + 1
        rank = int(m.group("rank"))
        if rank != expected:
            problems.append(f"{where}: rank {rank} out of order (expected {expected})")
        knobs.append(Knob(name=name, candidates=tuple(values), rank=expected, note=note))
    if not knobs:
        problems.append("Search plan: no ranked knobs (expected a numbered list '1. NAME: value, value')")
    for n in (1, 2, 3):
        if n not in phases:
            problems.append(f"Search plan: no '- Phase {n}: ...' line")
    return knobs, phases


def parse_program(text: str) -> Program:
    """Parse program.md text. Never raises for content; see ``Program.problems``."""
    problems: list[str] = []
    lines = text.splitlines()
    status_date: dt.date | None = None
    status_text = ""
    first = next(((i, ln) for i, ln in enumerate(lines, 1) if ln.strip()), None)
    if first is None:
        problems.append("program.md is empty")
    else:
        m = _STATUS.match(first[1])
        if not m:
            problems.append(f"line {first[0]}: the first line must be the dated status line "
                            f"'Status (YYYY-MM-DD): ...', found '{first[1].strip()[:80]}'")
        else:
            status_text = m.group("text").strip()
            try:
                status_date = dt.date.fromisoformat(m.group("date").strip())
            except ValueError:
                problems.append(f"line {first[0]}: status date '{m.group('date')}' is not YYYY-MM-DD")
            if not status_text:
                problems.append(f"line {first[0]}: the status line says nothing after the date")

    sections: dict[str, str] = {}
    section_lines: dict[str, list[tuple[int, str]]] = {}
    current: str | None = None
    in_fence = False
    for i, ln in enumerate(lines, 1):
        if ln.lstrip().startswith("```"):
            in_fence = not in_fence
        m = None if in_fence else _HEADING.match(ln)
        if m:
            current = m.group("title").strip()
            if current in section_lines:
                problems.append(f"line {i}: section '## {current}' appears twice")
            section_lines[current] = []
            continue
        if current is not None:
            section_lines[current].append((i, ln))
    for title, body in section_lines.items():
        sections[title] = "\n".join(ln for _, ln in body).strip()
    lowered = {t.lower(): t for t in sections}
    for req in REQUIRED_SECTIONS:
        if req not in sections:
            hint = f" (found '## {lowered[req.lower()]}': the title must match exactly)" if req.lower() in lowered else ""
            problems.append(f"missing section '## {req}'{hint}")
        elif not sections[req]:
            problems.append(f"section '## {req}' is empty")

    knobs: list[Knob] = []
    phases: dict[int, str] = {}
    if "Search plan" in section_lines:
        knobs, phases = _parse_search_plan(section_lines["Search plan"], problems)
    return Program(status_date, status_text, sections, tuple(knobs), phases, problems)


def load_program(path: str | Path) -> Program:
    """Read and parse program.md; a missing file is one problem, not an exception."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Program(None, "", {}, (), {}, [f"{p}: file not found"])
    except (OSError, UnicodeDecodeError) as exc:
        return Program(None, "", {}, (), {}, [f"{p}: cannot read: {exc}"])
    return parse_program(text)


def problems_against_train(program: Program, train_knobs: dict[str, Any]) -> list[str]:
    """What in the search plan does not fit train.py's block (missing knobs, wrong value kinds)."""
    out: list[str] = []
    for knob in program.knobs:
        if knob.name not in train_knobs:
            out.append(f"Search plan: knob {knob.name} is not in train.py's hyperparameter block")
            continue
        cur = train_knobs[knob.name]
        for v in knob.candidates:
            if _kind(v) != _kind(cur) or (isinstance(cur, int) and not isinstance(cur, bool)
                                           and isinstance(v, float) and not v.is_integer()):
                out.append(f"Search plan: knob {knob.name} candidate {v!r} does not fit "
                           f"train.py's value {cur!r}")
    return out
