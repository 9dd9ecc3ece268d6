"""looper.core.run.probe: which attempts the GPU check makes, and what it says of them (pure)."""

from __future__ import annotations

import pytest

from looper.core.run.probe import (
    BARE,
    BOX,
    NO_MEMORY_LIMIT,
    NO_SANDBOX,
    Attempt,
    next_attempt,
    summary,
    verdict,
)

D = "cuda:1"
OK = f"looper-probe ok {D} True"
MEM = "[limits] memory_max_bytes = 6442450944"


def ok(where: str) -> Attempt:
    return Attempt(where, 0, f"some warning\n{OK}\n")


def bad(where: str, code: int | None = 1, out: str = "RuntimeError: CUDA error: out of memory") -> Attempt:
    return Attempt(where, code, out)


@pytest.mark.parametrize(("attempt", "answered"), [
    (Attempt(BOX, 0, OK), True),
    (Attempt(BOX, 0, f"{OK}\n\n"), True),
    (Attempt(BOX, 0, "looper-probe ok cuda:1 False"), False),      # a gradient of zeros: nothing was computed
    (Attempt(BOX, 0, "looper-probe ok cpu True"), False),          # another device (a fall back to the CPU)
    (Attempt(BOX, 0, f"{OK}\nSegmentation fault"), False),         # not its last line
    (Attempt(BOX, 1, OK), False),                                  # printed, then failed
    (Attempt(BOX, None, OK), False),                               # no exit in time
    (Attempt(BOX, 0, ""), False),
])
def test_an_attempt_answers_only_with_its_own_last_line_on_the_device_and_exit_0(attempt: Attempt,
                                                                                  answered: bool) -> None:
    assert attempt.answered(D) is answered


@pytest.mark.parametrize(("tried", "memory", "sandboxed", "limited", "after"), [
    ((), True, True, True, BOX),
    ((ok(BOX),), True, True, True, None),                          # the box answered: nothing more
    ((bad(BOX),), True, True, True, NO_MEMORY_LIMIT),
    ((bad(BOX), bad(NO_MEMORY_LIMIT)), True, True, True, NO_SANDBOX),
    ((bad(BOX), bad(NO_MEMORY_LIMIT), bad(NO_SANDBOX)), True, True, True, BARE),
    ((bad(BOX), bad(NO_MEMORY_LIMIT), bad(NO_SANDBOX), bad(BARE)), True, True, True, None),
    ((bad(BOX), ok(NO_MEMORY_LIMIT)), True, True, True, None),
    ((bad(BOX),), False, True, True, NO_SANDBOX),                  # no memory limit to take away
    ((bad(BOX),), False, False, True, BARE),                       # sandbox off too
    ((bad(BOX),), False, False, False, None),                      # nothing at all to take away
    ((bad(BOX),), True, False, True, NO_MEMORY_LIMIT),
    ((bad(BOX), bad(NO_MEMORY_LIMIT)), True, False, True, BARE),
])
def test_each_failed_attempt_takes_one_more_part_away(tried, memory, sandboxed, limited, after) -> None:
    assert next_attempt(D, tried, memory, sandboxed, limited) == after


def test_a_box_that_answers_is_no_problem() -> None:
    assert verdict(D, (ok(BOX),), MEM) == ""


@pytest.mark.parametrize(("tried", "has", "lacks"), [
    ((bad(BOX), ok(NO_MEMORY_LIMIT)),
     ["torch cannot use cuda:1 in a run's box (exit 1: RuntimeError: CUDA error: out of memory)",
      "without the run's memory limit it can", MEM, "RLIMIT_DATA", "Raise [limits] memory_max_bytes",
      "loop.seed_jobs"], ["sandbox"]),
    ((bad(BOX), bad(NO_MEMORY_LIMIT), ok(NO_SANDBOX)),
     ["outside the sandbox it can", "/dev/nvidia*", 'sandbox = "none"'], ["memory_max_bytes"]),
    ((bad(BOX), bad(NO_SANDBOX), ok(BARE)),
     ["without any run limit it can", "[limits] pids_max", "[limits] tmp_max_bytes"], ["outside the sandbox it can"]),
    ((bad(BOX), bad(NO_MEMORY_LIMIT), bad(NO_SANDBOX), bad(BARE, 1, "RuntimeError: Found no NVIDIA driver")),
     ["not without its memory limit, not outside the sandbox, not without any run limit either",
      "(exit 1: RuntimeError: Found no NVIDIA driver)", "cannot use cuda:1 at all"], ["it can:"]),
    ((bad(BOX, None),), ["in a run's box (no answer in 180 s)"], ["either"]),       # nothing to take away
    ((bad(BOX, 139, ""),), ["(exit 139, nothing printed)"], []),
])
def test_the_words_name_the_part_whose_taking_away_made_it_answer(tried, has, lacks) -> None:
    words = verdict(D, tried, MEM)
    for part in has:
        assert part in words, (part, words)
    for part in lacks:
        assert part not in words, (part, words)


def test_a_check_that_never_ran_in_the_box_is_a_problem_never_a_pass() -> None:
    assert verdict(D, (), MEM) == "the cuda:1 check in a run's box never ran"
    assert verdict(D, (ok(NO_SANDBOX),), MEM) == "the cuda:1 check in a run's box never ran"


def test_a_long_output_is_cut_line_by_line_keeping_the_last_three() -> None:
    said = Attempt(BOX, 1, "first\n" + "x" * 500 + "\nsecond\nlast").said()
    assert said.startswith("exit 1: " + "x" * 97 + "...") and said.endswith(" | second | last")


@pytest.mark.parametrize(("tried", "problem", "where", "line"), [
    ((ok(BOX),), "", "", "torch on cuda:1 in a run's box: ok (box)"),
    ((ok(BOX),), "", "gpu1", "torch on cuda:1 in a run's box on gpu1: ok (box)"),
    ((bad(BOX), ok(NO_MEMORY_LIMIT)), "torch cannot ...", "",
     "torch on cuda:1 in a run's box: failed (box, no memory limit)"),
])
def test_the_check_s_line_says_ok_only_without_a_problem_and_names_the_attempts(tried, problem, where, line) -> None:
    assert summary(D, tried, problem, where) == line
