"""The night's fast tests: the fixture workspace of tests/harness.py, with no pager (nothing is sent)."""

import pytest
from harness import build_ws


@pytest.fixture
def ws(tmp_path):
    """A committed fixture workspace, the sandbox off (the fake executor starts no process to box)."""
    return build_ws(tmp_path / "ws", tmp_path / "queue", "", exec_sandbox="none")
