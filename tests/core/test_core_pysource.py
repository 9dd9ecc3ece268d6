"""Python source parsed again when CPython 3.11's AST constructor fails spuriously beside another thread's parse
(looper.core.propose.pysource)."""

from __future__ import annotations

import ast

import pytest

from looper.core.propose.pysource import ATTEMPTS, MISMATCH, parse


class Flaky:
    """ast.parse, failing its first ``fails`` calls with ``error``."""

    def __init__(self, fails: int, error: Exception) -> None:
        self.fails, self.error, self.calls = fails, error, 0

    def __call__(self, source: str, filename: str) -> ast.Module:
        self.calls += 1
        if self.calls <= self.fails:
            raise self.error
        return ast.parse(source, filename)


SPURIOUS = SystemError(f"{MISMATCH} (before=18, after=11)")


@pytest.mark.parametrize("fails, calls", [(0, 1), (1, 2), (ATTEMPTS - 1, ATTEMPTS)])
def test_a_spurious_recursion_depth_error_is_parsed_again(fails, calls):
    flaky = Flaky(fails, SPURIOUS)
    tree = parse("LR0 = 0.01\n", "train.py", flaky)
    assert flaky.calls == calls and isinstance(tree.body[0], ast.Assign)


def test_past_the_attempts_the_error_stands():
    flaky = Flaky(ATTEMPTS, SPURIOUS)
    with pytest.raises(SystemError, match=MISMATCH):
        parse("x = 1\n", "train.py", flaky)
    assert flaky.calls == ATTEMPTS


@pytest.mark.parametrize("error", [SystemError("another interpreter fault"), SyntaxError("invalid syntax")])
def test_any_other_error_stands_at_once(error):
    flaky = Flaky(1, error)
    with pytest.raises(type(error)):
        parse("x = 1\n", "train.py", flaky)
    assert flaky.calls == 1


def test_a_real_parse_and_a_real_syntax_error():
    assert [type(n).__name__ for n in parse("import os\nx = 1\n").body] == ["Import", "Assign"]
    with pytest.raises(SyntaxError):
        parse("x = (\n", "train.py")


def test_looper_parses_python_source_only_through_it():
    """The lock that once kept two runs' parses apart did not cover another thread's parse: every parse is this one."""
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "looper"
    direct = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py"))
              if "ast.parse(" in p.read_text() and p.name != "pysource.py"]
    assert direct == []
