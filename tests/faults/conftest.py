"""The fault-injection matrix uses the shared fixture workspace in tests/harness.py."""

from harness import make_ws, pages  # noqa: F401  (pytest fixtures)
