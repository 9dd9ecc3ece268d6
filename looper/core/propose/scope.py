"""The scope check of a candidate: what the agent changed, as a verdict (pure: no files, no git).

Only ``train.py`` may change; it must change, compile and import no new third-party package.
A failing verdict names its outcome in ``metrics["outcome"]`` ("discard", or "crash" for a
train.py that does not compile, with its failure ``metrics["signature"]``); a passing one says
whether the candidate is simpler than its parent (fewer code lines), which the gate uses.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable

from looper.core.fault.failure import signature_of
from looper.core.propose.pysource import parse
from looper.core.verdicts.verdict import Outcome, Verdict

# Top-level modules train.py may import without being a "new third-party import".
DECLARED_MODULES = frozenset({
    "torch", "torchvision", "ultralytics", "numpy", "PIL", "cv2", "yaml", "looper", "sqlalchemy",
    "pydantic", "rich", "typer", "git", "apprise", "pynvml",
})
MAX_NAMED = 8  # a scope violation names at most this many paths


def imports_of(source: str) -> set[str]:
    """Top-level module names a source imports (absolute imports only)."""
    names: set[str] = set()
    for node in ast.walk(parse(source, "train.py")):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def new_third_party_imports(new: str, old: str) -> list[str]:
    """Modules ``new`` imports that neither the standard library, the declared dependencies nor
    ``old`` provide."""
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    allowed = stdlib | DECLARED_MODULES | imports_of(old)
    return sorted(imports_of(new) - allowed)


def code_lines(source: str) -> int:
    """Lines that are neither blank nor comments."""
    return sum(1 for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#"))


def compile_problem(source: str) -> tuple[str, str] | None:
    """(reason, failure signature) when ``source`` does not compile, else None."""
    try:
        compile(source, "train.py", "exec")
    except SyntaxError as exc:
        return (f"train.py does not compile: {exc.msg} (line {exc.lineno})",
                signature_of(f"SyntaxError: {exc.msg}"))
    return None


def _discard(reason: str) -> Verdict:
    return Verdict.failed(reason, metrics={"outcome": Outcome.DISCARD.value})


def check(changed: Iterable[str], new_source: str, parent_source: str, rejected: str | None = None) -> Verdict:
    """The scope verdict of one proposal.

    ``changed``: the paths that differ from the parent commit; ``rejected``: why the agent's
    reply was refused (None when it was accepted). A rejected reply whose train.py does not
    compile broke the run: a crash, so that repeats count towards a stuck loop.
    """
    broken = compile_problem(new_source)
    if rejected is not None:
        return outcome_of_compile(broken) if broken else _discard(f"agent reply rejected: {rejected}")
    others = sorted(p for p in changed if p != "train.py")
    if others:
        return _discard("scope violation: the agent changed " + ", ".join(others[:MAX_NAMED])
                        + " (only train.py may change); restored")
    if new_source == parent_source:
        return _discard("the agent changed nothing in train.py")
    if broken:
        return outcome_of_compile(broken)
    new_imports = new_third_party_imports(new_source, parent_source)
    if new_imports:
        return _discard(f"new third-party import: {', '.join(new_imports)} (no new packages)")
    return Verdict.passed({"simpler": code_lines(new_source) < code_lines(parent_source)})


def outcome_of_compile(problem: tuple[str, str]) -> Verdict:
    reason, signature = problem
    return Verdict.failed(reason, metrics={"outcome": Outcome.CRASH.value, "signature": signature})
