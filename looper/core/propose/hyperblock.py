"""Read and rewrite the UPPER_CASE hyperparameter block of train.py (pure).

The block is every module-level assignment ``NAME = <literal>`` (or ``NAME: T = <literal>``)
whose name is UPPER_CASE and whose value is a Python literal. A rewrite replaces only the
span of the value token(s) on that line, found through the syntax tree; the comment after
it and every other byte of the file stay as they were.

A knob assigned more than once at module level is refused by name: rewriting one of the
assignments would not change what train.py runs, and a rewrite that does nothing while
claiming a change is the kind of lie this harness exists to prevent.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from looper.core.propose.pysource import parse

_KNOB_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


class HyperblockError(ValueError):
    """train.py's hyperparameter block is missing, ambiguous, or cannot take the change."""


@dataclass(frozen=True)
class KnobSite:
    """Where one knob's value sits in the source (1-based lines, UTF-8 byte columns)."""

    name: str
    value: Any
    lineno: int
    col: int
    end_lineno: int
    end_col: int


def _parse(source: str) -> ast.Module:
    try:
        return parse(source, "train.py")
    except SyntaxError as exc:
        raise HyperblockError(f"train.py does not parse: line {exc.lineno}: {exc.msg}") from exc


def _target_names(node: ast.AST) -> list[str]:
    """Names a module-level statement binds (enough to spot a second binding of a knob)."""
    names: list[str] = []
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
    for t in targets:
        for sub in ast.walk(t):
            if isinstance(sub, ast.Name):
                names.append(sub.id)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names.extend((a.asname or a.name).split(".")[0] for a in node.names)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.append(node.name)
    return names


def _knob_of(node: ast.stmt) -> tuple[str, ast.expr] | None:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        name, value = node.targets[0].id, node.value
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        name, value = node.target.id, node.value
    else:
        return None
    if not _KNOB_NAME.match(name):
        return None
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return name, value


def scan(source: str) -> dict[str, KnobSite]:
    """Every knob of the block with its value and position. Raises HyperblockError."""
    tree = _parse(source)
    sites: dict[str, KnobSite] = {}
    bindings: dict[str, list[int]] = {}
    for node in tree.body:
        for name in _target_names(node):
            bindings.setdefault(name, []).append(node.lineno)
        found = _knob_of(node)
        if found is None:
            continue
        name, value = found
        if name in sites:
            continue  # reported below as a second binding
        assert value.end_lineno is not None and value.end_col_offset is not None
        sites[name] = KnobSite(name, ast.literal_eval(value), value.lineno, value.col_offset,
                               value.end_lineno, value.end_col_offset)
    if not sites:
        raise HyperblockError(
            "train.py has no hyperparameter block: no module-level UPPER_CASE assignment of a "
            "literal value (expected lines like 'LR0 = 0.01  # initial learning rate')")
    twice = {n: lines for n, lines in bindings.items() if n in sites and len(lines) > 1}
    if twice:
        detail = "; ".join(f"{n} at lines {', '.join(map(str, ls))}" for n, ls in sorted(twice.items()))
        raise HyperblockError(
            f"train.py binds hyperparameters more than once at module level ({detail}); "
            "each knob must be assigned exactly once, in the block")
    return sites


def read_knobs(source: str) -> dict[str, Any]:
    """``{NAME: value}`` for every knob in train.py's block, in file order."""
    return {name: site.value for name, site in scan(source).items()}


def format_value(value: Any, like: str | None = None) -> str:
    """Python source for a literal; strings keep the quote style of ``like`` when possible."""
    if isinstance(value, str):
        text = repr(value)
        if like and like.lstrip()[:1] == '"' and '"' not in value and "'" not in value and "\\" not in text:
            text = '"' + text[1:-1] + '"'
        return text
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise HyperblockError(f"value {value!r} cannot be written as a literal")
        return repr(value)
    text = repr(value)
    try:
        if ast.literal_eval(text) != value:
            raise ValueError
    except (ValueError, SyntaxError) as exc:
        raise HyperblockError(f"value {value!r} cannot be written as a Python literal") from exc
    return text


def _same_kind(old: Any, new: Any) -> bool:
    if isinstance(old, bool) or isinstance(new, bool):
        return isinstance(old, bool) and isinstance(new, bool)
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        return True
    return type(old) is type(new)


def rewrite_knobs(source: str, changes: Mapping[str, Any]) -> str:
    """Return ``source`` with the named knobs set to new values; all else byte-identical.

    Raises HyperblockError naming the knob when it is not in the block, when the new value
    has a different type (a bool for a float, a str for an int), or when the rewritten file
    does not read back with exactly the requested values.
    """
    sites = scan(source)
    missing = [n for n in changes if n not in sites]
    if missing:
        raise HyperblockError(
            f"train.py's hyperparameter block has no knob {', '.join(missing)} "
            f"(it has: {', '.join(sites)})")
    lines = source.encode("utf-8").splitlines(keepends=True)
    # Replace from the bottom up so earlier positions stay valid.
    for name in sorted(changes, key=lambda n: (sites[n].lineno, sites[n].col), reverse=True):
        site, new = sites[name], changes[name]
        if not _same_kind(site.value, new):
            raise HyperblockError(
                f"knob {name}: new value {new!r} ({type(new).__name__}) does not match the "
                f"current {site.value!r} ({type(site.value).__name__})")
        if isinstance(site.value, float) and isinstance(new, int):
            new = float(new)
        first, last = site.lineno - 1, site.end_lineno - 1
        old_text = b"".join(lines[first:last + 1])
        # Byte offsets of the value inside the joined lines.
        start = site.col
        end = sum(len(x) for x in lines[first:last]) + site.end_col
        old_token = old_text[start:end].decode("utf-8")
        new_token = format_value(new, like=old_token).encode("utf-8")
        lines[first:last + 1] = [old_text[:start] + new_token + old_text[end:]]
    result = b"".join(lines).decode("utf-8")
    # Check our own work: the file must read back with exactly what was asked.
    after = read_knobs(result)
    for name, new in changes.items():
        if after.get(name) != new or not _same_kind(after.get(name), new):
            raise HyperblockError(f"rewriting knob {name} did not take effect (reads back {after.get(name)!r})")
    return result


def knob_changes(before: str, after: str) -> dict[str, tuple[Any, Any]]:
    """``{NAME: (old, new)}`` for knobs whose value differs between two train.py sources.

    A knob that appears or disappears is reported with ``None`` on the missing side.
    Raises HyperblockError when either source has no readable block.
    """
    a, b = read_knobs(before), read_knobs(after)
    out: dict[str, tuple[Any, Any]] = {}
    for name in list(a) + [n for n in b if n not in a]:
        old, new = a.get(name), b.get(name)
        if old != new or not _same_kind(old, new):
            out[name] = (old, new)
    return out
