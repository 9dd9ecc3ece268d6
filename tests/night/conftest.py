"""The night's tests: the fixture workspace of tests/harness.py, through the real daemon (``make_ws``, with a
pager on loopback: ``pages``) or committed with no pager for the fast tests on the fake executor (``ws``)."""

import pytest
from harness import build_ws, make_ws, pages  # noqa: F401  (pytest fixtures)


@pytest.fixture
def ws(tmp_path):
    """A committed fixture workspace, the sandbox off (the fake executor starts no process to box)."""
    return build_ws(tmp_path / "ws", tmp_path / "queue", "", exec_sandbox="none")
