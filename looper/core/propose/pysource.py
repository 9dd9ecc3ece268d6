"""Python source parsed into its tree (train.py's, the fixed files'), the one way looper parses it.

CPython 3.11's AST constructor keeps its recursion depth in the interpreter's state, which threads share
(python/cpython#106905): a parse interleaved with another thread's can fail with a spurious ``SystemError: AST
constructor recursion depth mismatch`` although the source is fine, and with seeds side by side and workers at
once a night parses in several threads (the integrity check after each run, the agent's proposal, the knob
block). Two runs side by side ended a night with it, and a test night did again where another thread parsed
without the lock that was meant to prevent it. :func:`parse` parses again when that is the error: the tree is
built whole either way, only the constructor's count was disturbed."""

from __future__ import annotations

import ast
from collections.abc import Callable

ATTEMPTS = 5  # the spurious error, forced (4 threads, a thread switch every microsecond): 1 parse in 1,600
MISMATCH = "AST constructor recursion depth mismatch"


def parse(source: str, filename: str = "<unknown>", parser: Callable[[str, str], ast.Module] = ast.parse) -> ast.Module:
    """``ast.parse(source, filename)``, again up to :data:`ATTEMPTS` times in all while it fails with CPython's
    spurious recursion-depth :class:`SystemError`; any other error (a :class:`SyntaxError`) at once. ``parser``:
    ``ast.parse`` (a test's stand-in)."""
    attempt = 1
    while True:
        try:
            return parser(source, filename)
        except SystemError as exc:
            if MISMATCH not in str(exc) or attempt >= ATTEMPTS:
                raise
            attempt += 1
