"""The night's tests: the fixture workspace of tests/harness.py, through the real daemon (``make_ws``, with a
pager on loopback: ``pages``) or committed with no pager for the fast tests on the fake executor (``ws``)."""

import pytest
from harness import build_ws, make_ws, pages  # noqa: F401  (pytest fixtures)


@pytest.fixture
def ws(tmp_path):
    """A committed fixture workspace, the sandbox off (the fake executor starts no process to box)."""
    return build_ws(tmp_path / "ws", tmp_path / "queue", "", exec_sandbox="none")


@pytest.fixture(scope="session")
def this_runtime() -> dict[str, str]:
    """This process's runtime fingerprint (looper/workspace/runtimepin.py), taken once per session: a walk of
    site-packages and the standard library, about 0.3 s each time."""
    from looper.workspace.runtimepin import runtime_hashes

    return runtime_hashes()


@pytest.fixture
def runtime_taken_once(this_runtime, monkeypatch):
    """The night pins and checks the runtime as always (pin_tag stores it, integrity compares it before each
    evaluation), with the session's fingerprint copied per call instead of walked again. Only for tests on the
    fake executor: it runs nothing, so nothing changes the runtime during the test. Seeing a changed runtime
    is tested on real folders (tests/workspace/test_runtimepin.py), as a comparison (tests/core/
    test_core_runtime.py) and through the daemon (tests/security/test_agent_box.py, end-to-end tier)."""
    import looper.night.integrity
    import looper.night.tagstart

    def taken() -> dict[str, str]:
        return dict(this_runtime)

    monkeypatch.setattr(looper.night.integrity, "runtime_hashes", taken)
    monkeypatch.setattr(looper.night.tagstart, "runtime_hashes", taken)
