"""Failures inside the training sandbox (looper/executors/sandbox.py): what it forbids is the change's doing."""

from __future__ import annotations

import pytest

from looper.core.fault.failure import FailureEvidence, classify_failure
from looper.core.verdicts.verdict import Outcome

CK = "/ws/.looper/worktrees/t"
OUT = "/ws/.looper/runs/7/main/out"
DATA = "/ws/data"


def tb(exc: str) -> str:
    return "\n".join(["LOOPER_SUMMARY steps=3", "Traceback (most recent call last):",
                      f'  File "{CK}/train.py", line 40, in <module>', "    cheat()", exc])


def sandbox_exit(code: int = 1) -> str:
    return f"looper sandbox: train.py exited {code}; writable were only {OUT} and the private /tmp"


def classify(tail: str, exit_code: int = 1) -> tuple[Outcome, str, str]:
    c = classify_failure(FailureEvidence(exit_code=exit_code, log_tail=tail, data_dir=DATA))
    return c.outcome, c.kind, c.reason


@pytest.mark.parametrize(("tail", "kind", "words"), [
    (tb(f"OSError: [Errno 30] Read-only file system: '{CK}/.git/hooks/post-commit'") + "\n" + sandbox_exit(),
     "sandbox-write", "tried to write outside $LOOPER_OUT"),
    (tb("OSError: [Errno 30] Read-only file system") + "\n" + sandbox_exit(),
     "sandbox-write", "tried to write outside $LOOPER_OUT"),
    (tb(f"OSError: [Errno 30] Read-only file system: '{OUT}/../METRICS.json'") + "\n" + sandbox_exit(),
     "sandbox-write", "tried to write outside $LOOPER_OUT"),
    (tb(f"FileNotFoundError: [Errno 2] No such file or directory: '{DATA}/pages/test/page_000.json'") + "\n"
     + sandbox_exit(), "sandbox-read", "tried to read the test pages"),
    (tb(f"FileNotFoundError: [Errno 2] No such file or directory: '{DATA}/manifest.json'") + "\n"
     + sandbox_exit(), "sandbox-read", "a part of the data folder its sandbox does not show"),
    ("LOOPER_SUMMARY steps=3\nlooper sandbox: train.py exited (status 0) but left 2 process(es) running, ended "
     "with its sandbox: pid 9: python train.py", "sandbox-survivor", "left 2 process(es) running"),
])
def test_what_the_sandbox_forbids_is_a_crash_that_names_it(tail: str, kind: str, words: str) -> None:
    outcome, got_kind, reason = classify(tail, exit_code=86 if kind == "sandbox-survivor" else 1)
    assert (outcome, got_kind) == (Outcome.CRASH, kind)
    assert words in reason


def test_its_own_output_folder_read_only_is_still_the_harness() -> None:
    tail = tb(f"OSError: [Errno 30] Read-only file system: '{OUT}/weights.pt'") + "\n" + sandbox_exit()
    outcome, kind, reason = classify(tail)
    assert (outcome, kind) == (Outcome.ERROR, "harness") and "read-only" in reason


def test_without_the_sandbox_line_a_read_only_file_system_is_the_harness() -> None:
    outcome, kind, _ = classify(tb(f"OSError: [Errno 30] Read-only file system: '{CK}/x'"))
    assert (outcome, kind) == (Outcome.ERROR, "harness")
    outcome, kind, _ = classify(tb(f"FileNotFoundError: [Errno 2] No such file or directory: '{DATA}/pages/test/p'"))
    assert (outcome, kind) == (Outcome.ERROR, "missing-data")
    outcome, kind, _ = classify(tb(f"FileNotFoundError: [Errno 2] No such file or directory: '{DATA}/manifest.json'"))
    assert (outcome, kind) == (Outcome.ERROR, "missing-data")


def test_other_failures_in_the_sandbox_are_classified_as_before() -> None:
    outcome, kind, _ = classify(tb("ValueError: bad shape") + "\n" + sandbox_exit())
    assert (outcome, kind) == (Outcome.CRASH, "traceback")
    outcome, kind, _ = classify(tb("FileNotFoundError: [Errno 2] No such file or directory: '/root/.config/x.env'")
                                + "\n" + sandbox_exit())
    assert (outcome, kind) == (Outcome.CRASH, "traceback")  # outside the data folder: an ordinary crash
    outcome, kind, _ = classify("no traceback here\n" + sandbox_exit(), exit_code=1)
    assert (outcome, kind) == (Outcome.CRASH, "unknown")
