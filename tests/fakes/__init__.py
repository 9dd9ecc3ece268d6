"""Fakes of looper's adapters for fast tests of the night's orchestration (no subprocess, no sandbox)."""
